"""The int8 variant (export/variants/int8.py, export/verify/int8.py): every weighted MatMul quantized, the
output projection included (of a Transpose of the int8 rows the tied embedding gathers, stored once), verified
against the fp32 graphs with its figures in bundle.json, and refused below its limits with the numbers."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import export.build
from export.build import BuildOptions, BundleError, build_bundle
from export.graph_file import initializers
from export.lowering.tied import output_projection
from export.variants.int8 import INT8_FILES, SCALE
from export.verify.base import ParityError, greedy_onnx, open_session
from export.verify.int8 import Int8Limits, verify_int8
from interface import names
from service.runtime.runner import Runner
from tests.support import tiny
from tests.support.decoding import assert_same_or_near_tie

BASE = {"encoder": names.ENCODER_FILE, "decoder": names.DECODER_FILE}
EVAL_SIZE = tiny.VALID_PAIRS  # test-split pairs the export decodes with both variants: the validation pairs


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint, tiny_corpus, tmp_path_factory) -> Path:
    """The tiny checkpoint exported with the int8 variant under the default limits, checked on its validation
    pairs as the test split (which the fp32 model decodes exactly: tests/support/tiny.py)."""
    out = tmp_path_factory.mktemp("int8") / "bundle"
    opts = BuildOptions(quantize="int8", test_split=tiny_corpus["valid"], eval_size=EVAL_SIZE,
                        verify_sources=4)
    return build_bundle(tiny_checkpoint, out, opts).bundle_dir


def manifest(bundle_dir: Path) -> dict:
    """bundle.json."""
    return json.loads((bundle_dir / names.BUNDLE_FILE).read_text())


def graph(bundle_dir: Path, file: str) -> onnx.ModelProto:
    """A graph of the bundle, its weights left in the weights file."""
    return onnx.load(bundle_dir / file, load_external_data=False)


def weighted(proto: onnx.ModelProto, op: str) -> int:
    """Nodes of type op whose second input (the weight) is an initializer."""
    inits = {t.name for t in proto.graph.initializer}
    return sum(n.op_type == op and n.input[1] in inits for n in proto.graph.node)


def test_the_variant_is_listed_verified_and_packed(bundle):
    m = manifest(bundle)
    assert m["variants"] == {"int8": INT8_FILES}
    assert "provider_variants" not in m  # the base files stay the CPU's default without --cpu-variant
    files = list(INT8_FILES.values())
    assert m["weights"]["weights.int8.data"] == files and set(files) <= set(m["files"])
    report = m["verification"]["int8"]
    limits = Int8Limits()
    assert report["greedy_sources"] == 4 and report["greedy_identical"] >= limits.agreement * 4
    assert 0 < report["logprob_max_delta"] <= limits.logprob_delta  # int8 differs from fp32, a little
    assert report["logprob_steps"] > 4
    em = report["exact_match"]
    assert em["split"] == "valid" and em["n"] == EVAL_SIZE and em["fp32"] == 100.0  # against the references
    assert em["fp32"] - em["int8"] <= limits.exact_match_drop
    assert report["limits"] == asdict(limits)
    assert report["quantization"]["reduce_range"] is False


def test_every_weighted_matmul_is_int8_the_output_projection_included(bundle):
    for part in ("encoder", "decoder"):
        fp32, int8 = graph(bundle, BASE[part]), graph(bundle, INT8_FILES[part])
        ops = Counter(n.op_type for n in int8.graph.node)
        assert weighted(fp32, "MatMul") > 0 and weighted(int8, "MatMul") == 0
        # the fp32 projection is a Gemm of the tied rows (export/lowering/tied.py), the int8 one reads
        # Transpose(rows)
        assert ops["MatMulInteger"] == weighted(fp32, "MatMul") + weighted(fp32, "Gemm")
        assert ops["QAttention"] == Counter(n.op_type for n in fp32.graph.node)["Attention"]
        int8_tensors = {t.name for t in int8.graph.initializer if t.data_type == onnx.TensorProto.INT8}
        int8_tensors |= {n.output[0] for n in int8.graph.node  # the projection's Transpose(rows)
                         if n.op_type == "Transpose" and n.input[0] in int8_tensors}
        assert all(n.input[1] in int8_tensors for n in int8.graph.node if n.op_type == "MatMulInteger")
    decoder = graph(bundle, INT8_FILES["decoder"])
    producer = {o: n for n in decoder.graph.node for o in n.output}
    node = producer[names.LOGPROBS]  # LogSoftmax <- Add (bias) <- Mul (scales) <- Cast <- MatMulInteger
    while node.op_type != "MatMulInteger":
        node = producer[node.input[0]]
    transpose = producer[node.input[1]]
    projection = output_projection(graph(bundle, BASE["decoder"]), manifest(bundle)["model"]["d_model"])
    assert projection is not None and transpose.op_type == "Transpose"
    assert list(transpose.input) == [projection + "_quantized_rows"]


def test_the_embeddings_and_the_projection_read_the_int8_rows_stored_once(bundle):
    m = manifest(bundle)
    rows = output_projection(graph(bundle, BASE["decoder"]), m["model"]["d_model"]) + "_quantized_rows"
    where = {}
    for file in m["weights"]["weights.int8.data"]:
        proto = graph(bundle, file)
        readers = [n for n in proto.graph.node if rows in n.input]
        # the token embedding, in the encoder and the decoder; the projection in the decoder
        assert [(n.op_type, onnx.helper.get_node_attr_value(n, "axis")) for n in readers
                if n.op_type == "Gather"] == [("Gather", 0)]
        assert len([n for n in readers if n.op_type == "Transpose"]) == (file != INT8_FILES["encoder"])
        for _, t in initializers(proto.graph):
            if t.name == rows:
                where[file] = {e.key: e.value for e in t.external_data}
    assert len(where) == 2 and len({tuple(sorted(w.items())) for w in where.values()}) == 1  # one copy
    stored = m["verification"]["weights"]["weights.int8.data"]
    fp32 = m["verification"]["weights"]["weights.data"]
    assert stored["stored"] < stored["references"]
    assert (bundle / "weights.int8.data").stat().st_size == stored["bytes"] < fp32["bytes"] / 3


def test_int8_decodes_the_fp32_tokens(bundle, texts):
    """Greedy through the service's runner: int8 gives the fp32 graphs' tokens on the tiny task's texts, or
    parts from them only where fp32's own token leads by less than twice the largest log-prob drift the
    export measured (a flip needs that near-tie); and ONNX Runtime's own greedy loop (export/verify/base.py)
    agrees with the runner on the int8 graphs."""
    base = Runner(bundle, providers=["CPUExecutionProvider"], variant="base")
    int8 = Runner(bundle, providers=["CPUExecutionProvider"], variant="int8")
    assert int8.variant_name == "int8" and int8.sessions.files["decoder"].name == INT8_FILES["decoder"]
    drift = manifest(bundle)["verification"]["int8"]["logprob_max_delta"]
    want = [h[0].tokens for h in base.translate(texts)]
    got = [h[0].tokens for h in int8.translate(texts)]
    for source, a, b in zip(base.encode_texts(texts), got, want, strict=True):
        assert_same_or_near_tie(base, source, a, b, margin=2 * drift)
    ids = int8.encode_texts(texts[:2])
    src = np.zeros((2, max(map(len, ids))), np.int64)
    for i, s in enumerate(ids):
        src[i, : len(s)] = s
    pair = [open_session(bundle / INT8_FILES[g]) for g in ("encoder", "decoder")]
    special = int8.special
    assert greedy_onnx(*pair, src, special.bos, special.eos, special.pad, 40) == got[:2]


def test_a_variant_outside_its_limits_is_refused_with_the_figures(bundle, tiny_model):
    sources = [[5, 6, 7, 2], [9, 10, 2]]
    with pytest.raises(ParityError) as refused:
        verify_int8(bundle, BASE, INT8_FILES, tiny_model.cfg, sources, limits=Int8Limits(1.01, 1e-9, -1))
    message = str(refused.value)
    assert message.startswith("int8 variant refused: greedy tokens agree with fp32 on ")
    assert "of 2 sources" in message and "< 1.01" in message and "> 1e-09" in message


def test_a_corrupted_int8_weight_is_refused_and_no_bundle_written(tiny_checkpoint, tiny_corpus, tmp_path,
                                                                   monkeypatch):
    """The output projection's int8 scales negated after quantizing: the export stops with the figures
    against the default limits, exact match on the test split included."""
    write = export.build.write_int8

    def corrupting(bundle_dir: Path, fp32_files, d_model: int, **kw) -> dict:
        counts = write(bundle_dir, fp32_files, d_model, **kw)
        path = bundle_dir / INT8_FILES["decoder"]
        proto = onnx.load(path)
        name = output_projection(onnx.load(bundle_dir / fp32_files["decoder"]), d_model) + SCALE
        scale = next(t for t in proto.graph.initializer if t.name == name)
        scale.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(scale), name))
        onnx.save_model(proto, path)
        return counts

    monkeypatch.setattr(export.build, "write_int8", corrupting)
    out = tmp_path / "bundle"
    opts = BuildOptions(quantize="int8", test_split=tiny_corpus["valid"], eval_size=8, verify_sources=2)
    figures = (r"int8 variant refused: .*max \|delta log-prob\| [0-9.]+ > 0\.5.*"
               r"exact match on valid [0-9.]+ vs fp32 100\.00 \(drop [0-9.]+ > 1\.0")
    with pytest.raises(ParityError, match=figures):
        build_bundle(tiny_checkpoint, out, opts)
    assert not out.exists() and not list(tmp_path.iterdir())


def test_the_cpu_default_needs_the_variant(tiny_checkpoint, tmp_path):
    with pytest.raises(BundleError, match="--cpu-variant int8 needs --quantize int8"):
        build_bundle(tiny_checkpoint, tmp_path / "b", BuildOptions(cpu_variant="int8"))


def test_a_pretrained_import_quantizes_separate_embeddings(hf_dirs, tmp_path):
    """A Marian model whose encoder has an embedding of its own, imported with an int8 CPU variant: that
    one gets int8 rows of its own, the decoder's reads the projection's rows. The model's weights are
    random, so its greedy picks are near-ties that int8 flips on some CPUs (55 of 64 sources agree on
    one): the agreement gate is waived here and tested on a trained model above."""
    from export.build import BuildOptions
    from export.pretrained import import_pretrained

    out = tmp_path / "bundle"
    opts = BuildOptions(quantize="int8", cpu_variant="int8", attention="fused", verify_sources=8,
                        int8_limits=Int8Limits(agreement=0.0))
    import_pretrained(hf_dirs["marian-separate"], out, opts)
    m = manifest(out)
    assert m["provider_variants"] == {"CPUExecutionProvider": "int8"}
    assert m["verification"]["int8"]["greedy_sources"] == 8 and m["verification"]["int8"]["logprob_steps"] > 0
    rows = output_projection(graph(out, BASE["decoder"]), m["model"]["d_model"]) + "_quantized_rows"
    tables = {part: int8_tables(graph(out, INT8_FILES[part])) for part in ("encoder", "decoder")}
    assert tables["decoder"] == {rows}
    assert len(tables["encoder"]) == 1 and rows not in tables["encoder"]
    decoder = graph(out, INT8_FILES["decoder"]).graph
    assert [n.input[0] for n in decoder.node if n.op_type == "Transpose"] == [rows]


def int8_tables(proto: onnx.ModelProto) -> set[str]:
    """The int8 initializers that a Gather reads by the graph's input_ids."""
    int8 = {t.name for t in proto.graph.initializer if t.data_type == onnx.TensorProto.INT8}
    return {n.input[0] for n in proto.graph.node
            if n.op_type == "Gather" and n.input[1] == names.INPUT_IDS and n.input[0] in int8}


def test_tied_embeddings_as_rows_of_their_own_decode_alike(bundle, tmp_path):
    """--embedding-rows: the projection keeps MatMulInteger by its int8 matrix, the lookups a row-major
    copy of it (the matrix twice), the same values as the shared rows: the encoder's outputs bit for bit."""
    from export.variants.int8 import write_int8

    for f in [*BASE.values(), "weights.data"]:
        (tmp_path / f).write_bytes((bundle / f).read_bytes())
    d_model = manifest(bundle)["model"]["d_model"]
    write_int8(tmp_path, BASE, d_model, share_embedding=False)
    rows = graph(tmp_path, INT8_FILES["decoder"])
    projection = output_projection(graph(bundle, BASE["decoder"]), d_model) + "_quantized"
    assert int8_tables(rows) == {projection + "_rows"}
    ops = Counter((n.op_type, n.input[1]) for n in rows.graph.node if len(n.input) > 1)
    assert ops["MatMulInteger", projection] == 1
    assert not any(n.op_type == "Transpose" for n in rows.graph.node)
    table = next(t for t in rows.graph.initializer if t.name == projection + "_rows")
    assert list(table.dims) == [manifest(bundle)["model"]["vocab_size"], d_model]
    ids = np.array([[5, 6, 7, 8, 2]])
    feeds = {names.INPUT_IDS: ids, names.ATTENTION_MASK: np.ones_like(ids)}
    shared_enc, rows_enc = (open_session(d / INT8_FILES["encoder"]) for d in (bundle, tmp_path))
    for a, b in zip(shared_enc.run(None, feeds), rows_enc.run(None, feeds), strict=True):
        assert np.array_equal(a, b)


def test_the_agreement_floor_is_an_export_option_checked_as_a_share():
    """--int8-min-agreement reaches the limits the int8 variant is verified with (default: Int8Limits');
    a value outside 0..1 is refused by the command line, naming it."""
    import argparse

    from export.build import add_bundle_options, bundle_options

    ap = argparse.ArgumentParser()
    add_bundle_options(ap)
    assert bundle_options(ap.parse_args(["--out", "b"])).int8_limits == Int8Limits()
    relaxed = bundle_options(ap.parse_args(["--out", "b", "--int8-min-agreement", "0"])).int8_limits
    assert relaxed == Int8Limits(agreement=0.0)
    ap.exit_on_error = False
    for bad in ("1.5", "-0.1", "nan", "most"):
        refusal = f"--int8-min-agreement: .*between 0 and 1, got '{bad}'"
        with pytest.raises(argparse.ArgumentError, match=refusal):
            ap.parse_args(["--out", "b", "--int8-min-agreement", bad])
