"""A bundle's weights, packed once per variant (export/weights.py): each tensor stored once, read back
exactly, refused when damaged; packed and inline (older) bundles decode alike."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import export.weights
from export.build import FP16_FILES, BuildOptions, build_bundle
from export.export import ExportError
from export.verify.base import open_session
from export.weights import WeightsError, pack, verify_packed
from interface import names
from service.runtime.model.bundle import load_bundle
from service.runtime.runner import Runner

BASE = [names.ENCODER_FILE, names.DECODER_FILE]
FP16 = [FP16_FILES["encoder"], FP16_FILES["decoder"]]


def all_initializers(graph: onnx.GraphProto) -> list[TensorProto]:
    """Every initializer of graph and of the subgraphs of its nodes, depth first."""
    out = list(graph.initializer)
    for node in graph.node:
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                out += all_initializers(sub)
    return out


def content(t: TensorProto) -> tuple[int, tuple[int, ...], bytes]:
    """(element type, dims, bytes) of a tensor whose data is loaded."""
    array = numpy_helper.to_array(t)
    return t.data_type, tuple(t.dims), array.astype(array.dtype.newbyteorder("<")).tobytes()


def location(t: TensorProto) -> dict[str, str]:
    """The external_data entries of a tensor (location, offset, length)."""
    return {e.key: e.value for e in t.external_data}


@pytest.fixture(scope="module")
def inline(tiny_bundle, tmp_path_factory) -> Path:
    """The tiny bundle as older exports wrote it: every graph with its weights inline, no weights files."""
    out = tmp_path_factory.mktemp("inline") / "bundle"
    out.mkdir()
    manifest = json.loads((tiny_bundle / names.BUNDLE_FILE).read_text())
    for name in manifest["files"]:
        if name.endswith(".onnx"):  # onnx.load reads the external data in; saved inline
            onnx.save_model(onnx.load(tiny_bundle / name), out / name)
        elif name not in manifest["weights"]:
            shutil.copy(tiny_bundle / name, out / name)
    del manifest["weights"], manifest["verification"]["weights"]
    manifest["files"] = {p.name: {"sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                                  "bytes": p.stat().st_size} for p in sorted(out.iterdir())}
    (out / names.BUNDLE_FILE).write_text(json.dumps(manifest))
    return out


def test_bundle_lists_one_weights_file_per_variant(tiny_bundle):
    manifest = json.loads((tiny_bundle / names.BUNDLE_FILE).read_text())
    assert manifest["weights"] == {"weights.data": BASE, "weights.fp16.data": FP16}
    assert {"weights.data", "weights.fp16.data"} <= set(manifest["files"])
    for f in BASE + FP16:  # the graphs themselves are small now
        assert (tiny_bundle / f).stat().st_size < (tiny_bundle / names.weights_file()).stat().st_size / 4


@pytest.mark.parametrize(("data_file", "files"), [("weights.data", BASE), ("weights.fp16.data", FP16)])
def test_weights_file_holds_each_distinct_tensor_once(tiny_bundle, inline, data_file, files):
    """The file is the distinct tensors of >= 1 KiB of the group's inline graphs, in order of first
    appearance, each at a 64-byte boundary; every reference reads its own tensor's bytes."""
    first: dict[tuple, int] = {}  # content -> its length, in order of first appearance
    seen_in: dict[tuple, set[str]] = {}
    referenced = 0
    for f in files:
        for t in all_initializers(onnx.load(inline / f).graph):
            c = content(t)
            if len(c[2]) >= 1024:
                first.setdefault(c, len(c[2]))
                seen_in.setdefault(c, set()).add(f)
                referenced += len(c[2])
    size = 0
    for n in first.values():
        size += -size % 64 + n
    data = (tiny_bundle / data_file).read_bytes()
    assert len(data) == size < referenced
    vocab, d_model = (json.loads((tiny_bundle / names.BUNDLE_FILE).read_text())["model"][k]
                      for k in ("vocab_size", "d_model"))
    shared = [c for c, where in seen_in.items() if where == set(files) and c[1] == (vocab, d_model)]
    assert shared  # the tied rows, in the encoder and the decoder (export/lowering/tied.py)
    offsets = set()
    for f in files:
        packed = all_initializers(onnx.load(tiny_bundle / f, load_external_data=False).graph)
        original = all_initializers(onnx.load(inline / f).graph)
        assert [t.name for t in packed] == [t.name for t in original]
        for p, o in zip(packed, original, strict=True):
            if p.data_location != TensorProto.EXTERNAL:
                assert len(content(o)[2]) < 1024 and content(p) == content(o)
                continue
            where = location(p)
            start, length = int(where["offset"]), int(where["length"])
            assert where["location"] == data_file and start % 64 == 0
            assert data[start:start + length] == content(o)[2]
            offsets.add((start, length))
    assert len(offsets) == len(first)


def test_packed_and_inline_bundles_decode_the_same_tokens(tiny_bundle, inline, texts):
    """The inline bundle loads as it always did; both give the same tokens, in either variant (fp16 on
    the CPU provider too)."""
    assert not any(p.suffix == ".data" for p in inline.iterdir())
    assert "weights" not in load_bundle(inline).manifest
    for f in BASE:
        assert all(t.data_location != TensorProto.EXTERNAL
                   for t in onnx.load(inline / f, load_external_data=False).graph.initializer)
    for variant in ("base", "fp16"):
        results = {}
        for bundle in (tiny_bundle, inline):
            runner = Runner(bundle, providers=["CPUExecutionProvider"], variant=variant)
            assert runner.variant_name == variant
            results[bundle] = [[h.tokens for h in hyps] for hyps in runner.translate(texts)]
        want = results[inline]
        assert len({tuple(h[0]) for h in want}) > 1
        assert all(got == want for got in results.values()), variant


@pytest.fixture
def packed_copy(inline, tmp_path) -> tuple[Path, export.weights.PackReport]:
    """The inline base graphs packed anew in tmp_path (verified), and the report."""
    for f in BASE:
        shutil.copy(inline / f, tmp_path / f)
    report = pack(tmp_path, BASE, "weights.data")
    verify_packed(tmp_path, report)
    return tmp_path, report


def test_verify_names_the_tensor_of_a_damaged_weights_file(packed_copy):
    directory, report = packed_copy
    encoder = onnx.load(directory / names.ENCODER_FILE, load_external_data=False).graph
    tensor = next(t for t in encoder.initializer if t.data_location == TensorProto.EXTERNAL)
    where = location(tensor)
    data = bytearray((directory / "weights.data").read_bytes())
    data[int(where["offset"]) + int(where["length"]) // 2] ^= 0x01
    (directory / "weights.data").write_bytes(bytes(data))
    with pytest.raises(WeightsError, match=rf"^encoder\.onnx: initializer {tensor.name} reads back from "
                                           r"weights\.data with other bytes"):
        verify_packed(directory, report)
    assert issubclass(WeightsError, ExportError)  # the export CLI's "no bundle written"


def test_verify_refuses_a_truncated_or_foreign_weights_file(packed_copy):
    directory, report = packed_copy
    data = (directory / "weights.data").read_bytes()
    (directory / "weights.data").write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match=r"^encoder\.onnx: cannot read its weights from weights\.data"):
        verify_packed(directory, report)
    (directory / "weights.data").write_bytes(data)
    verify_packed(directory, report)
    report.data_file = "other.data"  # the graphs point into a file the group does not own
    with pytest.raises(WeightsError, match=r"^encoder\.onnx: initializer \S+ is stored in weights\.data, "
                                           r"not other\.data"):
        verify_packed(directory, report)


def test_export_refuses_weights_that_do_not_read_back(tiny_checkpoint, tmp_path, monkeypatch):
    """A packing that writes wrong bytes stops the export: WeightsError, and no bundle (nor staging
    directory) is left."""
    real_pack = export.weights.pack

    def damaging_pack(bundle_dir: Path, files: list[str], data_file: str, threshold: int = 1024):
        report = real_pack(bundle_dir, files, data_file, threshold)
        with open(bundle_dir / data_file, "r+b") as f:
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 0xFF]))
        return report

    monkeypatch.setattr(export.weights, "pack", damaging_pack)
    out = tmp_path / "bundle"
    with pytest.raises(WeightsError, match=r"^encoder\.onnx: initializer \S+ reads back"):
        build_bundle(tiny_checkpoint, out, BuildOptions(verify_sources=1))
    assert list(tmp_path.iterdir()) == []


def vi(name: str, elem: int = TensorProto.FLOAT, shape: list[int] | None = None) -> onnx.ValueInfoProto:
    """A value info (default: float32 (16, 16))."""
    return helper.make_tensor_value_info(name, elem, [16, 16] if shape is None else shape)


def loop_model(w: np.ndarray, body_w: np.ndarray, branch_w: TensorProto, small: np.ndarray
               ) -> onnx.ModelProto:
    """x -> Loop(x @ body_w + w, n times) -> If(c: + sum(float(branch_w)) + small, else: - w); the body
    and the then-branch hold initializers of their own."""
    node, b = helper.make_node, TensorProto.BOOL
    body = helper.make_graph(
        [node("MatMul", ["x_in", "body_w"], ["xw"]), node("Add", ["xw", "w"], ["x_out"]),
         node("Identity", ["cond_in"], ["cond_out"])], "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", b, []), vi("x_in")],
        [vi("cond_out", b, []), vi("x_out")],
        initializer=[numpy_helper.from_array(body_w, "body_w")])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    then = helper.make_graph(
        [node("Cast", ["branch_w"], ["bw"], to=TensorProto.FLOAT), node("Constant", [], ["axes"], value=axes),
         node("ReduceSum", ["bw", "axes"], ["bws"], keepdims=0), node("Add", ["looped", "bws"], ["t0"]),
         node("Add", ["t0", "small"], ["t"])], "then", [], [vi("t")], initializer=[branch_w])
    other = helper.make_graph([node("Sub", ["looped", "w"], ["e"])], "else", [], [vi("e")])
    graph = helper.make_graph(
        [node("Loop", ["n", "c", "x"], ["looped"], body=body, name="loop"),
         node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="if")], "g",
        [vi("n", TensorProto.INT64, []), vi("c", b, []), vi("x")], [vi("y")],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(small, "small")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def test_subgraph_initializers_and_int32_fp16_data_are_packed(tmp_path):
    """Initializers of Loop and If bodies are packed too (ONNX Runtime reads them from the shared file), an
    fp16 tensor kept in int32_data is stored as its fp16 bytes, a tensor shared by two files once, and
    one under the threshold stays inline; the outputs are unchanged."""
    rng = np.random.default_rng(0)
    w, body_w = (rng.standard_normal((16, 16)).astype(np.float32) for _ in range(2))  # 1024 bytes each
    half = rng.standard_normal((2, 16, 16)).astype(np.float16)  # 1024 bytes
    branch_w = helper.make_tensor("branch_w", TensorProto.FLOAT16, half.shape, half.ravel().tolist())
    assert not branch_w.raw_data and branch_w.int32_data  # as the fp16 converter may leave it
    small = rng.standard_normal((1, 16)).astype(np.float32)  # 64 bytes: stays inline
    model = loop_model(w, body_w, branch_w, small)
    onnx.checker.check_model(model)
    onnx.save(model, tmp_path / "a.onnx")
    other = helper.make_graph([helper.make_node("Add", ["x", "w_too"], ["y"])], "b", [vi("x")], [vi("y")],
                              initializer=[numpy_helper.from_array(w, "w_too")])
    onnx.save(helper.make_model(other, opset_imports=[helper.make_opsetid("", 18)], ir_version=10),
              tmp_path / "b.onnx")
    x = rng.standard_normal((16, 16)).astype(np.float32)
    feeds = {"a.onnx": {"n": np.array(3), "c": np.array(True), "x": x}, "b.onnx": {"x": x}}
    before = {f: open_session(tmp_path / f).run(None, v)[0] for f, v in feeds.items()}
    report = pack(tmp_path, ["a.onnx", "b.onnx"], "w.data")
    verify_packed(tmp_path, report)
    assert (report.references, report.stored) == (4, 3)  # w twice, body_w, branch_w
    assert (tmp_path / "w.data").stat().st_size == 3 * 1024  # w, body_w, branch_w: aligned already
    packed = onnx.load(tmp_path / "a.onnx", load_external_data=False)
    kinds = {t.name: t.data_location for t in all_initializers(packed.graph)}
    assert kinds == {"w": TensorProto.EXTERNAL, "small": TensorProto.DEFAULT, "body_w": TensorProto.EXTERNAL,
                     "branch_w": TensorProto.EXTERNAL}
    data = (tmp_path / "w.data").read_bytes()
    branch = next(t for t in all_initializers(packed.graph) if t.name == "branch_w")
    start = int(location(branch)["offset"])
    assert data[start:start + 1024] == half.astype("<f2").tobytes()
    for f, v in feeds.items():
        assert np.array_equal(open_session(tmp_path / f).run(None, v)[0], before[f])
