"""The tied embedding stored once (export/lowering/tied.py): lookups rewritten as reads of the output
projection give the table's rows, untied tables stay, and exported bundles hold the matrix once per
variant."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export.build import FP16_FILES, BuildOptions, build_bundle
from export.lowering.tied import share_tied_embeddings, tie_factor, untie_embeddings
from export.verify.base import open_session
from interface import names

V, D = 37, 8


def lookup_graph(table: np.ndarray, projection: np.ndarray) -> onnx.ModelProto:
    """input_ids (B, T) -> the rows of `table` (B, T, D), and h (B, T, D) -> h @ projection (B, T, V)."""
    ids = helper.make_tensor_value_info(names.INPUT_IDS, TensorProto.INT64, ["B", "T"])
    h = helper.make_tensor_value_info("h", TensorProto.FLOAT, ["B", "T", D])
    rows = helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["B", "T", D])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "T", V])
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", names.INPUT_IDS], ["rows"], "embed"),
         helper.make_node("MatMul", ["h", "P"], ["logits"], "generator")],
        "g", [ids, h], [rows, logits],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(projection, "P")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def column_layout(model: onnx.ModelProto, c: float) -> onnx.ModelProto:
    """The lookup as old bundles wrote it: Gather(P, ids, axis=1), Transpose, Mul by c (where c != 1)."""
    graph = model.graph
    graph.node.remove(graph.node[0])
    graph.initializer.remove(graph.initializer[0])
    nodes = [helper.make_node("Gather", ["P", names.INPUT_IDS], ["cols"], "embed/tied_gather", axis=1),
             helper.make_node("Transpose", ["cols"], ["rows" if c == 1.0 else "unscaled"],
                              "embed/tied_transpose", perm=[1, 2, 0])]
    if c != 1.0:
        graph.initializer.append(numpy_helper.from_array(np.array(c, np.float32), "embed/tied_factor"))
        nodes.append(helper.make_node("Mul", ["unscaled", "embed/tied_factor"], ["rows"], "embed/tied_scale"))
    for i, node in enumerate(nodes):
        graph.node.insert(i, node)
    return model


def run(model: onnx.ModelProto, ids: np.ndarray, h: np.ndarray, tmp_path: Path) -> list[np.ndarray]:
    """The model's outputs on the CPU provider."""
    onnx.save_model(model, tmp_path / "model.onnx")
    return open_session(tmp_path / "model.onnx").run(None, {names.INPUT_IDS: ids, "h": h})


def row_reads(model: onnx.ModelProto) -> tuple[list[onnx.NodeProto], list[onnx.NodeProto]]:
    """The graph's Gathers by input_ids and its Gemms."""
    return ([n for n in model.graph.node if n.op_type == "Gather" and n.input[1] == names.INPUT_IDS],
            [n for n in model.graph.node if n.op_type == "Gemm"])


@pytest.mark.parametrize("c", [1.0, float(np.sqrt(D)), 0.5])
def test_a_tied_lookup_and_the_projection_read_the_rows_and_give_the_untied_outputs(c, tmp_path):
    rng = np.random.default_rng(0)
    p = rng.standard_normal((D, V)).astype(np.float32)
    table = (np.float32(c) * p.T).astype(np.float32)
    ids = rng.integers(0, V, (3, 5))
    h = rng.standard_normal((2, 4, D)).astype(np.float32)
    untied = run(lookup_graph(table, p), ids, h, tmp_path)
    model = lookup_graph(table, p)
    assert share_tied_embeddings(model, model.graph.initializer[1]) == 1
    matrices = [t for t in model.graph.initializer if len(t.dims) == 2]
    assert [(t.name, list(t.dims)) for t in matrices] == [("P", [V, D])]  # the table is gone, P as rows
    gathers, gemms = row_reads(model)
    assert len(gathers) == 1 and gathers[0].input[0] == "P" and gathers[0].attribute[0].i == 0  # a row
    assert len(gemms) == 1 and gemms[0].input[1] == "P"
    assert {a.name: a.i for a in gemms[0].attribute} == {"transB": 1}
    assert not any(n.op_type in ("MatMul", "Transpose") for n in model.graph.node)
    assert any(n.op_type == "Mul" for n in model.graph.node) == (c != 1.0)
    rows, logits = run(model, ids, h, tmp_path)
    assert np.array_equal(rows, table[ids]) and np.array_equal(rows, untied[0])  # numpy's own lookup
    assert logits.shape == (2, 4, V) and np.array_equal(logits, untied[1])  # the MatMul's, bit for bit
    np.testing.assert_allclose(logits, h @ p, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("c", [1.0, float(np.sqrt(D))])
@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_untie_restores_a_table_and_the_matmul_that_the_int8_quantizer_takes(c, layout, tmp_path):
    rng = np.random.default_rng(3)
    p = rng.standard_normal((D, V)).astype(np.float32)
    table = (np.float32(c) * p.T).astype(np.float32)
    model = lookup_graph(table, p)
    if layout == "rows":
        share_tied_embeddings(model, model.graph.initializer[1])
    else:  # an old bundle's graph
        model = column_layout(model, c)
    assert untie_embeddings(model) == 1
    gathers = [n for n in model.graph.node if n.op_type == "Gather"]
    assert len(gathers) == 1 and not gathers[0].attribute  # a row lookup (axis 0) again
    assert not any(n.op_type in ("Transpose", "Mul", "Gemm", "Reshape") for n in model.graph.node)
    matmul = next(n for n in model.graph.node if n.op_type == "MatMul")
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert matmul.input[1] == "P" and np.array_equal(inits["P"], p)
    np.testing.assert_allclose(inits[gathers[0].input[0]], table, rtol=1e-6)
    ids = rng.integers(0, V, (2, 4))
    h = rng.standard_normal((1, 3, D)).astype(np.float32)
    rows, logits = run(model, ids, h, tmp_path)
    np.testing.assert_allclose(rows, table[ids], rtol=1e-6)
    np.testing.assert_allclose(logits, h @ p, rtol=1e-5, atol=1e-5)


def test_the_projection_reads_rows_for_a_tied_encoder_alone(tmp_path):
    """A decoder whose own table is not tied still reads P as rows when the encoder's lookup is."""
    rng = np.random.default_rng(4)
    p = rng.standard_normal((D, V)).astype(np.float32)
    model = lookup_graph(rng.standard_normal((V, D)).astype(np.float32), p)
    h = rng.standard_normal((2, 3, D)).astype(np.float32)
    ids = rng.integers(0, V, (1, 2))
    untied = run(model, ids, h, tmp_path)
    assert share_tied_embeddings(model, model.graph.initializer[1], project=True) == 0
    gathers, gemms = row_reads(model)
    assert gathers[0].input[0] == "table" and [g.input[1] for g in gemms] == ["P"]
    assert all(np.array_equal(a, b) for a, b in zip(run(model, ids, h, tmp_path), untied, strict=True))


def test_an_untied_table_is_left_as_it_is():
    rng = np.random.default_rng(1)
    p = rng.standard_normal((D, V)).astype(np.float32)
    other = rng.standard_normal((V, D)).astype(np.float32)
    model = lookup_graph(other, p)
    before = model.SerializeToString()
    assert share_tied_embeddings(model, model.graph.initializer[1]) == 0
    assert model.SerializeToString() == before


def test_tie_factor():
    rng = np.random.default_rng(2)
    p = rng.standard_normal((D, V)).astype(np.float32)
    assert tie_factor((np.float32(3.0) * p.T).astype(np.float32), p) == pytest.approx(3.0, rel=1e-6)
    assert tie_factor(p.T.copy(), p) == pytest.approx(1.0)
    nearly = p.T.copy()
    nearly[4, 2] += 1e-3 * np.abs(p).max()  # one entry off: a different matrix
    assert tie_factor(nearly, p) is None
    assert tie_factor(p.copy(), p) is None  # (D, V) is not a table of V rows
    assert tie_factor(p.T.copy(), None) is None


def matrices(bundle, files: list[str], shape: tuple[int, int]) -> set[tuple[str, str]]:
    """(location, offset) of every stored initializer of `shape` that the graphs reference."""
    found = set()
    for f in files:
        for t in onnx.load(bundle / f, load_external_data=False).graph.initializer:
            if tuple(t.dims) == shape:
                where = {e.key: e.value for e in t.external_data}
                found.add((where.get("location", f), where.get("offset", t.name)))
    return found


@pytest.mark.parametrize("files", [
    [names.ENCODER_FILE, names.DECODER_FILE],
    [FP16_FILES["encoder"], FP16_FILES["decoder"]],
], ids=["fp32", "fp16"])
def test_bundles_store_the_tied_matrix_once(tiny_bundle, files):
    model = json.loads((tiny_bundle / names.BUNDLE_FILE).read_text())["model"]
    vocab, d_model = model["vocab_size"], model["d_model"]
    assert matrices(tiny_bundle, files, (d_model, vocab)) == set()  # no (d_model, V) projection left
    assert len(matrices(tiny_bundle, files, (vocab, d_model))) == 1  # one matrix of rows, both graphs read it
    read = set()
    for f in files:
        proto = onnx.load(tiny_bundle / f, load_external_data=False)
        lookups, gemms = row_reads(proto)
        assert len(lookups) == 1 and lookups[0].attribute[0].i == 0  # rows of the matrix
        read |= {lookups[0].input[0], *(g.input[1] for g in gemms)}
        if f == files[1]:  # the decoder's projection: a Gemm of those rows, transposed
            assert [g.input[1] for g in gemms] == [lookups[0].input[0]]
            assert not [n for n in proto.graph.node if n.op_type == "MatMul" and n.input[1] in read]
    assert len(read) == 1
    verification = json.loads((tiny_bundle / names.BUNDLE_FILE).read_text())["verification"]
    assert verification["tied_embeddings"] == 2  # the encoder's and the decoder's lookups


def test_embedding_rows_keeps_the_table_of_its_own(tiny_checkpoint, tmp_path):
    """--embedding-rows: the fp32 graphs keep their row tables (the matrix twice), verified as before."""
    build_bundle(tiny_checkpoint, tmp_path / "rows", BuildOptions(embedding_rows=True))
    manifest = json.loads((tmp_path / "rows" / names.BUNDLE_FILE).read_text())
    vocab, d_model = manifest["model"]["vocab_size"], manifest["model"]["d_model"]
    files = [names.ENCODER_FILE, names.DECODER_FILE]
    assert len(matrices(tmp_path / "rows", files, (vocab, d_model))) == 1  # the scaled table, shared
    assert len(matrices(tmp_path / "rows", files, (d_model, vocab))) == 1  # the projection
    assert manifest["verification"]["tied_embeddings"] == 0
