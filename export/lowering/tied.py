"""The tied embedding: token embedding tables that are the output projection's matrix, stored once.

A model with tied embeddings (ours, OPUS-MT, M2M100, NLLB) looks each token up in c * P^T, where P
(d_model, vocabulary) is the decoder's output projection weight and c is sqrt(d_model) for a scaled
embedding, else 1. The exporter writes the table and P as two initializers. `share_tied_embeddings`
stores the matrix as rows, R = P^T (vocabulary, d_model), under P's name, and rewrites every
embedding lookup whose table is c * P^T (`tie_factor`) and the projection into reads of R:

    Gather(table, ids) -> (*ids, d_model)
      becomes
    Gather(R, ids) -> (*ids, d_model), Mul by c (where c != 1)

    MatMul(h, P) -> (*lead, vocabulary)
      becomes
    Reshape(h) -> (N, d_model), Gemm(., R, transB=1) -> (N, vocabulary), Reshape -> (*lead, vocabulary)

in the encoder and the decoder alike, and drops the table, so that the weights file
(export/weights.py, one copy per distinct tensor) holds the matrix once. A token reads one contiguous
row of R; ONNX Runtime's Gemm prepacks R with its transB as its MatMul prepacked P, so the logits are
computed by the same kernel on the same packed matrix, and the service drops the mapped pages the
packing read (service/ops/mapped.py; docs/export.md). `untie_embeddings` restores
the tables and the MatMul (what the int8 quantizer takes in), from this layout or from the earlier
one whose lookups read P's columns (Gather(P, ids, axis=1), Transpose, Mul), which old bundles hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from export.graph_file import save_graph
from interface import names

# tied embeddings read the output projection's matrix, stored once as rows (opus-mt shape: fp32 1.00x
# CTranslate2's bytes), rather than tables of their own (1.40x): --embedding-rows (docs/export.md)
SHARE_TIED_EMBEDDING = True
# the table is c * P^T where they agree within this fraction of the table's largest entry: float32
# rounding of the exporter's scaling (one ulp), far below any two different matrices' difference
TIE_RTOL = 1e-5


def _axis(node: onnx.NodeProto) -> int:
    """A Gather's axis attribute (0 when absent)."""
    return next((a.i for a in node.attribute if a.name == "axis"), 0)


def _trans_b(node: onnx.NodeProto) -> bool:
    """Whether a Gemm reads its B transposed."""
    return any(a.name == "transB" and a.i for a in node.attribute)


def output_projection(decoder: onnx.ModelProto, d_model: int, output: str = names.LOGPROBS) -> str | None:
    """Name of the decoder's output projection weight nearest to the log-probs: a MatMul's (d_model,
    vocabulary) weight, or the rows (vocabulary, d_model) that a Gemm reads transposed."""
    inits = {t.name: t for t in decoder.graph.initializer}
    producer = {out: node for node in decoder.graph.node for out in node.output}
    todo, seen = [output], set()
    while todo:  # breadth first from the log-probs back to the nearest projection weight
        node = producer.get(todo.pop(0))
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        weight = inits.get(node.input[1]) if node.op_type in ("MatMul", "Gemm") else None
        axis = 1 if node.op_type == "Gemm" and _trans_b(node) else 0
        if weight is not None and len(weight.dims) == 2 and weight.dims[axis] == d_model:
            return node.input[1]
        todo.extend(node.input)
    return None


def tie_factor(table: np.ndarray, weight: np.ndarray | None) -> float | None:
    """c such that table = c * weight^T (within TIE_RTOL), else None."""
    if weight is None or table.shape[::-1] != weight.shape:
        return None
    weight = weight.T
    k = int(np.abs(weight).argmax())
    if weight.flat[k] == 0:
        return None
    c = float(table.flat[k]) / float(weight.flat[k])
    if np.abs(table - np.float32(c) * weight).max() > TIE_RTOL * np.abs(table).max():
        return None
    return c


def embedding_gathers(proto: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The Gathers of a rank-2 initializer by the graph input `input_ids`: the token embeddings."""
    inits = {t.name: t for t in proto.graph.initializer}
    return [n for n in proto.graph.node if n.op_type == "Gather" and n.input[1] == names.INPUT_IDS
            and n.input[0] in inits and len(inits[n.input[0]].dims) == 2 and _axis(n) == 0]


def _replace(graph: onnx.GraphProto, old: list[onnx.NodeProto], new: list[onnx.NodeProto]) -> None:
    """Put `new` where the first of `old` was and remove `old`."""
    at = list(graph.node).index(old[0])
    for node in old:
        graph.node.remove(node)
    for i, node in enumerate(new):
        graph.node.insert(at + i, node)


def _set_initializer(graph: onnx.GraphProto, tensor: onnx.TensorProto) -> None:
    """Put tensor in graph's initializers in place of any of its name, dropping that name's value info."""
    for t in [t for t in graph.initializer if t.name == tensor.name]:
        graph.initializer.remove(t)
    for v in [v for v in graph.value_info if v.name == tensor.name]:
        graph.value_info.remove(v)
    graph.initializer.append(tensor)


def _drop_unused(graph: onnx.GraphProto) -> None:
    """Remove the initializers no node reads."""
    used = {i for n in graph.node for i in n.input}
    for t in [t for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(t)


def _row_projection(graph: onnx.GraphProto, matmul: onnx.NodeProto, d_model: int, vocab: int) -> None:
    """Replace MatMul(h, P) by the Gemm of h's rows by the rows R (P's name, P^T's values), transB."""
    h, rows, out, base = matmul.input[0], matmul.input[1], matmul.output[0], matmul.name or matmul.output[0]
    flat, lead, vocab_dim = f"{base}/tied_flat_shape", f"{base}/tied_lead", f"{base}/tied_vocab"
    graph.initializer.extend([numpy_helper.from_array(np.array([-1, d_model], np.int64), flat),
                              numpy_helper.from_array(np.array([vocab], np.int64), vocab_dim)])
    _replace(graph, [matmul], [
        helper.make_node("Reshape", [h, flat], [f"{base}/tied_h2d"], f"{base}/tied_flatten"),
        helper.make_node("Gemm", [f"{base}/tied_h2d", rows], [f"{base}/tied_logits2d"], f"{base}/tied_gemm",
                         transB=1),
        helper.make_node("Shape", [h], [lead], f"{base}/tied_lead", end=-1),
        helper.make_node("Concat", [lead, vocab_dim], [f"{base}/tied_shape"], f"{base}/tied_shape", axis=0),
        helper.make_node("Reshape", [f"{base}/tied_logits2d", f"{base}/tied_shape"], [out],
                         f"{base}/tied_unflatten"),
    ])


def share_tied_embeddings(proto: onnx.ModelProto, weight: onnx.TensorProto, project: bool = False) -> int:
    """Rewrite proto's lookups into tables that are c * weight^T, and its MatMuls by weight, as reads of
    weight's rows (module docstring), which replace weight (or are added where proto lacks it); the
    MatMuls only where a lookup was rewritten or `project`. How many lookups were rewritten."""
    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    p = numpy_helper.to_array(weight)
    rows = numpy_helper.from_array(np.ascontiguousarray(p.T), weight.name)
    count = 0
    for node in embedding_gathers(proto):
        table = numpy_helper.to_array(inits[node.input[0]])
        c = tie_factor(table, p)
        if c is None:
            continue
        base = node.name or node.output[0]
        looked_up = f"{base}/tied_rows" if abs(c - 1.0) > TIE_RTOL else node.output[0]
        new = [helper.make_node("Gather", [weight.name, node.input[1]], [looked_up], f"{base}/tied_gather",
                                axis=0)]
        if looked_up != node.output[0]:
            factor = f"{base}/tied_factor"
            graph.initializer.append(numpy_helper.from_array(np.array(c, dtype=table.dtype), factor))
            new.append(helper.make_node("Mul", [looked_up, factor], [node.output[0]], f"{base}/tied_scale"))
        _replace(graph, [node], new)
        count += 1
    if count or project:
        for node in [n for n in graph.node if n.op_type == "MatMul" and n.input[1] == weight.name]:
            _row_projection(graph, node, p.shape[0], p.shape[1])
        if weight.name in {i for n in graph.node for i in n.input}:
            _set_initializer(graph, rows)
    _drop_unused(graph)
    return count


def _consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Value name -> the nodes that read it."""
    out: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for i in node.input:
            out.setdefault(i, []).append(node)
    return out


def _untie_lookups(graph: onnx.GraphProto) -> int:
    """Each tied lookup (of rows, or of P's columns) as a Gather of a table c * P^T of its own."""
    inits = {t.name: t for t in graph.initializer}
    consumers = _consumers(graph)
    count = 0
    for gather in [n for n in graph.node if n.op_type == "Gather" and n.input[1] == names.INPUT_IDS
                   and n.input[0] in inits and (_axis(n) == 1 or n.name.endswith("/tied_gather"))]:
        columns = _axis(gather) == 1
        chain = [gather, consumers[gather.output[0]][0]] if columns else [gather]
        after = consumers.get(chain[-1].output[0], [])
        if len(after) == 1 and after[0].op_type == "Mul" and after[0].input[1] in inits:
            chain.append(after[0])
        c = numpy_helper.to_array(inits[chain[-1].input[1]]) if chain[-1].op_type == "Mul" else 1.0
        matrix = numpy_helper.to_array(inits[gather.input[0]])
        table = (matrix.T if columns else matrix) * c
        name = f"{gather.name or gather.output[0]}/table"
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(table), name))
        _replace(graph, chain, [helper.make_node("Gather", [name, gather.input[1]], [chain[-1].output[0]],
                                                 gather.name)])
        count += 1
    return count


def _untie_projection(graph: onnx.GraphProto) -> None:
    """Each Gemm of rows R (transB, between Reshapes) as MatMul(h, P), P = R^T under R's name."""
    inits = {t.name: t for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    consumers = _consumers(graph)
    for gemm in [n for n in graph.node if n.op_type == "Gemm" and n.name.endswith("/tied_gemm")]:
        flatten, unflatten = producer[gemm.input[0]], consumers[gemm.output[0]][0]
        concat = producer[unflatten.input[1]]
        shape = producer[concat.input[0]]
        rows = inits[gemm.input[1]]
        _set_initializer(graph, numpy_helper.from_array(np.ascontiguousarray(numpy_helper.to_array(rows).T),
                                                        rows.name))
        _replace(graph, [flatten, gemm, shape, concat, unflatten],
                 [helper.make_node("MatMul", [flatten.input[0], rows.name], [unflatten.output[0]],
                                   gemm.name.removesuffix("/tied_gemm"))])


def untie_embeddings(proto: onnx.ModelProto) -> int:
    """Undo `share_tied_embeddings` (or the column layout of old bundles) in place: each tied lookup
    becomes a Gather of a table c * P^T of its own and the projection a MatMul by P (what
    export/variants/int8.py takes in); how many lookups were restored."""
    count = _untie_lookups(proto.graph)
    _untie_projection(proto.graph)
    _drop_unused(proto.graph)
    return count


def tie_files(bundle_dir: Path, files: Mapping[str, str], d_model: int) -> int:
    """Rewrite the graphs files["encoder"] and files["decoder"] in place so that their tied embeddings
    and the projection read the decoder's output projection as rows; how many lookups were rewritten
    (0: nothing is tied, the graphs are left as they are)."""
    decoder = onnx.load(bundle_dir / files["decoder"])
    name = output_projection(decoder, d_model, decoder.graph.output[0].name)
    if name is None:
        return 0
    weight = next(t for t in decoder.graph.initializer if t.name == name)
    encoder = onnx.load(bundle_dir / files["encoder"])
    tied = {"encoder": share_tied_embeddings(encoder, weight)}
    tied["decoder"] = share_tied_embeddings(decoder, weight, project=tied["encoder"] > 0)
    for graph, proto in (("encoder", encoder), ("decoder", decoder)):
        if tied[graph] or (graph == "decoder" and tied["encoder"]):
            save_graph(proto, bundle_dir / files[graph])
    return sum(tied.values())
