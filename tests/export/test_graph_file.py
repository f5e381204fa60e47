"""A staging graph of any size (export/graph_file.py): below protobuf's 2 GiB a single file, above it its
tensors in a sidecar; read back equal, by onnx and by ONNX Runtime, and gone from the bundle once packed.
The limit is lowered here so that tiny graphs take the large graphs' path (a real one: mBART-50's fp32
decoder, docs/export.md)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export import graph_file
from export.graph_file import save_graph, sidecar
from export.verify.base import open_session
from interface import names
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from tests.support.hf_models import HF_MODELS, parallel


def small_graph() -> onnx.ModelProto:
    """y = x @ W + b, W large enough to leave the graph (4 KiB), b small enough to stay inline."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w, b]),
                             opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def run(path, x: np.ndarray) -> np.ndarray:
    """The graph at path, run by ONNX Runtime on the CPU (as the export's verification opens it)."""
    return open_session(path).run(None, {"x": x})[0]


def test_a_graph_below_the_limit_is_one_file(tmp_path):
    proto = small_graph()
    save_graph(proto, tmp_path / "g.onnx")
    assert not sidecar(tmp_path / "g.onnx").exists()
    assert onnx.load(tmp_path / "g.onnx") == proto


def test_a_graph_above_the_limit_keeps_its_tensors_beside_it_and_reads_back_equal(tmp_path, monkeypatch):
    proto = small_graph()
    before = proto.SerializeToString()
    x = np.random.default_rng(1).standard_normal((3, 32)).astype(np.float32)
    save_graph(proto, tmp_path / "inline.onnx")
    monkeypatch.setattr(graph_file, "PROTOBUF_LIMIT", 1)
    sidecar(tmp_path / "g.onnx").write_bytes(b"stale")  # onnx would append to it
    save_graph(proto, tmp_path / "g.onnx")
    assert proto.SerializeToString() == before  # the caller's proto keeps its data
    assert sidecar(tmp_path / "g.onnx").stat().st_size == 32 * 32 * 4  # W alone; b (128 bytes) inline
    assert (tmp_path / "g.onnx").stat().st_size < 1024
    read = onnx.load(tmp_path / "g.onnx")
    assert {t.name: numpy_helper.to_array(t).tobytes() for t in read.graph.initializer} == \
        {t.name: numpy_helper.to_array(t).tobytes() for t in proto.graph.initializer}
    np.testing.assert_array_equal(run(tmp_path / "g.onnx", x), run(tmp_path / "inline.onnx", x))
    monkeypatch.setattr(graph_file, "PROTOBUF_LIMIT", 2**31)
    save_graph(proto, tmp_path / "g.onnx")  # small again: the old sidecar goes
    assert not sidecar(tmp_path / "g.onnx").exists()


def test_an_invalid_graph_is_refused_whichever_way_it_is_written(tmp_path, monkeypatch):
    proto = small_graph()
    proto.graph.node[1].input[1] = "missing"
    with pytest.raises(onnx.checker.ValidationError):
        save_graph(proto, tmp_path / "a.onnx")
    monkeypatch.setattr(graph_file, "PROTOBUF_LIMIT", 1)
    with pytest.raises(onnx.checker.ValidationError):
        save_graph(proto, tmp_path / "b.onnx")


def import_mbart(hf_dirs, out, **extra):
    """The tiny mBART-50 of HF_MODELS imported to `out` with its options (and `extra`)."""
    from export.build import BuildOptions
    from export.pretrained import import_pretrained

    return import_pretrained(hf_dirs["mbart"], out, BuildOptions(**HF_MODELS["mbart"][2] | extra)).bundle_dir


def assert_same_bundle(large, small) -> None:
    """The same files (no sidecar among them), the same weights files byte for byte, the same greedy tokens
    in fp32 and int8."""
    files = {p.name for p in large.iterdir()}
    assert files == {p.name for p in small.iterdir()}
    assert not [f for f in files if f.endswith(".onnx" + graph_file.SIDECAR_SUFFIX)]
    entries = [json.loads((b / names.BUNDLE_FILE).read_text(encoding="utf-8"))["files"]
               for b in (large, small)]
    data = [f for f in files if f.endswith(".data")]
    assert len(data) == 3  # fp32, int8, fp16
    assert all(entries[0][f]["sha256"] == entries[1][f]["sha256"] for f in data)
    texts = [s for s, _ in parallel(8, 3)]
    decode = DecodeOptions(beam_size=1, max_output_tokens=12, source_language="en_XX",
                           target_language="de_DE")
    for variant in ("base", "int8"):
        got, want = (Runner(b, providers=["CPUExecutionProvider"], variant=variant).translate(texts, decode)
                     for b in (large, small))
        assert [h[0].tokens for h in got] == [h[0].tokens for h in want]


def test_an_import_whose_graphs_all_take_the_large_path_packs_the_same_bundle(
        hf_dirs, hf_bundles, tmp_path, monkeypatch):
    """mBART-50 (a tied embedding, int8 and fp16 variants): every staging graph written with a sidecar
    gives the bundle written without."""
    monkeypatch.setattr(graph_file, "PROTOBUF_LIMIT", 1)
    assert_same_bundle(import_mbart(hf_dirs, tmp_path / "large"), hf_bundles["mbart"])


def test_the_offline_optimization_reads_a_graph_with_a_sidecar(hf_dirs, tmp_path, monkeypatch):
    """`--optimize` runs ONNX Runtime on the staging graphs: on sidecar graphs it gives the same bundle."""
    small = import_mbart(hf_dirs, tmp_path / "small", optimize=True)
    monkeypatch.setattr(graph_file, "PROTOBUF_LIMIT", 1)
    assert_same_bundle(import_mbart(hf_dirs, tmp_path / "large", optimize=True), small)


@pytest.mark.parametrize("limit", [graph_file.PROTOBUF_LIMIT, 1])
def test_tensors_the_offline_optimization_makes_come_back_from_its_own_file(tmp_path, monkeypatch, limit):
    """Constant folding writes new tensors (here Transpose(W)): ONNX Runtime puts them in a file of its own,
    which the optimization reads back (so a graph whose folded tensors pass 2 GiB can be written) before
    save_graph writes the graph as its size says; nothing else is left in the directory."""
    from export.variants.optimized import optimize_offline

    monkeypatch.setattr(graph_file, "PROTOBUF_LIMIT", limit)
    w = np.arange(48 * 40, dtype=np.float32).reshape(48, 40) / 100
    graph = helper.make_graph([helper.make_node("Transpose", ["w"], ["wt"]),
                               helper.make_node("Add", ["x", "wt"], ["y"])], "fold",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [40, 48])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [40, 48])],
                              [numpy_helper.from_array(w, "w")])
    path = tmp_path / "decoder.onnx"
    save_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), path)
    optimize_offline(path)
    proto = onnx.load(path)
    assert [n.op_type for n in proto.graph.node] == ["Add"]  # the Transpose was folded
    (folded,) = proto.graph.initializer
    np.testing.assert_array_equal(numpy_helper.to_array(folded), w.T)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["decoder.onnx"] if limit > 1
                                                          else ["decoder.onnx", "decoder.onnx.data"])
    x = np.ones((40, 48), np.float32)
    np.testing.assert_allclose(run(path, x), x + w.T)
