"""The int8 variant's tied matrix as rows (export/variants/int8_embedding.py,
export/variants/int8_projection.py): the lookups gather rows of the tensor whose Transpose the output
projection's MatMulInteger reads (folded by ONNX Runtime at load), holding the quantizer's own values, and
the graphs decode exactly as the column layout of older bundles does, which still loads and serves."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from export.lowering.tied import output_projection
from export.variants.int8 import INT8_FILES, write_int8
from export.verify.base import cpu_session, greedy_onnx, open_session
from export.verify.int8 import forced_deltas
from interface import names
from interface.generation import GenerationSpec
from service.runtime.model.bundle import file_sha256
from service.runtime.runner import Runner

BASE = {"encoder": names.ENCODER_FILE, "decoder": names.DECODER_FILE}
SOURCES = [[5, 6, 7, 8, 9, 2], [10, 11, 12, 2], [13, 14, 15, 16, 2]]
SETTINGS = {"per-channel": (True, False), "per-tensor": (False, False), "reduce-range": (True, True)}


def d_model_of(bundle: Path) -> int:
    """d_model from bundle.json."""
    return json.loads((bundle / names.BUNDLE_FILE).read_text())["model"]["d_model"]


def int8_names(bundle: Path) -> tuple[str, str]:
    """The names of the projection's int8 matrix Q (d_model, vocabulary) and of its rows R_q = Q^T."""
    proto = onnx.load(bundle / BASE["decoder"], load_external_data=False)
    quantized = f"{output_projection(proto, d_model_of(bundle))}_quantized"
    return quantized, f"{quantized}_rows"


def load(directory: Path, part: str) -> onnx.ModelProto:
    """An int8 graph with its weights."""
    return onnx.load(directory / INT8_FILES[part])


def inits(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Initializer name -> values."""
    return {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def to_columns(proto: onnx.ModelProto, quantized: str, rows: str) -> None:
    """Rewrite the lookups of `rows` in place as older bundles did: Gather(Q, ids, axis=1), Transpose."""
    graph = proto.graph
    values = inits(proto)
    rank = next(len(i.type.tensor_type.shape.dim) for i in graph.input if i.name == names.INPUT_IDS)
    for node in [n for n in graph.node if n.op_type == "Gather" and n.input[0] == rows]:
        at, base = list(graph.node).index(node), node.name
        graph.node.remove(node)
        graph.node.insert(at, helper.make_node("Gather", [quantized, node.input[1]], [f"{base}/cols"],
                                               f"{base}/int8_cols", axis=1))
        graph.node.insert(at + 1, helper.make_node("Transpose", [f"{base}/cols"], [node.output[0]], base,
                                                   perm=[*range(1, rank + 1), 0]))
    if quantized not in values:
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(values[rows].T), quantized))
    for t in [t for t in graph.initializer if t.name == rows]:
        graph.initializer.remove(t)
    onnx.checker.check_model(proto, full_check=True)


def write_columns(directory: Path, quantized: str, rows: str) -> None:
    """The column layout from the graphs write_int8(share_embedding=False) wrote in directory."""
    for part in INT8_FILES:
        proto = load(directory, part)
        to_columns(proto, quantized, rows)
        onnx.save_model(proto, directory / INT8_FILES[part], save_as_external_data=False)


@pytest.fixture(scope="module", params=list(SETTINGS))
def layouts(request, tiny_bundle, tmp_path_factory) -> dict[str, Path]:
    """The tiny bundle's int8 graphs under one quantization setting: "rows" (shared, the default), "own"
    (the projection's MatMulInteger by Q, the lookups a copy of its rows) and "columns" (as older bundles)."""
    per_channel, reduce_range = SETTINGS[request.param]
    quantized, rows = int8_names(tiny_bundle)
    out = {}
    for layout in ("rows", "own", "columns"):
        directory = out[layout] = tmp_path_factory.mktemp(f"{request.param}-{layout}")
        for f in [*BASE.values(), "weights.data"]:
            shutil.copyfile(tiny_bundle / f, directory / f)
        write_int8(directory, BASE, d_model_of(tiny_bundle), per_channel=per_channel,
                   reduce_range=reduce_range, share_embedding=layout == "rows")
        if layout == "columns":
            write_columns(directory, quantized, rows)
    return out


def test_the_lookups_and_the_projection_read_one_rows_tensor_of_the_quantizers_values(layouts, tiny_bundle):
    quantized, rows = int8_names(tiny_bundle)
    decoder = load(layouts["rows"], "decoder")
    for proto in (load(layouts["rows"], "encoder"), decoder):
        int8 = {t.name for t in proto.graph.initializer if t.data_type == onnx.TensorProto.INT8}
        lookups = [n for n in proto.graph.node
                   if n.op_type == "Gather" and n.input[1] == names.INPUT_IDS and n.input[0] in int8]
        assert [(n.input[0], helper.get_node_attr_value(n, "axis")) for n in lookups] == [(rows, 0)]
        assert quantized not in int8
    transpose = [n for n in decoder.graph.node if n.op_type == "Transpose"]
    assert len(transpose) == 1 and list(transpose[0].input) == [rows]
    assert helper.get_node_attr_value(transpose[0], "perm") == [1, 0]
    matmul = [n for n in decoder.graph.node
              if n.op_type == "MatMulInteger" and n.input[1] == transpose[0].output[0]]
    assert len(matmul) == 1
    ours, theirs = inits(decoder), inits(load(layouts["own"], "decoder"))  # "own": the quantizer's Q as it is
    assert ours[rows].dtype == np.int8 and np.array_equal(ours[rows], theirs[quantized].T)
    assert not np.any(ours[matmul[0].input[3]])  # symmetric: zero points 0


def test_onnx_runtime_folds_the_transpose_and_fuses_the_projection(layouts, tmp_path):
    """Loading the rows layout leaves no Transpose and as many DynamicQuantizeMatMul as the column layout:
    the projection is prepacked from a folded Q, not transposed at every run."""
    found = {}
    for layout in ("rows", "columns"):
        so = ort.SessionOptions()
        so.optimized_model_filepath = str(tmp_path / f"{layout}.onnx")
        cpu_session(layouts[layout] / INT8_FILES["decoder"], so)
        found[layout] = Counter(n.op_type for n in onnx.load(tmp_path / f"{layout}.onnx").graph.node)
    assert found["rows"]["Transpose"] == 0 and found["rows"]["MatMulInteger"] == 0
    assert found["rows"]["DynamicQuantizeMatMul"] == found["columns"]["DynamicQuantizeMatMul"] > 0


def test_the_rows_decode_as_the_column_layout(layouts, tiny_model):
    cfg = tiny_model.cfg
    src = np.full((len(SOURCES), max(map(len, SOURCES))), cfg.pad_id, np.int64)
    for i, s in enumerate(SOURCES):
        src[i, : len(s)] = s
    pairs = {k: (open_session(d / INT8_FILES["encoder"]), open_session(d / INT8_FILES["decoder"]))
             for k, d in layouts.items()}
    feeds = {names.INPUT_IDS: src, names.ATTENTION_MASK: (src != cfg.pad_id).astype(np.int64)}
    for a, b in zip(pairs["rows"][0].run(None, feeds), pairs["columns"][0].run(None, feeds), strict=True):
        assert np.array_equal(a, b)  # the same int8 rows, gathered either way
    tokens = {k: greedy_onnx(*p, src, cfg.start_id, cfg.eos_id, cfg.pad_id, 20) for k, p in pairs.items()}
    assert tokens["rows"] == tokens["columns"] == tokens["own"]
    for other in ("columns", "own"):  # the same kernel on the same packed Q: the same log-probs, bit for bit
        _, deltas = forced_deltas(pairs[other], pairs["rows"], src, cfg, 20, GenerationSpec())
        assert len(deltas) > len(SOURCES) and max(deltas) == 0.0


def test_an_old_column_bundle_still_loads_and_serves(tiny_int8_bundle, tmp_path, texts):
    """The tiny int8 bundle with its int8 graphs in the column layout, its bundle.json updated: served
    by the runner, the rows layout's tokens and log-probs."""
    old = tmp_path / "old"
    shutil.copytree(tiny_int8_bundle, old)
    quantized, rows = int8_names(old)
    write_int8(old, BASE, d_model_of(old), share_embedding=False)
    write_columns(old, quantized, rows)
    manifest = json.loads((old / names.BUNDLE_FILE).read_text())
    for f in INT8_FILES.values():
        manifest["files"][f] = {"bytes": (old / f).stat().st_size, "sha256": file_sha256(old / f)}
    (old / names.BUNDLE_FILE).write_text(json.dumps(manifest))
    assert any(n.op_type == "Transpose" for n in load(old, "encoder").graph.node)
    new, columns = (Runner(b, providers=["CPUExecutionProvider"], variant="int8")
                    for b in (tiny_int8_bundle, old))
    want, got = new.translate(texts), columns.translate(texts)
    assert [h[0].tokens for h in got] == [h[0].tokens for h in want]
    assert [h[0].log_prob for h in got] == [h[0].log_prob for h in want]
