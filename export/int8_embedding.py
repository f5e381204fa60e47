"""Token embeddings of the int8 variant: int8 rows with one scale each, read by a Gather.

Every Gather of a (vocabulary, d_model) table by the graph's `input_ids` is replaced. Its int8 form is
the quantizer's form of a MatMul weight (export/quantize.py): Q (d_model, vocabulary) with a scale per
column s, so that row t of the table is c * s[t] * Q[:, t]. Where the table is the output projection's
matrix scaled by c (tied embeddings, c = sqrt(d_model) for a scaled embedding; `tie_factor` of
export/tied.py), Q and s are the projection's own; any other table gets its own, made by the same
quantizer from its transpose (`own`). Two layouts (`shared`):

- shared (tied tables only): the Gather reads the projection's Q itself,
      Gather(Q, ids, axis=1) -> (d_model, *ids) int8, Transpose -> (*ids, d_model), Cast to float,
      Mul by Gather(c * s, ids) with a trailing axis of 1;
  the bundle stores the matrix once, in int8, for the encoder, the decoder and the output (the weights
  file keeps one copy of a tensor the graphs repeat, export/weights.py). But a token's column touches a
  page in each of Q's d_model rows, so the mapped matrix soon lies wholly in memory beside the
  MatMul's prepacked copy of it, in each session that gathers from it.
- rows: the Gather reads Q^T (vocabulary, d_model), a copy of its own: Gather(Q^T, ids) -> (*ids,
  d_model), Cast, Mul as above; one row per token, and ONNX Runtime drops the mapped Q once the MatMul
  has prepacked it; the matrix is stored twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from export.tied import embedding_gathers, tie_factor
from interface import names


@dataclass
class Projection:
    """A (d_model, vocabulary) matrix: its fp32 values and its int8 form (tensor Q, scale per column)."""

    weight: np.ndarray  # float32 (d_model, vocabulary)
    quantized: TensorProto  # int8 (d_model, vocabulary), zero point 0
    scale: np.ndarray  # float32 (vocabulary,), or one value for the whole matrix


def _int8_gather(node: onnx.NodeProto, quantized: str, row_scale: str, rank: int, columns: bool
                 ) -> list[onnx.NodeProto]:
    """The nodes that compute node's output (a Gather of an fp32 table) from int8 columns (d_model,
    vocabulary) or rows (vocabulary, d_model) and row scales."""
    ids, out, base = node.input[1], node.output[0], node.name or node.output[0]
    cols, rows, rows_f, scale, scale_col = (f"{base}/int8_{s}" for s in
                                            ("cols", "rows", "rows_float", "row_scale", "row_scale_col"))
    perm = [*range(1, rank + 1), 0]
    gather = [helper.make_node("Gather", [quantized, ids], [cols], f"{base}/int8_cols", axis=1),
              helper.make_node("Transpose", [cols], [rows], f"{base}/int8_rows", perm=perm)] if columns else [
        helper.make_node("Gather", [quantized, ids], [rows], f"{base}/int8_rows", axis=0)]
    return [
        *gather,
        helper.make_node("Cast", [rows], [rows_f], f"{base}/int8_cast", to=TensorProto.FLOAT),
        helper.make_node("Gather", [row_scale, ids], [scale], f"{base}/int8_row_scale", axis=0),
        helper.make_node("Unsqueeze", [scale, f"{base}/int8_last_axis"], [scale_col],
                         f"{base}/int8_unsqueeze"),
        helper.make_node("Mul", [rows_f, scale_col], [out], f"{base}/int8_dequantize"),
    ]


def row_major(quantized: TensorProto) -> TensorProto:
    """Q^T (vocabulary, d_model) of an int8 Q (d_model, vocabulary), named after it."""
    return numpy_helper.from_array(np.ascontiguousarray(numpy_helper.to_array(quantized).T),
                                   f"{quantized.name}_rows")


def quantize_embeddings(proto: onnx.ModelProto, projection: Projection | None,
                        own: Callable[[np.ndarray, str], Projection], shared: bool) -> dict[str, int]:
    """Replace proto's embedding Gathers in place (module docstring; `shared`: tied ones read the
    projection's Q); own(table, name) quantizes a table that is not the projection's. Counts: {"tied":
    ..., "own": ...} embeddings."""
    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    ids_rank = next(len(i.type.tensor_type.shape.dim) for i in graph.input if i.name == names.INPUT_IDS)
    counts = {"tied": 0, "own": 0}
    for node in embedding_gathers(proto):
        table_name = node.input[0]
        table = numpy_helper.to_array(inits[table_name])
        c = tie_factor(table, projection.weight if projection is not None else None)
        source = projection if c is not None else own(table.T.copy(), table_name)
        counts["tied" if c is not None else "own"] += 1
        c = 1.0 if c is None else c
        columns = shared and source is projection
        tensor = source.quantized if columns else row_major(source.quantized)
        if tensor.name not in inits:
            graph.initializer.append(tensor)
            inits[tensor.name] = tensor
        row_scale = np.broadcast_to(np.float32(c) * source.scale.astype(np.float32), table.shape[:1])
        base = node.name or node.output[0]
        extra = [numpy_helper.from_array(np.ascontiguousarray(row_scale), f"{table_name}_row_scale"),
                 numpy_helper.from_array(np.array([-1], np.int64), f"{base}/int8_last_axis")]
        graph.initializer.extend(extra)
        new = _int8_gather(node, tensor.name, extra[0].name, ids_rank, columns)
        at = list(graph.node).index(node)
        graph.node.remove(node)
        for i, n in enumerate(new):
            graph.node.insert(at + i, n)
    used = {i for n in graph.node for i in n.input}
    for name in [t.name for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(inits[name])
    return counts
