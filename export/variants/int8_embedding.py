"""Token embeddings of the int8 variant: int8 rows with one scale each, read by a Gather.

Every Gather of a (vocabulary, d_model) table by the graph's `input_ids` is replaced. Its int8 form is
the quantizer's form of a MatMul weight (export/variants/int8.py): Q (d_model, vocabulary) with a scale per
column s (or one for the matrix), so that row t of the table is c * s[t] * Q[:, t]. Where the table is
the output projection's matrix scaled by c (tied embeddings, c = sqrt(d_model) for a scaled embedding;
`tie_factor` of export/lowering/tied.py), Q and s are the projection's own; any other table gets its own, made
by the same quantizer from its transpose (`own`). Each lookup reads the rows R_q = Q^T (vocabulary,
d_model), one contiguous row per token:

    Gather(R_q, ids, axis=0) -> (*ids, d_model) int8, Cast to float,
    Mul by Gather(c * s, ids) with a trailing axis of 1

With `shared` (the default), the output projection's MatMulInteger reads Transpose(R_q) in place of
Q (export/variants/int8_projection.py; ONNX Runtime folds it into Q at load and prepacks that), so the bundle
stores the tied matrix once, in int8, for the encoder, the decoder and the output (the weights file
keeps one copy of a tensor the graphs repeat, export/weights.py), and a session's mapping of it holds
only the rows looked up once the service drops the pages that loading read (service/ops/mapped.py).
Without it the projection keeps MatMulInteger by Q and the lookups a copy of their own: the matrix
stored twice. Older bundles read Q by columns (Gather(Q, ids, axis=1), Transpose, Cast, Mul), which
touches every page of Q; the service runs them as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from export.lowering.tied import embedding_gathers, tie_factor
from export.variants.int8_projection import rows_projection


@dataclass
class Projection:
    """A (d_model, vocabulary) matrix: its fp32 values and its int8 form (tensor Q, scale per column)."""

    weight: np.ndarray  # float32 (d_model, vocabulary)
    quantized: TensorProto  # int8 (d_model, vocabulary), zero point 0
    scale: np.ndarray  # float32 (vocabulary,), or one value for the whole matrix


def _int8_gather(node: onnx.NodeProto, rows: str, row_scale: str) -> list[onnx.NodeProto]:
    """The nodes that compute node's output (a Gather of an fp32 table) from int8 rows (vocabulary,
    d_model) and row scales."""
    ids, out, base = node.input[1], node.output[0], node.name or node.output[0]
    looked_up, rows_f, scale, scale_col = (f"{base}/int8_{s}" for s in
                                           ("rows", "rows_float", "row_scale", "row_scale_col"))
    return [
        helper.make_node("Gather", [rows, ids], [looked_up], f"{base}/int8_rows", axis=0),
        helper.make_node("Cast", [looked_up], [rows_f], f"{base}/int8_cast", to=TensorProto.FLOAT),
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
    """Replace proto's embedding Gathers in place by reads of int8 rows (module docstring; `shared`: the
    output projection reads the tied rows too); own(table, name) quantizes a table that is not the
    projection's. Counts: {"tied": ..., "own": ...} embeddings."""
    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    counts = {"tied": 0, "own": 0}
    tied_rows = row_major(projection.quantized) if projection is not None else None

    def add(tensor: TensorProto) -> None:
        """Put tensor among the initializers once."""
        if tensor.name not in inits:
            graph.initializer.append(tensor)
            inits[tensor.name] = tensor

    for node in embedding_gathers(proto):
        table_name = node.input[0]
        table = numpy_helper.to_array(inits[table_name])
        c = tie_factor(table, projection.weight if projection is not None else None)
        source = projection if c is not None else own(table.T.copy(), table_name)
        counts["tied" if c is not None else "own"] += 1
        rows = tied_rows if c is not None and tied_rows is not None else row_major(source.quantized)
        add(rows)
        row_scale = np.broadcast_to(np.float32(1.0 if c is None else c) * source.scale.astype(np.float32),
                                    table.shape[:1])
        base = node.name or node.output[0]
        extra = [numpy_helper.from_array(np.ascontiguousarray(row_scale), f"{table_name}_row_scale"),
                 numpy_helper.from_array(np.array([-1], np.int64), f"{base}/int8_last_axis")]
        graph.initializer.extend(extra)
        new = _int8_gather(node, rows.name, extra[0].name)
        at = list(graph.node).index(node)
        graph.node.remove(node)
        for i, n in enumerate(new):
            graph.node.insert(at + i, n)
    if shared and projection is not None and tied_rows is not None:  # dropped below where nothing reads it
        add(tied_rows)
        rows_projection(proto, projection.quantized.name, tied_rows.name)
    used = {i for n in graph.node for i in n.input}
    for name in [t.name for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(inits[name])
    return counts
