"""Export a Transformer to two ONNX graphs: the encoder and the KV-cached decoder.

Both graphs are traced from the PyTorch model's own `encode()` / `cross_kv()` / `decode()`
through thin wrapper modules with flat tensor inputs; there is no second copy of the network.

Exporter: `torch.onnx.export(..., dynamo=True)` (torch.export + onnxscript). The TorchScript
exporter is deprecated, and dynamo captures symbolic shapes: `past_len + new_len` stays a formula
in the graph instead of a traced constant, so one graph serves every batch, source length, cache
length (including an empty cache) and number of new tokens. Two pitfalls are handled here:
an axis whose example size is 1 is silently specialized (and axes with equal example sizes may
be unified), so the example uses distinct sizes >= 2 on every dynamic axis and `name_axes`
refuses a graph where a declared axis came out fixed; and `ir_version` is pinned to
`IR_VERSION`, which every onnxruntime >= 1.17 loads (onnx 1.23 helpers write 14, which
onnxruntime 1.31 refuses).
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import onnx
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from export.graph_file import save_graph
from export.lowering.attention import AttentionLowering, PlainAttention
from export.lowering.fused import CACHE_LENGTHS, CROSS_LENGTHS, KEY_PADDING
from export.lowering.logits import decode_with_normalizer
from interface import names
from model.transformer import Transformer

IR_VERSION = 10  # the IR of opset <= 21; onnxruntime 1.31 loads up to 13


class ExportError(RuntimeError):
    """The exporter produced a graph that does not honour the declared interface."""


@contextmanager
def attached(modules: list[nn.Module], name: str, value: object) -> Iterator[None]:
    """Set attribute `name` = value on every module for the duration of one traced call.

    How the wrappers hand graph inputs in the form a fused kernel takes them (an in-place cache's
    lengths, the int32 source padding mask) to the attention modules; a lowering that does not
    read them leaves them unused, and the exporter drops what computed them.
    """
    for m in modules:
        setattr(m, name, value)
    try:
        yield
    finally:
        for m in modules:
            delattr(m, name)


@contextmanager
def prescaled_embeddings(model: Transformer) -> Iterator[None]:
    """Trace each token embedding as one lookup into its table times sqrt(d_model) (no Mul kernel).

    The same float32 products, computed once here instead of for every looked-up row at run
    time; the unscaled table stays in a graph only if something else (the tied generator) uses it.
    """
    embeddings = [model.src_embed, model.tgt_embed]
    for e in embeddings:
        with torch.no_grad():
            table = e.lut.weight * e.scale
        e.forward = functools.partial(F.embedding, weight=table)
    try:
        yield
    finally:
        for e in embeddings:
            del e.forward  # back to the class's forward


def source_padding(mask: Tensor) -> Tensor:
    """A source mask input (B, S), 1 = real token, as the fused kernels' int32 key padding mask."""
    return mask.to(torch.int32)


class EncoderGraph(nn.Module):
    """input_ids, attention_mask -> cross-attention K/V of every decoder layer."""

    def __init__(self, model: Transformer) -> None:
        """Wrap model (shared, not copied)."""
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, ...]:
        """(B, S), (B, S) -> (key, value) per decoder layer, each (B, H, S, Dh)."""
        src_mask = attention_mask.bool().unsqueeze(1)  # (B, 1, S)
        modules = [layer.self_attn for layer in self.model.encoder.layers]
        with attached(modules, KEY_PADDING, source_padding(attention_mask)):
            cross = self.model.cross_kv(self.model.encode(input_ids, src_mask))
        return tuple(t for kv in cross for t in kv)


class DecoderGraph(nn.Module):
    """New tokens + caches -> log-probs, updated self-attention cache, cross-attention, and the
    log-normalizer of the logits (export/lowering/logits.py)."""

    def __init__(self, model: Transformer) -> None:
        """Wrap model (shared, not copied)."""
        super().__init__()
        self.model = model
        self.n_layers = model.cfg.n_decoder_layers

    def forward(
        self,
        input_ids: Tensor,
        position_ids: Tensor,
        attention_mask: Tensor,
        encoder_attention_mask: Tensor,
        *cache: Tensor,
    ) -> tuple[Tensor, ...]:
        """Inputs and outputs in the order of `names.decoder_inputs` / `names.decoder_outputs`.

        input_ids, position_ids (B, T); attention_mask (B, P+T); encoder_attention_mask (B, S);
        cache = past decoder K/V of each layer (B, H, P, Dh), then encoder K/V (B, H, S, Dh).
        """
        return self.step(input_ids, position_ids, attention_mask.bool(), encoder_attention_mask, cache)

    def step(
        self, input_ids: Tensor, position_ids: Tensor, self_mask: Tensor | None,
        encoder_attention_mask: Tensor, cache: tuple[Tensor, ...], key_positions: Tensor | None = None,
    ) -> tuple[Tensor, ...]:
        """The model's decode() on flat caches; flat outputs, then the log-normalizer of the logits the
        log-probs came from (the generator's own, recorded by `decode_with_normalizer`). key_positions:
        the self-attention keys' positions for a relative position bias (decode's default otherwise)."""
        n = self.n_layers
        past = [(cache[2 * i], cache[2 * i + 1]) for i in range(n)]
        cross = [(cache[2 * (n + i)], cache[2 * (n + i) + 1]) for i in range(n)]
        src_mask = encoder_attention_mask.bool().unsqueeze(1)  # (B, 1, S)
        modules = [layer.cross_attn for layer in self.model.decoder.layers]
        with attached(modules, KEY_PADDING, source_padding(encoder_attention_mask)):
            logp, presents, weights, lse = decode_with_normalizer(
                self.model, input_ids, cross, src_mask, past, position_ids, self_mask, key_positions)
        flat = [t for kv in presents for t in kv]  # each (B, H, P+T or M, Dh)
        return (logp, *flat, weights.mean(dim=1), lse)  # (B, T, V), ..., (B, T, S), (B, T)


class InplaceDecoderGraph(DecoderGraph):
    """DecoderGraph over a fixed-size self-attention cache that the step updates in place."""

    def forward(
        self,
        input_ids: Tensor,
        position_ids: Tensor,
        seqlens_k: Tensor,
        total_sequence_length: Tensor,
        encoder_seqlens_k: Tensor,
        encoder_total_sequence_length: Tensor,
        *cache: Tensor,
    ) -> tuple[Tensor, ...]:
        """As DecoderGraph, with per-row lengths (B,) int32 instead of the self-attention mask and
        the source mask (row b's source: its first encoder_seqlens_k[b] + 1 positions).

        The lengths reach each self- and cross-attention module through `CACHE_LENGTHS` /
        `CROSS_LENGTHS` for this call only (the in-place lowering's fused_forward reads them);
        cache entries are (B, H, M, Dh). A key's position is its column: a relative position bias is
        computed over the M columns (the lowering cuts it to total_sequence_length).
        """
        layers = self.model.decoder.layers
        src = cache[2 * self.n_layers].size(2)
        source_mask = (torch.arange(src)[None, :] <= encoder_seqlens_k.long()[:, None]).long()  # (B, S)
        cross = (encoder_seqlens_k, encoder_total_sequence_length)
        lengths = (seqlens_k, total_sequence_length)
        columns = None
        if self.model.decoder.position_bias is not None:
            columns = torch.arange(cache[0].size(2)).unsqueeze(0)  # (1, M)
        with (attached([layer.self_attn for layer in layers], CACHE_LENGTHS, lengths),
              attached([layer.cross_attn for layer in layers], CROSS_LENGTHS, cross)):
            return self.step(input_ids, position_ids, None, source_mask, cache, columns)


@dataclass(frozen=True)
class ExampleSizes:
    """Sizes of the tracing example: distinct, >= 2, and unlike any fixed model dimension."""

    batch: int
    src_len: int
    new_len: int
    past_len: int


def example_sizes(model: Transformer) -> ExampleSizes:
    """Pick batch, src_len, new_len, past_len so that no two axes (nor past+new) coincide."""
    cfg = model.cfg
    taken = {1, cfg.n_heads, cfg.d_head, cfg.n_heads * cfg.d_head, cfg.d_model, cfg.vocab_size, cfg.src_vocab,
             cfg.d_ff, cfg.max_len, cfg.relative_buckets, 2 * cfg.relative_max_distance + 1}
    picked: list[int] = []
    for n in (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41):
        if n in taken:
            continue
        if len(picked) == 3 and (n + picked[2]) in taken | set(picked):
            continue  # past_len + new_len must be a new value too
        picked.append(n)
        taken.add(n)
        if len(picked) == 4:
            break
    batch, src_len, new_len, past_len = picked
    if max(src_len, past_len + new_len) > cfg.max_len:
        raise ExportError(f"max_len={cfg.max_len} is too small for the export example {picked}")
    return ExampleSizes(batch, src_len, new_len, past_len)


def example_inputs(
    model: Transformer, s: ExampleSizes, kv_cache: str = "concat"
) -> dict[str, tuple[Tensor, ...]]:
    """Example tensors for both graphs, in the order of `interface/names.py` (past_len = max_cache
    for an in-place cache, rows filled to different lengths)."""
    cfg = model.cfg
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, cfg.src_vocab, (s.batch, s.src_len), generator=g)
    ones = torch.ones(s.batch, s.src_len, dtype=torch.long)
    kv = (s.batch, cfg.n_heads)
    past = [torch.randn(*kv, s.past_len, cfg.d_head, generator=g) for _ in range(2 * cfg.n_decoder_layers)]
    cross = [torch.randn(*kv, s.src_len, cfg.d_head, generator=g) for _ in range(2 * cfg.n_decoder_layers)]
    positions = torch.arange(s.past_len, s.past_len + s.new_len).expand(s.batch, s.new_len).contiguous()
    if kv_cache == "inplace":
        lengths = torch.arange(s.batch, dtype=torch.int32) % (s.past_len - s.new_len) + s.new_len - 1
        src_lengths = torch.arange(s.batch, dtype=torch.int32) % s.src_len  # per row: length - 1
        src_total = torch.tensor(s.src_len, dtype=torch.int32)
        masks: tuple[Tensor, ...] = (lengths, lengths.max() + 1, src_lengths, src_total)
        positions = lengths.long()[:, None] - s.new_len + 1 + torch.arange(s.new_len)
    else:
        masks = (torch.ones(s.batch, s.past_len + s.new_len, dtype=torch.long), ones)
    decoder = (
        torch.randint(4, cfg.vocab_size, (s.batch, s.new_len), generator=g),
        positions,
        *masks,
        *past,
        *cross,
    )
    return {"encoder": (ids, ones), "decoder": decoder}


def name_axes(proto: onnx.ModelProto, axes: dict[str, dict[int, str]]) -> None:
    """Give every declared dynamic axis its name from `names.py`; fail if it came out fixed."""
    for value in [*proto.graph.input, *proto.graph.output]:
        dims = value.type.tensor_type.shape.dim
        for axis, axis_name in axes.get(value.name, {}).items():
            if dims[axis].HasField("dim_value"):
                raise ExportError(
                    f"{value.name} axis {axis} ({axis_name}) was exported as the constant "
                    f"{dims[axis].dim_value}; it must stay dynamic"
                )
            dims[axis].dim_param = axis_name


def pin_ir_version(proto: onnx.ModelProto) -> None:
    """Lower ir_version to IR_VERSION (never raise it) if the opsets allow it."""
    needed = onnx.helper.find_min_ir_version_for(list(proto.opset_import), ignore_unknown=True)
    if needed > IR_VERSION:
        raise ExportError(f"the graph's opsets need IR {needed} > {IR_VERSION}")
    proto.ir_version = min(proto.ir_version, IR_VERSION)


def strip_metadata(proto: onnx.ModelProto) -> None:
    """Drop the exporter's debug metadata (FX node text, stack traces with local file paths)."""
    graph = proto.graph
    del proto.metadata_props[:]
    del graph.metadata_props[:]
    for item in [*graph.node, *graph.input, *graph.output, *graph.value_info, *graph.initializer]:
        del item.metadata_props[:]


def check_io(proto: onnx.ModelProto, inputs: list[str], outputs: list[str]) -> None:
    """The graph's input and output names are exactly those of `names.py`, in order."""
    got_in = [i.name for i in proto.graph.input]
    got_out = [o.name for o in proto.graph.output]
    if got_in != inputs or got_out != outputs:
        raise ExportError(f"graph I/O {got_in} -> {got_out} differs from names.py {inputs} -> {outputs}")


def export_graph(
    module: nn.Module,
    args: tuple[Tensor, ...],
    inputs: list[str],
    outputs: list[str],
    axes: dict[str, dict[int, str]],
    lowering: AttentionLowering,
    graph: str,
) -> onnx.ModelProto:
    """Trace one wrapper with dynamic axes and return the finished ONNX model."""
    dyn = [axes.get(n) for n in inputs]
    # the decoder's `*cache` is one positional pytree entry: its shapes go in a nested tuple
    n_flat = inputs.index(names.past_name(0, "decoder", "key")) if graph == "decoder" else len(inputs)
    dynamic_shapes = tuple(dyn) if graph == "encoder" else (*dyn[:n_flat], tuple(dyn[n_flat:]))
    with lowering.applied(module), prescaled_embeddings(module.model), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"# The axis name")  # shared axes are expected
        warnings.filterwarnings("ignore", category=FutureWarning)  # torch-internal pytree notices
        program = torch.onnx.export(
            module.eval(),
            args,
            dynamo=True,
            input_names=inputs,
            output_names=outputs,
            dynamic_shapes=dynamic_shapes,
            opset_version=lowering.opset,
            custom_translation_table=lowering.translation_table() or None,
            optimize=True,  # onnxscript's constant folding and dead-code cleanup
            verbose=False,
        )
    proto = lowering.rewrite(program.model_proto, graph)
    check_io(proto, inputs, outputs)
    strip_metadata(proto)
    name_axes(proto, axes)
    pin_ir_version(proto)
    return proto


@dataclass
class ExportInfo:
    """What was written: opset, IR version, exporter, lowering, seconds spent per graph."""

    opset: int
    ir_version: int
    exporter: str
    attention: str
    kv_cache: str
    seconds: dict[str, float]


def export_graphs(
    model: Transformer, out_dir: Path, lowering: AttentionLowering | None = None
) -> ExportInfo:
    """Write encoder.onnx and decoder.onnx into out_dir (weights inline, or beside a graph that protobuf
    cannot hold in one file: export/graph_file.py)."""
    lowering = lowering or PlainAttention()
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    model = model.eval()
    n = model.cfg.n_decoder_layers
    kv_cache = lowering.kv_cache
    axes = names.dynamic_axes(n, kv_cache)
    example = example_inputs(model, example_sizes(model), kv_cache)
    decoder = InplaceDecoderGraph(model) if kv_cache == "inplace" else DecoderGraph(model)
    plan = {  # graph: (wrapper, inputs, outputs, file)
        "encoder": (
            EncoderGraph(model), names.encoder_inputs(), names.encoder_outputs(n), names.ENCODER_FILE
        ),
        "decoder": (
            decoder, names.decoder_inputs(n, kv_cache), names.decoder_outputs(n), names.DECODER_FILE
        ),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    seconds, ir_version = {}, IR_VERSION
    for graph, (module, inputs, outputs, file) in plan.items():
        start = time.perf_counter()
        proto = export_graph(module, example[graph], inputs, outputs, axes[graph], lowering, graph)
        save_graph(proto, out_dir / file, check=False)  # checked when verified (export/verify/base.py)
        seconds[graph] = round(time.perf_counter() - start, 2)
        ir_version = proto.ir_version
    return ExportInfo(lowering.opset, ir_version, "torch.onnx.export(dynamo=True)", lowering.name, kv_cache,
                      seconds)
