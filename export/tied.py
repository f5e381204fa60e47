"""The tied embedding: token embedding tables that are the output projection's matrix, stored once.

A model with tied embeddings (ours, OPUS-MT, M2M100, NLLB) looks each token up in c * P^T, where P
(d_model, vocabulary) is the decoder's output projection weight and c is sqrt(d_model) for a scaled
embedding, else 1. The exporter writes the table and P as two initializers. `share_tied_embeddings`
rewrites every embedding lookup whose table is c * P^T (`tie_factor`) into a read of P itself:

    Gather(table, ids) -> (*ids, d_model)
      becomes
    Gather(P, ids, axis=1) -> (d_model, *ids), Transpose -> (*ids, d_model), Mul by c (where c != 1)

in the encoder and the decoder alike, and drops the table, so that the weights file
(export/weights.py, one copy per distinct tensor) holds the matrix once. ONNX Runtime's MatMul
prepacks P and the lookups read the mapped file, so the memory a served model touches is that of the
two-matrix form (docs/export.md); the int8 variant does the same with P's int8 form
(export/int8_embedding.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from interface import names

# tied embeddings read the output projection's matrix, stored once (opus-mt shape: fp32 1.00x and int8
# 1.01x CTranslate2's bytes), rather than rows of their own (1.40x; but less resident memory, the extra
# being the mapped matrix, shareable page cache): --embedding-rows (docs/export.md)
SHARE_TIED_EMBEDDING = True
# the table is c * P^T where they agree within this fraction of the table's largest entry: float32
# rounding of the exporter's scaling (one ulp), far below any two different matrices' difference
TIE_RTOL = 1e-5


def output_projection(decoder: onnx.ModelProto, d_model: int, output: str = names.LOGPROBS) -> str | None:
    """Name of the decoder's output projection weight: the MatMul weight (d_model, vocabulary) nearest
    to the log-probs."""
    inits = {t.name: t for t in decoder.graph.initializer}
    producer = {out: node for node in decoder.graph.node for out in node.output}
    todo, seen = [output], set()
    while todo:  # breadth first from the log-probs back to the nearest MatMul with a (d_model, V) weight
        node = producer.get(todo.pop(0))
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        weight = inits.get(node.input[1]) if node.op_type == "MatMul" else None
        if weight is not None and len(weight.dims) == 2 and weight.dims[0] == d_model:
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
            and n.input[0] in inits and len(inits[n.input[0]].dims) == 2
            and all(a.name != "axis" or a.i == 0 for a in n.attribute)]


def _lookup_nodes(node: onnx.NodeProto, weight: str, factor: str | None, rank: int) -> list[onnx.NodeProto]:
    """The nodes computing node's output (a row lookup) from the columns of weight (d_model, vocabulary)."""
    ids, out, base = node.input[1], node.output[0], node.name or node.output[0]
    cols, rows = f"{base}/tied_cols", f"{base}/tied_rows"
    nodes = [helper.make_node("Gather", [weight, ids], [cols], f"{base}/tied_gather", axis=1),
             helper.make_node("Transpose", [cols], [rows if factor else out], f"{base}/tied_transpose",
                              perm=[*range(1, rank + 1), 0])]
    if factor:
        nodes.append(helper.make_node("Mul", [rows, factor], [out], f"{base}/tied_scale"))
    return nodes


def share_tied_embeddings(proto: onnx.ModelProto, weight: onnx.TensorProto) -> int:
    """Rewrite proto's lookups into tables that are c * weight^T as reads of weight (module docstring),
    adding weight where proto lacks it and dropping the tables; how many were rewritten."""
    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    p = numpy_helper.to_array(weight)
    ids_rank = next(len(i.type.tensor_type.shape.dim) for i in graph.input if i.name == names.INPUT_IDS)
    count = 0
    for node in embedding_gathers(proto):
        table = numpy_helper.to_array(inits[node.input[0]])
        c = tie_factor(table, p)
        if c is None:
            continue
        if weight.name not in inits:
            graph.initializer.append(weight)
            inits[weight.name] = weight
        factor = None
        if abs(c - 1.0) > TIE_RTOL:
            factor = f"{node.name or node.output[0]}/tied_factor"
            graph.initializer.append(numpy_helper.from_array(np.array(c, dtype=table.dtype), factor))
        at = list(graph.node).index(node)
        graph.node.remove(node)
        for i, new in enumerate(_lookup_nodes(node, weight.name, factor, ids_rank)):
            graph.node.insert(at + i, new)
        count += 1
    used = {i for n in graph.node for i in n.input}
    for name in [t.name for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(inits[name])
    return count


def untie_embeddings(proto: onnx.ModelProto) -> int:
    """Undo `share_tied_embeddings` in place: each lookup of the projection's columns becomes a Gather
    of a table c * P^T of its own (what export/quantize.py takes in); how many were restored."""
    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    count = 0
    for gather in [n for n in graph.node if n.op_type == "Gather" and n.input[1] == names.INPUT_IDS
                   and n.input[0] in inits and any(a.name == "axis" and a.i == 1 for a in n.attribute)]:
        chain = [gather, consumers[gather.output[0]][0]]
        after = consumers.get(chain[1].output[0], [])
        if len(after) == 1 and after[0].op_type == "Mul" and after[0].input[1] in inits:
            chain.append(after[0])
        c = numpy_helper.to_array(inits[chain[2].input[1]]) if len(chain) == 3 else 1.0
        table = numpy_helper.to_array(inits[gather.input[0]]).T * c
        name = f"{gather.name or gather.output[0]}/table"
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(table), name))
        at = list(graph.node).index(gather)
        for node in chain:
            graph.node.remove(node)
        graph.node.insert(at, helper.make_node("Gather", [name, gather.input[1]], [chain[-1].output[0]],
                                               gather.name))
        count += 1
    used = {i for n in graph.node for i in n.input}
    for t in [t for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(t)
    return count


def tie_files(bundle_dir: Path, files: Mapping[str, str], d_model: int) -> int:
    """Rewrite the graphs files["encoder"] and files["decoder"] in place so that their tied embeddings
    read the decoder's output projection; how many lookups were rewritten (0: nothing is tied)."""
    decoder = onnx.load(bundle_dir / files["decoder"])
    name = output_projection(decoder, d_model, decoder.graph.output[0].name)
    if name is None:
        return 0
    weight = next(t for t in decoder.graph.initializer if t.name == name)
    count = 0
    for graph in ("decoder", "encoder"):
        proto = decoder if graph == "decoder" else onnx.load(bundle_dir / files[graph])
        if n := share_tied_embeddings(proto, weight):
            onnx.checker.check_model(proto, full_check=True)
            onnx.save_model(proto, bundle_dir / files[graph], save_as_external_data=False)
            count += n
    return count
