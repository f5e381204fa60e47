"""The "inplace" lowering: fused attention plus a fixed-size self-attention cache updated in place.

Everything of the "fused" lowering (export/lowering/fused.py), and the decoder's self-attention becomes
ONNX Runtime's `com.microsoft.GroupQueryAttention` (num_heads = kv_num_heads = H): packed QKV
in, the new keys/values written into a cache buffer of fixed length `max_cache` at each row's
own position, `seqlens_k` (int32 (B,), per row: cache length after this step minus one) saying
how far each row attends. Bind the same buffer as `past_key_values.*` input and `present.*`
output (IO binding) and no cache byte is copied per step; rows of different lengths share one
run, which is what continuous batching needs. The decoder's interface is `names.decoder_inputs(
n, "inplace")`: `seqlens_k` and `total_sequence_length` replace the self-attention mask.

How it is traced: `InplaceDecoderGraph` (export/export.py) hands the lengths to every decoder
self-attention module (`CACHE_LENGTHS` attribute) for the duration of the trace; `fused_forward`
sees them and calls the custom op `translator::cached_self_attention`, whose eager body below
is the same maths in PyTorch (used by the tests and by verification through the op itself).
ONNX Runtime restricts GroupQueryAttention with a non-empty cache to one new token per row when
the batch has several rows (the cross-attention below always has one); the service decodes one
token per step. T5's relative position bias is the kernel's `attention_bias` (input 10): traced over
the buffer's columns (a key's position is its column), it is cut in the graph to the
`total_sequence_length` columns the kernel takes (ONNX Runtime 1.31 refuses any other width).

Cross-attention is GroupQueryAttention too, in its shared-KV form (no new keys/values, `causal`
0): the encoder's K/V are the "cache" and `encoder_seqlens_k` (source length - 1 per row) says
how far each row attends, so a row's cost follows its own source length instead of the longest
source of the batch, and no padding mask is needed (`translator::cached_cross_attention`). ONNX
Runtime's CUDA provider runs GroupQueryAttention in fp16 only and never with a QK output, so the
fp16 variant takes this cross-attention as MultiHeadAttention instead (export/variants/cuda_form.py).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import onnxscript
import torch
from onnx.defs import OpSchema
from torch import Tensor

from export.lowering.attention import LOWERINGS
from export.lowering.fused import DOMAIN, MS_DOMAIN, FusedAttention, attend_heads, split_heads
from model.transformer import scaled_dot_product_attention

PLACEHOLDERS = {  # op: (inputs, outputs); seqlens_k and total_sequence_length are int32 lengths
    "CachedSelfAttention": (("qkv", "past_key", "past_value", "seqlens_k", "total_sequence_length",
                             "attention_bias"), ("output", "present_key", "present_value")),
    "CachedCrossAttention": (("query", "key", "value", "seqlens_k", "total_sequence_length"),
                             ("output", "weights")),
}
LENGTHS = ("seqlens_k", "total_sequence_length")


def _register_schema() -> None:
    """Declare the placeholder ops to onnx.defs once."""
    param, option = OpSchema.FormalParameter, OpSchema.FormalParameterOption
    for name, (inputs, outputs) in PLACEHOLDERS.items():
        if onnx.defs.has(name, DOMAIN):
            continue
        onnx.defs.register_schema(OpSchema(
            name, DOMAIN, 1,
            inputs=[param(n, "M" if n in LENGTHS else "T",
                          param_option=option.Optional if n == "attention_bias" else option.Single)
                    for n in inputs],
            outputs=[param(n, "T") for n in outputs],
            type_constraints=[("T", ["tensor(float)", "tensor(float16)"], "float tensors"),
                              ("M", ["tensor(int32)"], "lengths")],
            attributes=[OpSchema.Attribute("num_heads", OpSchema.AttrType.INT, "number of heads")],
        ))


_register_schema()
_lowering_ops = onnxscript.values.Opset(DOMAIN, 1)


@torch.library.custom_op("translator::cached_self_attention", mutates_args=())
def cached_self_attention(
    qkv: Tensor, past_key: Tensor, past_value: Tensor, seqlens_k: Tensor, total_sequence_length: Tensor,
    num_heads: int, attention_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Packed QKV (B, T, 3D) of the T newest tokens of each row, cache (B, H, M, Dh) -> output, cache.

    Row b holds L_b = seqlens_k[b] + 1 positions after the step: the new keys/values go to
    columns L_b - T .. L_b - 1 and new token i attends to columns 0 .. L_b - T + i. attention_bias
    (B|1, H, T, M), if given, is added to the scores of every column.
    """
    q, k, v = (split_heads(x, num_heads) for x in qkv.chunk(3, dim=-1))  # (B, H, T, Dh) each
    b, h, t, dh = k.shape
    first = seqlens_k.long() + 1 - t  # (B,) column of each row's first new token
    cols = first[:, None] + torch.arange(t)  # (B, T)
    index = cols[:, None, :, None].expand(b, h, t, dh)
    present_k = past_key.scatter(2, index, k)
    present_v = past_value.scatter(2, index, v)
    allowed = torch.arange(past_key.size(2))[None, None, :] <= cols[:, :, None]  # (B, T, M)
    return attend_heads(q, present_k, present_v, allowed[:, None], attention_bias), present_k, present_v


@cached_self_attention.register_fake
def _cached_self_attention_fake(
    qkv: Tensor, past_key: Tensor, past_value: Tensor, seqlens_k: Tensor, total_sequence_length: Tensor,
    num_heads: int, attention_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Output shapes for tracing."""
    b, t, d3 = qkv.shape
    return qkv.new_empty(b, t, d3 // 3), torch.empty_like(past_key), torch.empty_like(past_value)


def _cached_self_attention_onnx(qkv, past_key, past_value, seqlens_k, total_sequence_length, num_heads: int,
                                attention_bias=None):
    """translator::cached_self_attention -> one placeholder node with three outputs."""
    return _lowering_ops.CachedSelfAttention(qkv, past_key, past_value, seqlens_k, total_sequence_length,
                                             attention_bias, num_heads=num_heads)


@torch.library.custom_op("translator::cached_cross_attention", mutates_args=())
def cached_cross_attention(
    query: Tensor, key: Tensor, value: Tensor, seqlens_k: Tensor, total_sequence_length: Tensor,
    num_heads: int,
) -> tuple[Tensor, Tensor]:
    """Query (B, T, D) incl. its bias over the encoder's K/V (B, H, S, Dh); row b attends to
    columns 0 .. seqlens_k[b] -> output (B, T, D), weights (B, H, T, S) (0 beyond the row's length)."""
    allowed = torch.arange(key.size(2))[None, :] <= seqlens_k.long()[:, None]  # (B, S)
    q = split_heads(query, num_heads)  # (B, H, T, Dh)
    out, weights = scaled_dot_product_attention(q, key, value, allowed[:, None, None])
    b, h, t, dh = out.shape
    return out.transpose(1, 2).reshape(b, t, h * dh), weights


@cached_cross_attention.register_fake
def _cached_cross_attention_fake(
    query: Tensor, key: Tensor, value: Tensor, seqlens_k: Tensor, total_sequence_length: Tensor,
    num_heads: int,
) -> tuple[Tensor, Tensor]:
    """Output shapes for tracing."""
    b, t, _ = query.shape
    return query.new_empty(query.shape), query.new_empty(b, num_heads, t, key.size(2))


def _cached_cross_attention_onnx(query, key, value, seqlens_k, total_sequence_length, num_heads: int):
    """translator::cached_cross_attention -> one placeholder node with two outputs."""
    return _lowering_ops.CachedCrossAttention(query, key, value, seqlens_k, total_sequence_length,
                                              num_heads=num_heads)


def _gqa_attributes(node: onnx.NodeProto, **extra: int) -> None:
    """A placeholder's num_heads -> GroupQueryAttention's num_heads = kv_num_heads (+ extra)."""
    heads = next(a.i for a in node.attribute if a.name == "num_heads")
    del node.attribute[:]
    node.attribute.extend(onnx.helper.make_attribute(k, v) for k, v in
                          {"num_heads": heads, "kv_num_heads": heads, **extra}.items())
    node.op_type, node.domain = "GroupQueryAttention", MS_DOMAIN


def _cross_to_gqa(proto: onnx.ModelProto) -> None:
    """CachedCrossAttention -> shared-KV GroupQueryAttention (empty new K/V, not causal).

    The empty (B, 0, D) new keys/values are one Slice of the first such node's query, shared; the
    weights become the kernel's softmax output (`qk_output` 2) only where the graph uses them.
    """
    nodes = proto.graph.node
    cross = [i for i, n in enumerate(nodes) if n.domain == DOMAIN and n.op_type == "CachedCrossAttention"]
    if not cross:
        return
    used = {x for n in nodes for x in n.input} | {o.name for o in proto.graph.output}
    empty = "cross_attention_no_new_kv"
    for name, value in (("cross_attention_zero", 0), ("cross_attention_axis", 1)):
        proto.graph.initializer.append(onnx.numpy_helper.from_array(np.array([value], np.int64), name))
    for i in cross:
        node = nodes[i]
        query, key, value, seqlens, total = node.input
        out, weights = node.output
        del node.input[:], node.output[:]
        node.input.extend([query, empty, empty, key, value, seqlens, total])
        node.output.extend([out, "", "", weights] if weights in used else [out])
        _gqa_attributes(node, causal=0, **({"qk_output": 2} if weights in used else {}))
    first = nodes[cross[0]]
    nodes.insert(cross[0], onnx.helper.make_node(
        "Slice", [first.input[0], "cross_attention_zero", "cross_attention_zero", "cross_attention_axis"],
        [empty], name="cross_attention_no_new_kv"))


def _bias_to_total(proto: onnx.ModelProto, bias: str, total: str) -> None:
    """Nodes computing `{bias}_to_total`, a position bias (B|1, H, T, M) cut to its first `total` columns,
    inserted before the first node that reads it."""
    nodes, cut = proto.graph.node, f"{bias}_to_total"
    ends, start = f"{cut}_ends", f"{cut}_starts"
    proto.graph.initializer.extend([onnx.numpy_helper.from_array(np.array([0], np.int64), start),
                                    onnx.numpy_helper.from_array(np.array([3], np.int64), f"{cut}_axes"),
                                    onnx.numpy_helper.from_array(np.array([1], np.int64), f"{cut}_shape")])
    first = next(i for i, n in enumerate(nodes) if cut in n.input)
    added = [onnx.helper.make_node("Cast", [total], [f"{ends}_scalar"], to=onnx.TensorProto.INT64,
                                   name=f"{ends}_scalar"),
             onnx.helper.make_node("Reshape", [f"{ends}_scalar", f"{cut}_shape"], [ends], name=ends),
             onnx.helper.make_node("Slice", [bias, start, ends, f"{cut}_axes"], [cut], name=cut)]
    for offset, node in enumerate(added):
        nodes.insert(first + offset, node)


class InplaceAttention(FusedAttention):
    """Fused attention; the decoder's self-attention (in-place cache) and cross-attention (per-row
    source lengths) as GroupQueryAttention."""

    name = "inplace"
    kv_cache = "inplace"

    def translation_table(self) -> dict:
        """The fused lowering's ops plus the cached self-attention."""
        table = super().translation_table()
        table[torch.ops.translator.cached_self_attention.default] = _cached_self_attention_onnx
        table[torch.ops.translator.cached_cross_attention.default] = _cached_cross_attention_onnx
        return table

    def rewrite(self, proto: onnx.ModelProto, graph: str) -> onnx.ModelProto:
        """Cached self- and cross-attention -> com.microsoft.GroupQueryAttention, then the fused rewrite."""
        biases: dict[str, str] = {}  # position bias -> total_sequence_length, cut once for every layer
        for node in proto.graph.node:
            if node.domain != DOMAIN or node.op_type != "CachedSelfAttention":
                continue
            ins = list(node.input)  # qkv, past_key, past_value, seqlens_k, total_sequence_length[, bias]
            del node.input[:]
            node.input.extend([ins[0], "", "", *ins[1:5]])
            if len(ins) > 5 and ins[5]:  # then cos_cache, sin_cache, position_ids unused; attention_bias
                biases[ins[5]] = ins[4]
                node.input.extend(["", "", "", f"{ins[5]}_to_total"])
            _gqa_attributes(node)
        for bias, total in biases.items():
            _bias_to_total(proto, bias, total)
        _cross_to_gqa(proto)
        return super().rewrite(proto, graph)


LOWERINGS[InplaceAttention.name] = InplaceAttention
