"""The "fused" attention lowering: ONNX Runtime's `com.microsoft.MultiHeadAttention` contrib op.

Traced from the model itself, in three steps (see export/attention.py for the hooks):

1. While tracing, every `MultiHeadAttention` module (except the last decoder layer's
   cross-attention, whose weights are the `cross_attentions` output) runs `fused_forward`: the
   model's own W^Q, W^K, W^V, W^O projections around one custom op, `translator::attention`
   (keys/values (B, L, D) or precomputed (B, H, L, Dh)) or `translator::self_attention` (new
   keys/values appended to a past cache, returning the present cache). Their eager bodies are the
   model's `scaled_dot_product_attention`; masks become an additive bias (B, 1, Tq, Tk).
2. The translation table emits each custom op as one node of the private domain
   `translator.lowering` (schemas registered with `onnx.defs`, so the exporter knows their
   outputs).
3. `rewrite` turns those nodes into `com.microsoft.MultiHeadAttention` (num_heads, default scale
   1/sqrt(Dh)) with inputs (query, key, value, -, -, attention_bias[, past_key, past_value]).

Per decoder layer this replaces about 25 nodes (reshapes, transposes, concat, masking, softmax,
two matmuls) by one kernel that also appends to the cache. The graphs keep the names, inputs and
outputs of `export/names.py`, so the runtime does not change; ONNX Runtime's CPU and CUDA
providers run this op.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import onnx
import onnxscript
import torch
import torch.nn.functional as F
from onnx.defs import OpSchema
from torch import Tensor, nn

from export.attention import LOWERINGS, AttentionLowering
from export.fusions import fuse_skip_layer_norm
from model.transformer import KV, MultiHeadAttention, Transformer, scaled_dot_product_attention

DOMAIN = "translator.lowering"
MS_DOMAIN = "com.microsoft"
CACHE_LENGTHS = "_cache_lengths"  # (seqlens_k, total_sequence_length) of an in-place cache, while traced
PACKED = "_packed_qkv"  # attribute holding ((W^Q; W^K; W^V)^T, (b^Q; b^K; b^V)) while traced
WITH_WEIGHTS = "_with_weights"  # set on the one module whose attention weights are a graph output
_FLOATS = ["tensor(float)", "tensor(float16)"]


def _register_schemas() -> None:
    """Declare the placeholder ops to onnx.defs once (the exporter reads their output counts)."""
    param = OpSchema.FormalParameter
    specs = {
        "Attention": (("query", "key", "value", "attention_bias"), ("output",)),
        "AttentionWeights": (("query", "key", "value", "attention_bias"), ("output", "weights")),
        "BiasedAttention": (("query", "key", "value", "bias", "attention_bias"), ("output",)),
        "SelfAttention": (("query", "key", "value", "bias", "past_key", "past_value", "attention_bias"),
                          ("output", "present_key", "present_value")),
    }
    for name, (inputs, outputs) in specs.items():
        if onnx.defs.has(name, DOMAIN):
            continue
        onnx.defs.register_schema(OpSchema(
            name, DOMAIN, 1,
            inputs=[param(n, "T") for n in inputs], outputs=[param(n, "T") for n in outputs],
            type_constraints=[("T", _FLOATS, "float tensors")],
            attributes=[OpSchema.Attribute("num_heads", OpSchema.AttrType.INT, "number of heads")],
        ))


_register_schemas()
_lowering_ops = onnxscript.values.Opset(DOMAIN, 1)


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, L, D) -> (B, H, L, Dh); 4-D input is already split."""
    if x.dim() == 4:
        return x
    b, n, d = x.shape
    return x.view(b, n, n_heads, d // n_heads).transpose(1, 2)


def attend_heads(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """The model's attention over split heads (B, H, L, Dh), heads merged back: (B, Tq, D)."""
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    b, h, t, dh = out.shape
    return out.transpose(1, 2).reshape(b, t, h * dh)


def _attend(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, n_heads: int) -> Tensor:
    """softmax(Q K^T / sqrt(d_k) + bias) V with heads merged back: (B, Tq, D)."""
    mask = bias == 0  # the bias is 0 where allowed, the dtype's minimum elsewhere
    return attend_heads(*(split_heads(x, n_heads) for x in (q, k, v)), mask)


@torch.library.custom_op("translator::attention", mutates_args=())
def attention(query: Tensor, key: Tensor, value: Tensor, bias: Tensor, num_heads: int) -> Tensor:
    """Attention of query (B, Tq, D) over key/value (B, Tk, D) or (B, H, Tk, Dh) -> (B, Tq, D)."""
    return _attend(query, key, value, bias, num_heads)


@attention.register_fake
def _attention_fake(query: Tensor, key: Tensor, value: Tensor, bias: Tensor, num_heads: int) -> Tensor:
    """Output shape for tracing."""
    return query.new_empty(query.shape)


@torch.library.custom_op("translator::attention_weights", mutates_args=())
def attention_weights(query: Tensor, key: Tensor, value: Tensor, bias: Tensor, num_heads: int
                      ) -> tuple[Tensor, Tensor]:
    """As `attention`, also returning the attention weights (B, H, Tq, Tk)."""
    heads = [split_heads(x, num_heads) for x in (query, key, value)]
    out, weights = scaled_dot_product_attention(*heads, bias == 0)
    b, h, t, dh = out.shape
    return out.transpose(1, 2).reshape(b, t, h * dh), weights


@attention_weights.register_fake
def _attention_weights_fake(query: Tensor, key: Tensor, value: Tensor, bias: Tensor, num_heads: int
                            ) -> tuple[Tensor, Tensor]:
    """Output shapes for tracing."""
    b, t, _ = query.shape
    return query.new_empty(query.shape), query.new_empty(b, num_heads, t, bias.shape[-1])


@torch.library.custom_op("translator::biased_attention", mutates_args=())
def biased_attention(query: Tensor, key: Tensor, value: Tensor, bias: Tensor, attention_bias: Tensor,
                     num_heads: int) -> Tensor:
    """Self-attention without a cache; bias (3D) is the Q/K/V projections' bias, added here."""
    q, k, v = (x + b for x, b in zip((query, key, value), bias.chunk(3), strict=True))
    return _attend(q, k, v, attention_bias, num_heads)


@biased_attention.register_fake
def _biased_attention_fake(query: Tensor, key: Tensor, value: Tensor, bias: Tensor, attention_bias: Tensor,
                           num_heads: int) -> Tensor:
    """Output shape for tracing."""
    return query.new_empty(query.shape)


@torch.library.custom_op("translator::self_attention", mutates_args=())
def self_attention(
    query: Tensor, key: Tensor, value: Tensor, bias: Tensor, past_key: Tensor, past_value: Tensor,
    attention_bias: Tensor, num_heads: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """New Q/K/V (B, T, D) + their bias (3D); K/V appended to the past (B, H, P, Dh).

    Returns the output (B, T, D) and the present key and value (B, H, P+T, Dh).
    """
    q, k, v = (x + b for x, b in zip((query, key, value), bias.chunk(3), strict=True))
    k = torch.cat([past_key, split_heads(k, num_heads)], dim=2)
    v = torch.cat([past_value, split_heads(v, num_heads)], dim=2)
    return _attend(q, k, v, attention_bias, num_heads), k.contiguous(), v.contiguous()


@self_attention.register_fake
def _self_attention_fake(
    query: Tensor, key: Tensor, value: Tensor, bias: Tensor, past_key: Tensor, past_value: Tensor,
    attention_bias: Tensor, num_heads: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """Output shapes for tracing."""
    b, h, p, dh = past_key.shape
    present = (b, h, p + key.shape[1], dh)
    return query.new_empty(query.shape), past_key.new_empty(present), past_value.new_empty(present)


def _attention_onnx(query, key, value, attention_bias, num_heads: int):
    """translator::attention -> one placeholder node."""
    return _lowering_ops.Attention(query, key, value, attention_bias, num_heads=num_heads)


def _attention_weights_onnx(query, key, value, attention_bias, num_heads: int):
    """translator::attention_weights -> one placeholder node with two outputs."""
    return _lowering_ops.AttentionWeights(query, key, value, attention_bias, num_heads=num_heads)


def _biased_attention_onnx(query, key, value, bias, attention_bias, num_heads: int):
    """translator::biased_attention -> one placeholder node."""
    return _lowering_ops.BiasedAttention(query, key, value, bias, attention_bias, num_heads=num_heads)


def _self_attention_onnx(query, key, value, bias, past_key, past_value, attention_bias, num_heads: int):
    """translator::self_attention -> one placeholder node with three outputs."""
    return _lowering_ops.SelfAttention(query, key, value, bias, past_key, past_value, attention_bias,
                                       num_heads=num_heads)


def _bias(mask: Tensor | None, like: Tensor, tq: int, tk: int) -> Tensor:
    """Boolean mask (B|1, Tq|1, Tk) -> additive bias (B, 1, Tq, Tk): 0 allowed, dtype min masked."""
    b = like.size(0)
    if mask is None:
        return like.new_zeros(b, 1, tq, tk)
    zero = like.new_zeros(())
    bias = torch.where(mask.unsqueeze(1), zero, torch.finfo(like.dtype).min)
    return bias.expand(b, 1, tq, tk)


def fused_forward(
    self: MultiHeadAttention,
    query: Tensor,
    key_value: Tensor | None = None,
    mask: Tensor | None = None,
    past: KV | None = None,
    kv: KV | None = None,
) -> tuple[Tensor, KV, None]:
    """MultiHeadAttention.forward with the attention core as one custom op (no weights returned).

    Self-attention projects Q, K and V with one packed matmul (W^Q; W^K; W^V) and leaves their
    bias to the fused op; cross-attention projects only Q (K/V are precomputed).
    """
    h = self.n_heads
    if kv is not None:  # precomputed cross-attention K/V (B, H, S, Dh)
        q = self.w_q(query)  # (B, Tq, D)
        bias = _bias(mask, q, q.size(1), kv[0].size(2))
        if getattr(self, WITH_WEIGHTS, False):  # the weights are a graph output (alignment)
            out, weights = attention_weights(q, kv[0], kv[1], bias, h)
            return self.w_o(out), kv, weights
        return self.w_o(attention(q, kv[0], kv[1], bias, h)), kv, None
    layers = (self.w_q, self.w_k, self.w_v)
    packed: tuple[Tensor, Tensor] | None = getattr(self, PACKED, None)
    bias = packed[1] if packed is not None else torch.cat([lin.bias for lin in layers])  # (3D,)
    w = packed[0] if packed is not None else torch.cat([lin.weight for lin in layers]).t()  # (D, 3D)
    lengths = getattr(self, CACHE_LENGTHS, None)
    if past is not None and lengths is not None:  # fixed-size cache updated in place (export/inplace.py)
        qkv = query @ w + bias  # (B, T, 3D)
        out, pk, pv = torch.ops.translator.cached_self_attention(qkv, past[0], past[1], *lengths, h)
        return self.w_o(out), (pk, pv), None
    if key_value is None or key_value is query:  # one packed projection
        q, k, v = (query @ w).chunk(3, dim=-1)  # (B, T, D) each
    else:
        sources = (query, key_value, key_value)
        q, k, v = (F.linear(x, lin.weight) for x, lin in zip(sources, layers, strict=True))
    if past is None:
        out = biased_attention(q, k, v, bias, _bias(mask, q, q.size(1), k.size(1)), h)
        b_k, b_v = bias.chunk(3)[1:]
        present = (split_heads(k + b_k, h), split_heads(v + b_v, h))
    else:
        total = past[0].size(2) + k.size(1)
        out, pk, pv = self_attention(q, k, v, bias, past[0], past[1], _bias(mask, q, q.size(1), total), h)
        present = (pk, pv)
    return self.w_o(out), present, None


def _weighted(model: nn.Module) -> MultiHeadAttention | None:
    """The last decoder layer's cross-attention, whose weights are the `cross_attentions` output."""
    core = getattr(model, "model", model)  # the export wrappers hold the Transformer as .model
    if isinstance(core, Transformer) and len(core.decoder.layers):
        return core.decoder.layers[-1].cross_attn
    return None


class FusedAttention(AttentionLowering):
    """Attention as com.microsoft.MultiHeadAttention (ONNX Runtime CPU and CUDA providers)."""

    name = "fused"

    @contextmanager
    def applied(self, model: nn.Module) -> Iterator[None]:
        """Route the attention modules through `fused_forward` while the model is traced."""
        modules = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
        weighted = _weighted(model)
        if weighted is not None:
            setattr(weighted, WITH_WEIGHTS, True)
        for m in modules:
            m.forward = types.MethodType(fused_forward, m)
            with torch.no_grad():  # constants of the graph (folded here, not by the exporter)
                w = torch.cat([m.w_q.weight, m.w_k.weight, m.w_v.weight]).t().contiguous()  # (D, 3D)
                b = torch.cat([m.w_q.bias, m.w_k.bias, m.w_v.bias])  # (3D,)
            setattr(m, PACKED, (w, b))
        try:
            yield
        finally:
            for m in modules:
                del m.forward  # back to the class's forward
                delattr(m, PACKED)
            if weighted is not None:
                delattr(weighted, WITH_WEIGHTS)

    def translation_table(self) -> dict[Callable, Callable]:
        """The custom ops -> placeholder nodes."""
        return {
            torch.ops.translator.attention.default: _attention_onnx,
            torch.ops.translator.attention_weights.default: _attention_weights_onnx,
            torch.ops.translator.biased_attention.default: _biased_attention_onnx,
            torch.ops.translator.self_attention.default: _self_attention_onnx,
        }

    def rewrite(self, proto: onnx.ModelProto, graph: str) -> onnx.ModelProto:
        """Placeholder nodes -> com.microsoft.MultiHeadAttention; fix the opset imports."""
        softmaxes = []  # (position, node) to insert after AttentionWeights nodes
        for pos, node in enumerate(proto.graph.node):
            if node.domain != DOMAIN:
                continue
            ins = list(node.input)
            if node.op_type == "AttentionWeights":  # MHA's 4th output is Q K^T scaled + bias: softmax it
                new_inputs = [*ins[:3], "", "", ins[3]]
                scores = f"{node.output[1]}_scores"  # typed here: ORT cannot infer MHA's 4th output
                typed = onnx.helper.make_tensor_value_info(scores, onnx.TensorProto.FLOAT, None)
                proto.graph.value_info.append(typed)
                softmaxes.append((pos + 1, onnx.helper.make_node(
                    "Softmax", [scores], [node.output[1]], axis=-1, name=f"{node.name}_softmax")))
                outs = [node.output[0], "", "", scores]
                del node.output[:]
                node.output.extend(outs)
            elif node.op_type == "Attention":  # query, key, value, attention_bias
                new_inputs = [*ins[:3], "", "", ins[3]]
            elif node.op_type == "BiasedAttention":  # query, key, value, bias, attention_bias
                new_inputs = [*ins[:4], "", ins[4]]
            else:  # query, key, value, bias, past_key, past_value, attention_bias
                new_inputs = [*ins[:4], "", ins[6], ins[4], ins[5]]
            del node.input[:]
            node.input.extend(new_inputs)
            node.op_type, node.domain = "MultiHeadAttention", MS_DOMAIN
        for pos, softmax in reversed(softmaxes):
            proto.graph.node.insert(pos, softmax)
        fuse_skip_layer_norm(proto)
        imports = [op for op in proto.opset_import if op.domain not in (DOMAIN, MS_DOMAIN)]
        del proto.opset_import[:]
        proto.opset_import.extend([*imports, onnx.helper.make_opsetid(MS_DOMAIN, 1)])
        return proto


LOWERINGS[FusedAttention.name] = FusedAttention
