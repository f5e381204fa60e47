"""The "inplace" lowering: fused attention plus a fixed-size self-attention cache updated in place.

Everything of the "fused" lowering (export/fused.py), and the decoder's self-attention becomes
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
the batch has several rows; the service decodes one token per step.
"""

from __future__ import annotations

import onnx
import onnxscript
import torch
from onnx.defs import OpSchema
from torch import Tensor

from export.attention import LOWERINGS
from export.fused import DOMAIN, MS_DOMAIN, FusedAttention, attend_heads, split_heads


def _register_schema() -> None:
    """Declare the placeholder op to onnx.defs once."""
    if onnx.defs.has("CachedSelfAttention", DOMAIN):
        return
    param = OpSchema.FormalParameter
    onnx.defs.register_schema(OpSchema(
        "CachedSelfAttention", DOMAIN, 1,
        inputs=[param("qkv", "T"), param("past_key", "T"), param("past_value", "T"),
                param("seqlens_k", "M"), param("total_sequence_length", "M")],
        outputs=[param("output", "T"), param("present_key", "T"), param("present_value", "T")],
        type_constraints=[("T", ["tensor(float)", "tensor(float16)"], "float tensors"),
                          ("M", ["tensor(int32)"], "lengths")],
        attributes=[OpSchema.Attribute("num_heads", OpSchema.AttrType.INT, "number of heads")],
    ))


_register_schema()
_lowering_ops = onnxscript.values.Opset(DOMAIN, 1)


@torch.library.custom_op("translator::cached_self_attention", mutates_args=())
def cached_self_attention(
    qkv: Tensor, past_key: Tensor, past_value: Tensor, seqlens_k: Tensor, total_sequence_length: Tensor,
    num_heads: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """Packed QKV (B, T, 3D) of the T newest tokens of each row, cache (B, H, M, Dh) -> output, cache.

    Row b holds L_b = seqlens_k[b] + 1 positions after the step: the new keys/values go to
    columns L_b - T .. L_b - 1 and new token i attends to columns 0 .. L_b - T + i.
    """
    q, k, v = (split_heads(x, num_heads) for x in qkv.chunk(3, dim=-1))  # (B, H, T, Dh) each
    b, h, t, dh = k.shape
    first = seqlens_k.long() + 1 - t  # (B,) column of each row's first new token
    cols = first[:, None] + torch.arange(t)  # (B, T)
    index = cols[:, None, :, None].expand(b, h, t, dh)
    present_k = past_key.scatter(2, index, k)
    present_v = past_value.scatter(2, index, v)
    allowed = torch.arange(past_key.size(2))[None, None, :] <= cols[:, :, None]  # (B, T, M)
    return attend_heads(q, present_k, present_v, allowed[:, None]), present_k, present_v


@cached_self_attention.register_fake
def _cached_self_attention_fake(
    qkv: Tensor, past_key: Tensor, past_value: Tensor, seqlens_k: Tensor, total_sequence_length: Tensor,
    num_heads: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """Output shapes for tracing."""
    b, t, d3 = qkv.shape
    return qkv.new_empty(b, t, d3 // 3), torch.empty_like(past_key), torch.empty_like(past_value)


def _cached_self_attention_onnx(qkv, past_key, past_value, seqlens_k, total_sequence_length, num_heads: int):
    """translator::cached_self_attention -> one placeholder node with three outputs."""
    return _lowering_ops.CachedSelfAttention(qkv, past_key, past_value, seqlens_k, total_sequence_length,
                                             num_heads=num_heads)


class InplaceAttention(FusedAttention):
    """Fused attention, decoder self-attention as GroupQueryAttention over an in-place cache."""

    name = "inplace"
    kv_cache = "inplace"

    def translation_table(self) -> dict:
        """The fused lowering's ops plus the cached self-attention."""
        table = super().translation_table()
        table[torch.ops.translator.cached_self_attention.default] = _cached_self_attention_onnx
        return table

    def rewrite(self, proto: onnx.ModelProto, graph: str) -> onnx.ModelProto:
        """CachedSelfAttention -> com.microsoft.GroupQueryAttention, then the fused rewrite."""
        for node in proto.graph.node:
            if node.domain == DOMAIN and node.op_type == "CachedSelfAttention":
                heads = next(a.i for a in node.attribute if a.name == "num_heads")
                ins = list(node.input)  # qkv, past_key, past_value, seqlens_k, total_sequence_length
                del node.input[:]
                node.input.extend([ins[0], "", "", *ins[1:]])
                del node.attribute[:]
                node.attribute.extend([onnx.helper.make_attribute("num_heads", heads),
                                       onnx.helper.make_attribute("kv_num_heads", heads)])
                node.op_type, node.domain = "GroupQueryAttention", MS_DOMAIN
        return super().rewrite(proto, graph)


LOWERINGS[InplaceAttention.name] = InplaceAttention
