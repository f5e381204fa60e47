"""The "fused" attention lowering: ONNX Runtime's com.microsoft attention contrib ops.

Traced from the model itself, in three steps (see export/lowering/attention.py for the hooks):

1. While tracing, every `MultiHeadAttention` module runs `fused_forward`: the model's own W^Q,
   W^K, W^V, W^O projections around one custom op of export/lowering/fused_ops.py (whose eager bodies are
   the model's `scaled_dot_product_attention`): `translator::attention` (cross-attention over
   precomputed keys/values; `translator::attention_weights` for the last decoder layer, whose
   weights are the `cross_attentions` output), `translator::packed_attention` (self-attention
   without a cache: the encoder) or `translator::self_attention` (new keys/values appended to a
   past cache, returning the present cache).
2. The translation table emits each custom op as one placeholder node of the private domain
   `translator.lowering`.
3. `rewrite` turns those nodes into `com.microsoft.MultiHeadAttention` (query, key, value, bias,
   key_padding_mask[, -, past_key, past_value]) or, for packed self-attention,
   `com.microsoft.Attention` (input, packed weights, bias, mask): the projections' biases and the
   masking happen inside the kernel. Masks reach the kernel as int32 (1 = attend), not as an
   additive bias: the source padding mask is the graph's int64 mask input cast once
   (`KEY_PADDING`, set by the export wrappers), shared by every layer; `mask_filter_value` is
   float32's minimum, the model's fill value, so even a fully masked row matches PyTorch. T5's
   relative position bias, computed once per stack in the graph, is the kernels' `attention_bias`
   input of every self-attention node (Attention's input 5, MultiHeadAttention's 5); cross-attention
   has none.

Per decoder layer this replaces about 25 nodes (reshapes, transposes, concat, masking, softmax,
two matmuls) by one kernel that also appends to the cache. The graphs keep the names, inputs and
outputs of `interface/names.py`, so the runtime does not change; ONNX Runtime's CPU and CUDA
providers run these ops.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import onnx
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from export.lowering.attention import LOWERINGS, AttentionLowering
from export.lowering.fused_ops import (
    DOMAIN,
    TRANSLATIONS,
    attend_heads,
    attention,
    attention_weights,
    packed_attention,
    self_attention,
    split_heads,
)
from model.transformer import KV, MultiHeadAttention, Transformer

__all__ = ["CACHE_LENGTHS", "CROSS_LENGTHS", "DOMAIN", "KEY_PADDING", "MS_DOMAIN", "FusedAttention",
           "attend_heads", "fused_forward", "split_heads"]

MS_DOMAIN = "com.microsoft"
CACHE_LENGTHS = "_cache_lengths"  # (seqlens_k, total_sequence_length) of an in-place cache, while traced
CROSS_LENGTHS = "_cross_lengths"  # (encoder_seqlens_k, encoder_total_sequence_length), while traced
KEY_PADDING = "_key_padding"  # int32 (B, S) source mask (1 = real token), while traced
PACKED = "_packed_qkv"  # ((W^Q; W^K; W^V)^T, (b^Q; b^K; b^V), (b^Q; 0; 0)) while traced
WITH_WEIGHTS = "_with_weights"  # set on the one module whose attention weights are a graph output
MASK_FILTER_VALUE = float(torch.finfo(torch.float32).min)  # the model's masked_fill value


def pack(m: MultiHeadAttention) -> tuple[Tensor, Tensor, Tensor]:
    """Packed projection weights (D, 3D), their bias (3D,), and the bias of Q alone (3D,)."""
    w = torch.cat([m.w_q.weight, m.w_k.weight, m.w_v.weight]).t().contiguous()
    b = torch.cat([m.w_q.bias, m.w_k.bias, m.w_v.bias])
    return w, b, torch.cat([m.w_q.bias, m.w_q.bias.new_zeros(2 * m.w_q.bias.numel())])


def kernel_mask(m: MultiHeadAttention, mask: Tensor | None, b: int, tq: int, tk: int) -> Tensor:
    """The kernel's int32 mask (1 = attend): `KEY_PADDING` if set, else the model's mask cast."""
    padding = getattr(m, KEY_PADDING, None)
    if padding is not None:
        return padding
    if mask is None:
        return torch.ones(b, tk, dtype=torch.int32)
    if mask.size(-2) == 1:  # (B|1, 1, Tk): the same for every query, a key padding mask (B, Tk)
        return mask[:, 0].expand(b, tk).to(torch.int32)
    return mask.expand(b, tq, tk).to(torch.int32)  # (B|1, Tq, Tk) -> (B, Tq, Tk)


def fused_forward(
    self: MultiHeadAttention,
    query: Tensor,
    key_value: Tensor | None = None,
    mask: Tensor | None = None,
    past: KV | None = None,
    kv: KV | None = None,
    bias: Tensor | None = None,
) -> tuple[Tensor, KV, None]:
    """MultiHeadAttention.forward with the attention core as one custom op (no weights returned).

    Self-attention projects Q, K and V with one packed matmul (W^Q; W^K; W^V) and leaves their
    bias to the fused op; cross-attention projects only Q (K/V are precomputed), its bias in the op.
    A position bias (self-attention only) is the op's attention_bias.
    """
    h = self.n_heads
    w, b_qkv, q_bias = getattr(self, PACKED, None) or pack(self)
    if bias is not None and (kv is not None or not (key_value is None or key_value is query)):
        raise ValueError("a position bias is for self-attention only (T5's cross-attention has none)")
    if kv is not None and getattr(self, CROSS_LENGTHS, None) is not None:  # per-row source lengths
        q = self.w_q(query)  # (B, Tq, D) with its bias: GroupQueryAttention takes none
        lengths = getattr(self, CROSS_LENGTHS)
        out, weights = torch.ops.translator.cached_cross_attention(q, kv[0], kv[1], *lengths, h)
        return self.w_o(out), kv, weights if getattr(self, WITH_WEIGHTS, False) else None
    if kv is not None:  # precomputed cross-attention K/V (B, H, S, Dh)
        q = F.linear(query, self.w_q.weight)  # (B, Tq, D), bias added by the kernel
        m = kernel_mask(self, mask, q.size(0), q.size(1), kv[0].size(2))
        if getattr(self, WITH_WEIGHTS, False):  # the weights are a graph output (alignment)
            out, weights = attention_weights(q, kv[0], kv[1], q_bias, m, h)
            return self.w_o(out), kv, weights
        return self.w_o(attention(q, kv[0], kv[1], q_bias, m, h)), kv, None
    lengths = getattr(self, CACHE_LENGTHS, None)
    if past is not None and lengths is not None:  # fixed-size cache updated in place (lowering/inplace.py)
        qkv = query @ w + b_qkv  # (B, T, 3D)
        out, pk, pv = torch.ops.translator.cached_self_attention(qkv, past[0], past[1], *lengths, h, bias)
        return self.w_o(out), (pk, pv), None
    shared = key_value is None or key_value is query
    if shared:  # one packed projection
        q, k, v = (query @ w).chunk(3, dim=-1)  # (B, T, D) each
    else:
        sources = ((query, self.w_q), (key_value, self.w_k), (key_value, self.w_v))
        q, k, v = (F.linear(x, lin.weight) for x, lin in sources)
    if past is None:
        m = kernel_mask(self, mask, q.size(0), q.size(1), k.size(1))
        out = packed_attention(query, w, b_qkv, m, h, bias) if shared else attention(q, k, v, b_qkv, m, h)
        b_k, b_v = b_qkv.chunk(3)[1:]
        present = (split_heads(k + b_k, h), split_heads(v + b_v, h))  # traced away when unused
    else:
        m = kernel_mask(self, mask, q.size(0), q.size(1), past[0].size(2) + k.size(1))
        out, pk, pv = self_attention(q, k, v, b_qkv, past[0], past[1], m, h, bias)
        present = (pk, pv)
    return self.w_o(out), present, None


def packed_cross_kv(self: Transformer, memory: Tensor) -> list[KV]:
    """Transformer.cross_kv with one matmul for the keys and values of every decoder layer.

    (W^K_1; W^V_1; ...; W^K_n; W^V_n) projects memory (B, S, D) at once; the result, split into
    2n * H heads, is cut into each layer's (key, value), each (B, H, S, Dh).
    """
    w, b = getattr(self, PACKED, None) or pack_cross_kv(self)
    n, h = len(self.decoder.layers), self.cfg.n_heads
    kv = split_heads(memory @ w + b, 2 * n * h).split(h, dim=1)  # 2n x (B, H, S, Dh)
    return [(kv[2 * i], kv[2 * i + 1]) for i in range(n)]


def pack_cross_kv(model: Transformer) -> tuple[Tensor, Tensor]:
    """Every decoder layer's cross-attention W^K, W^V packed (D, 2nD), and their bias (2nD,)."""
    lins = [lin for layer in model.decoder.layers for lin in (layer.cross_attn.w_k, layer.cross_attn.w_v)]
    return torch.cat([lin.weight for lin in lins]).t().contiguous(), torch.cat([lin.bias for lin in lins])


def _weighted(model: nn.Module) -> MultiHeadAttention | None:
    """The last decoder layer's cross-attention, whose weights are the `cross_attentions` output."""
    core = getattr(model, "model", model)
    if isinstance(core, Transformer) and len(core.decoder.layers):
        return core.decoder.layers[-1].cross_attn
    return None


class FusedAttention(AttentionLowering):
    """Attention as com.microsoft.MultiHeadAttention / Attention (ONNX Runtime CPU and CUDA providers)."""

    name = "fused"

    @contextmanager
    def applied(self, model: nn.Module) -> Iterator[None]:
        """Route the attention modules through `fused_forward` while the model is traced."""
        modules = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
        core = getattr(model, "model", model)  # the export wrappers hold the Transformer as .model
        cores = [core] if isinstance(core, Transformer) else []
        weighted = _weighted(model)
        if weighted is not None:
            setattr(weighted, WITH_WEIGHTS, True)
        with torch.no_grad():  # constants of the graph (folded here, not by the exporter)
            for m in modules:
                m.forward = types.MethodType(fused_forward, m)
                setattr(m, PACKED, pack(m))
            for t in cores:
                t.cross_kv = types.MethodType(packed_cross_kv, t)
                setattr(t, PACKED, pack_cross_kv(t))
        try:
            yield
        finally:
            for m in modules:
                del m.forward  # back to the class's forward
                delattr(m, PACKED)
            for t in cores:
                del t.cross_kv
                delattr(t, PACKED)
            if weighted is not None:
                delattr(weighted, WITH_WEIGHTS)

    def translation_table(self) -> dict[Callable, Callable]:
        """The custom ops -> placeholder nodes."""
        return dict(TRANSLATIONS)

    def rewrite(self, proto: onnx.ModelProto, graph: str) -> onnx.ModelProto:
        """Placeholder nodes -> com.microsoft.MultiHeadAttention / Attention; fix the opset imports."""
        softmaxes = []  # (position, node) to insert after AttentionWeights nodes
        for pos, node in enumerate(proto.graph.node):
            if node.domain != DOMAIN:
                continue
            ins, op = list(node.input), "MultiHeadAttention"
            if node.op_type == "AttentionWeights":  # MHA's 4th output is Q K^T scaled + mask: softmax it
                scores = f"{node.output[1]}_scores"  # typed here: ORT cannot infer MHA's 4th output
                typed = onnx.helper.make_tensor_value_info(scores, onnx.TensorProto.FLOAT, None)
                proto.graph.value_info.append(typed)
                softmaxes.append((pos + 1, onnx.helper.make_node(
                    "Softmax", [scores], [node.output[1]], axis=-1, name=f"{node.name}_softmax")))
                outs = [node.output[0], "", "", scores]
                del node.output[:]
                node.output.extend(outs)
            elif node.op_type == "PackedAttention":  # input, weight, bias, mask: the same for Attention
                op = "Attention"
                ins = [*ins[:4], "", *ins[4:]]  # attention_bias is Attention's input 5 (4: past)
            elif node.op_type == "SelfAttention":  # query, key, value, bias, past_key, past_value, mask
                ins = [*ins[:4], ins[6], ins[7] if len(ins) > 7 else "", ins[4], ins[5]]
            # Attention(Weights): query, key, value, bias, mask are MHA's first five inputs as they are
            while ins and not ins[-1]:  # no empty trailing inputs (no position bias)
                ins.pop()
            del node.input[:]
            node.input.extend(ins)
            node.attribute.append(onnx.helper.make_attribute("mask_filter_value", MASK_FILTER_VALUE))
            node.op_type, node.domain = op, MS_DOMAIN
        for pos, softmax in reversed(softmaxes):
            proto.graph.node.insert(pos, softmax)
        imports = [op for op in proto.opset_import if op.domain not in (DOMAIN, MS_DOMAIN)]
        del proto.opset_import[:]
        proto.opset_import.extend([*imports, onnx.helper.make_opsetid(MS_DOMAIN, 1)])
        return proto


LOWERINGS[FusedAttention.name] = FusedAttention
