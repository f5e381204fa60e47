"""The custom ops the fused lowerings trace attention through, and their placeholder ONNX nodes.

Each op is a `torch.library` custom op whose eager body is the model's own
`scaled_dot_product_attention` with exactly ONNX Runtime's conventions, so the ops can be checked
against the model in PyTorch (tests/export/lowering/test_fused_attention.py) and the graph against PyTorch
(export/verify/base.py):

- `bias` (3D,) is the Q, K, V projections' bias, added inside the op (MultiHeadAttention's `bias`
  input); keys/values already split into heads (B, H, L, Dh) count as projected and take none of it.
- `mask` is int32, > 0 where attention is allowed: (B, Tk) for a key padding mask shared by every
  query (MHA's `key_padding_mask`, 2-D) or (B, Tq, Tk) (3-D). Masked scores are set to the dtype's
  minimum (`mask_filter_value`), so a fully masked row attends uniformly, as in the model.
- `attention_bias` (optional; B|1, H, Tq, Tk) is added to the scores before masking: T5's relative
  position bias (the kernels' `attention_bias` input; absent, the node leaves that input empty).

The translation table (`TRANSLATIONS`) writes each op as one node of the private domain
`translator.lowering` (schemas registered with `onnx.defs`); export/lowering/fused.py rewrites those nodes
into com.microsoft contrib ops.
"""

from __future__ import annotations

import onnx
import onnxscript
import torch
from onnx.defs import OpSchema
from torch import Tensor

from model.transformer import scaled_dot_product_attention

DOMAIN = "translator.lowering"
_FLOATS = ["tensor(float)", "tensor(float16)"]
_MASK = ("mask",)  # inputs typed int32; every other input is a float tensor
OPTIONAL = ("attention_bias",)  # inputs a node may leave empty
PLACEHOLDERS = {  # op: (inputs, outputs)
    "Attention": (("query", "key", "value", "bias", "mask"), ("output",)),
    "AttentionWeights": (("query", "key", "value", "bias", "mask"), ("output", "weights")),
    "PackedAttention": (("input", "weight", "bias", "mask", "attention_bias"), ("output",)),
    "SelfAttention": (("query", "key", "value", "bias", "past_key", "past_value", "mask", "attention_bias"),
                      ("output", "present_key", "present_value")),
}


def _register_schemas() -> None:
    """Declare the placeholder ops to onnx.defs once (the exporter reads their output counts)."""
    param = OpSchema.FormalParameter
    for name, (inputs, outputs) in PLACEHOLDERS.items():
        if onnx.defs.has(name, DOMAIN):
            continue
        onnx.defs.register_schema(OpSchema(
            name, DOMAIN, 1,
            inputs=[param(n, "M" if n in _MASK else "T", param_option=OpSchema.FormalParameterOption.Optional
                          if n in OPTIONAL else OpSchema.FormalParameterOption.Single) for n in inputs],
            outputs=[param(n, "T") for n in outputs],
            type_constraints=[("T", _FLOATS, "float tensors"), ("M", ["tensor(int32)"], "attention mask")],
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


def attend_heads(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, bias: Tensor | None = None) -> Tensor:
    """The model's attention over split heads (B, H, L, Dh), heads merged back: (B, Tq, D); `bias` is the
    position bias added to the scores."""
    out, _ = scaled_dot_product_attention(q, k, v, mask, bias)
    b, h, t, dh = out.shape
    return out.transpose(1, 2).reshape(b, t, h * dh)


def allowed(mask: Tensor) -> Tensor:
    """int32 mask (B, Tk) or (B, Tq, Tk), > 0 = attend -> boolean (B, 1, 1|Tq, Tk) over the heads."""
    keep = mask > 0
    return keep[:, None, None, :] if keep.dim() == 2 else keep[:, None]


def _biased_heads(query: Tensor, key: Tensor, value: Tensor, bias: Tensor, n_heads: int) -> list[Tensor]:
    """Q, K, V plus their bias (pre-projected 4-D K/V take none), split into heads."""
    out = [x if x.dim() == 4 else x + b for x, b in zip((query, key, value), bias.chunk(3), strict=True)]
    return [split_heads(x, n_heads) for x in out]


@torch.library.custom_op("translator::attention", mutates_args=())
def attention(query: Tensor, key: Tensor, value: Tensor, bias: Tensor, mask: Tensor, num_heads: int
              ) -> Tensor:
    """Query (B, Tq, D) over key/value (B, Tk, D) or (B, H, Tk, Dh) -> (B, Tq, D)."""
    return attend_heads(*_biased_heads(query, key, value, bias, num_heads), allowed(mask))


@attention.register_fake
def _attention_fake(query: Tensor, key: Tensor, value: Tensor, bias: Tensor, mask: Tensor, num_heads: int
                    ) -> Tensor:
    """Output shape for tracing."""
    return query.new_empty(query.shape)


@torch.library.custom_op("translator::attention_weights", mutates_args=())
def attention_weights(query: Tensor, key: Tensor, value: Tensor, bias: Tensor, mask: Tensor, num_heads: int
                      ) -> tuple[Tensor, Tensor]:
    """As `attention`, also returning the attention weights (B, H, Tq, Tk)."""
    heads = _biased_heads(query, key, value, bias, num_heads)
    out, weights = scaled_dot_product_attention(*heads, allowed(mask))
    b, h, t, dh = out.shape
    return out.transpose(1, 2).reshape(b, t, h * dh), weights


@attention_weights.register_fake
def _attention_weights_fake(query: Tensor, key: Tensor, value: Tensor, bias: Tensor, mask: Tensor,
                            num_heads: int) -> tuple[Tensor, Tensor]:
    """Output shapes for tracing."""
    b, t, _ = query.shape
    return query.new_empty(query.shape), query.new_empty(b, num_heads, t, mask.shape[-1])


@torch.library.custom_op("translator::packed_attention", mutates_args=())
def packed_attention(input: Tensor, weight: Tensor, bias: Tensor, mask: Tensor, num_heads: int,
                     attention_bias: Tensor | None = None) -> Tensor:
    """Self-attention of input (B, T, D) with packed projections (W^Q; W^K; W^V)^T (D, 3D) and bias (3D,)."""
    q, k, v = (split_heads(x, num_heads) for x in (input @ weight + bias).chunk(3, dim=-1))
    return attend_heads(q, k, v, allowed(mask), attention_bias)


@packed_attention.register_fake
def _packed_attention_fake(input: Tensor, weight: Tensor, bias: Tensor, mask: Tensor, num_heads: int,
                           attention_bias: Tensor | None = None) -> Tensor:
    """Output shape for tracing."""
    return input.new_empty(*input.shape[:2], weight.shape[1] // 3)


@torch.library.custom_op("translator::self_attention", mutates_args=())
def self_attention(
    query: Tensor, key: Tensor, value: Tensor, bias: Tensor, past_key: Tensor, past_value: Tensor,
    mask: Tensor, num_heads: int, attention_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """New Q/K/V (B, T, D) + their bias (3D); K/V appended to the past (B, H, P, Dh).

    Returns the output (B, T, D) and the present key and value (B, H, P+T, Dh); mask (and
    attention_bias) over P+T.
    """
    q, k, v = _biased_heads(query, key, value, bias, num_heads)
    k, v = torch.cat([past_key, k], dim=2), torch.cat([past_value, v], dim=2)
    return attend_heads(q, k, v, allowed(mask), attention_bias), k.contiguous(), v.contiguous()


@self_attention.register_fake
def _self_attention_fake(
    query: Tensor, key: Tensor, value: Tensor, bias: Tensor, past_key: Tensor, past_value: Tensor,
    mask: Tensor, num_heads: int, attention_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Output shapes for tracing."""
    b, h, p, dh = past_key.shape
    present = (b, h, p + key.shape[1], dh)
    return query.new_empty(query.shape), past_key.new_empty(present), past_value.new_empty(present)


def _attention_onnx(query, key, value, bias, mask, num_heads: int):
    """translator::attention -> one placeholder node."""
    return _lowering_ops.Attention(query, key, value, bias, mask, num_heads=num_heads)


def _attention_weights_onnx(query, key, value, bias, mask, num_heads: int):
    """translator::attention_weights -> one placeholder node with two outputs."""
    return _lowering_ops.AttentionWeights(query, key, value, bias, mask, num_heads=num_heads)


def _packed_attention_onnx(input, weight, bias, mask, num_heads: int, attention_bias=None):
    """translator::packed_attention -> one placeholder node."""
    return _lowering_ops.PackedAttention(input, weight, bias, mask, attention_bias, num_heads=num_heads)


def _self_attention_onnx(query, key, value, bias, past_key, past_value, mask, num_heads: int,
                         attention_bias=None):
    """translator::self_attention -> one placeholder node with three outputs."""
    return _lowering_ops.SelfAttention(query, key, value, bias, past_key, past_value, mask, attention_bias,
                                       num_heads=num_heads)


TRANSLATIONS = {
    torch.ops.translator.attention.default: _attention_onnx,
    torch.ops.translator.attention_weights.default: _attention_weights_onnx,
    torch.ops.translator.packed_attention.default: _packed_attention_onnx,
    torch.ops.translator.self_attention.default: _self_attention_onnx,
}
