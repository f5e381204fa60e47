"""How attention is lowered to ONNX: one replaceable piece of the export, chosen by name.

A lowering sees the export at three points, so a variant can change how attention reaches the
graph without a second copy of the network:

1. `applied(model)`: a context manager around tracing; it may temporarily swap the attention
   implementation of the model's `MultiHeadAttention` modules (e.g. for a `torch.library` custom
   op that stands for "fused attention with a KV cache").
2. `translation_table()`: the `custom_translation_table` handed to `torch.onnx.export`, mapping
   such custom ops to onnxscript functions (e.g. ones emitting ONNX Runtime `com.microsoft`
   `MultiHeadAttention` / `GroupQueryAttention` contrib ops).
3. `rewrite(proto, graph)`: a last post-export rewrite of the ONNX model.

"plain" is the identity at all three points: attention is traced from the model's own
`scaled_dot_product_attention` (MatMul, Where, Softmax, MatMul), which every provider runs.
The bundle records the lowering's name (`bundle.json` -> `onnx.attention`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import onnx
from torch import nn


class AttentionLowering:
    """Base lowering: traces attention as written in the model (no swap, no table, no rewrite)."""

    name = "plain"
    kv_cache = "concat"  # decoder interface: names.decoder_inputs(n, kv_cache)
    opset = 18  # standard-ONNX ops only; LayerNormalization needs >= 17

    @contextmanager
    def applied(self, model: nn.Module) -> Iterator[None]:
        """Context in which `model` is traced; the plain lowering leaves it untouched."""
        yield

    def translation_table(self) -> dict[Callable, Callable]:
        """torch op -> onnxscript function, for `torch.onnx.export(custom_translation_table=...)`."""
        return {}

    def rewrite(self, proto: onnx.ModelProto, graph: str) -> onnx.ModelProto:
        """Post-export rewrite of graph "encoder" or "decoder"; identity here."""
        return proto


class PlainAttention(AttentionLowering):
    """Attention as plain ONNX ops, portable to every execution provider."""

    name = "plain"


LOWERINGS: dict[str, type[AttentionLowering]] = {PlainAttention.name: PlainAttention}


def get_lowering(name: str) -> AttentionLowering:
    """The lowering registered under `name`, with a clear error for unknown names."""
    try:
        return LOWERINGS[name]()
    except KeyError:
        raise ValueError(f"unknown attention lowering {name!r}; available: {sorted(LOWERINGS)}") from None
