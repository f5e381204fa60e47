"""The tied embedding stored once (export/tied.py): lookups rewritten as reads of the output projection
give the table's rows, untied tables stay, and exported bundles hold the matrix once per variant."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export.build import FP16_FILES, BuildOptions, build_bundle
from export.tied import share_tied_embeddings, tie_factor, untie_embeddings
from export.verify import open_session
from interface import names

V, D = 37, 8


def lookup_graph(table: np.ndarray, projection: np.ndarray) -> onnx.ModelProto:
    """input_ids (B, T) -> the rows of `table` (B, T, D), and h (N, D) -> h @ projection (N, V)."""
    ids = helper.make_tensor_value_info(names.INPUT_IDS, TensorProto.INT64, ["B", "T"])
    h = helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", D])
    rows = helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["B", "T", D])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", V])
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", names.INPUT_IDS], ["rows"], "embed"),
         helper.make_node("MatMul", ["h", "P"], ["logits"], "generator")],
        "g", [ids, h], [rows, logits],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(projection, "P")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def run(model: onnx.ModelProto, ids: np.ndarray, h: np.ndarray, tmp_path: Path) -> list[np.ndarray]:
    """The model's outputs on the CPU provider."""
    onnx.save_model(model, tmp_path / "model.onnx")
    return open_session(tmp_path / "model.onnx").run(None, {names.INPUT_IDS: ids, "h": h})


@pytest.mark.parametrize("c", [1.0, float(np.sqrt(D)), 0.5])
def test_a_tied_lookup_reads_the_projection_and_gives_the_tables_rows(c, tmp_path):
    rng = np.random.default_rng(0)
    p = rng.standard_normal((D, V)).astype(np.float32)
    table = (np.float32(c) * p.T).astype(np.float32)
    model = lookup_graph(table, p)
    ids = rng.integers(0, V, (3, 5))
    h = rng.standard_normal((2, D)).astype(np.float32)
    assert share_tied_embeddings(model, model.graph.initializer[1]) == 1
    assert [t.name for t in model.graph.initializer if len(t.dims) == 2] == ["P"]  # the table is gone
    gather = next(n for n in model.graph.node if n.op_type == "Gather")
    assert gather.input[0] == "P"
    assert any(n.op_type == "Mul" for n in model.graph.node) == (c != 1.0)
    rows, logits = run(model, ids, h, tmp_path)
    np.testing.assert_allclose(rows, table[ids], rtol=1e-6, atol=0)  # numpy's own lookup
    np.testing.assert_allclose(logits, h @ p, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("c", [1.0, float(np.sqrt(D))])
def test_untie_restores_a_table_that_the_int8_quantizer_takes(c, tmp_path):
    rng = np.random.default_rng(3)
    p = rng.standard_normal((D, V)).astype(np.float32)
    table = (np.float32(c) * p.T).astype(np.float32)
    model = lookup_graph(table, p)
    share_tied_embeddings(model, model.graph.initializer[1])
    assert untie_embeddings(model) == 1
    gathers = [n for n in model.graph.node if n.op_type == "Gather"]
    assert len(gathers) == 1 and not gathers[0].attribute  # a row lookup (axis 0) again
    assert not any(n.op_type in ("Transpose", "Mul") for n in model.graph.node)
    restored = next(t for t in model.graph.initializer if t.name == gathers[0].input[0])
    np.testing.assert_allclose(numpy_helper.to_array(restored), table, rtol=1e-6)
    ids = rng.integers(0, V, (2, 4))
    rows, _ = run(model, ids, rng.standard_normal((1, D)).astype(np.float32), tmp_path)
    np.testing.assert_allclose(rows, table[ids], rtol=1e-6)


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
    assert matrices(tiny_bundle, files, (vocab, d_model)) == set()  # no table of rows left
    assert len(matrices(tiny_bundle, files, (d_model, vocab))) == 1  # one matrix, both graphs read it
    for f in files:
        proto = onnx.load(tiny_bundle / f, load_external_data=False)
        lookups = [n for n in proto.graph.node if n.op_type == "Gather" and n.input[1] == names.INPUT_IDS]
        assert len(lookups) == 1 and lookups[0].attribute[0].i == 1  # the columns of the projection
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
