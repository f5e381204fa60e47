"""The ONNX export against the PyTorch model: graphs, shapes, parity, greedy, bundle manifest, CLI; on
the concatenated-cache decoder interface (the "fused" lowering, `tiny_concat_bundle`; the default
"inplace" one: test_inplace_attention.py)."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import onnx
import pytest
import torch

from export import build
from export.__main__ import main as cli_main
from export.build import FP16_FILES, bundle_metrics
from export.export import ExportError, example_sizes, name_axes, pin_ir_version
from export.variants.optimized import optimize_offline
from export.verify.base import (
    Case,
    ParityError,
    check_graphs,
    compare_case,
    decoder_feeds,
    encoder_feeds,
    greedy_agreement,
    open_session,
    verify_bundle,
)
from export.verify.fp16 import FP16_ATOL, verify_fp16
from export.verify.parity import difference
from interface import names
from model.checkpoint import file_sha256, tokenizer_path
from model.data import read_tsv
from model.evaluate import evaluate
from model.tokenizer import load_tokenizer
from tests.support import REPO_ROOT

ATOL = 1e-4


@pytest.fixture(scope="module")
def sessions(tiny_concat_bundle):
    """(encoder, decoder) ONNX Runtime CPU sessions of the concatenated-cache bundle."""
    return tuple(open_session(tiny_concat_bundle / f) for f in (names.ENCODER_FILE, names.DECODER_FILE))


def valid_sources(model, checkpoint, corpus, n: int) -> list[list[int]]:
    """The first n validation sources as ids + eos."""
    tok = load_tokenizer(tokenizer_path(checkpoint, torch.load(checkpoint, weights_only=True)))
    texts = [s for s, _ in read_tsv(corpus["valid"])[:n]]
    return [e.ids + [model.cfg.eos_id] for e in tok.encode_batch(texts, add_special_tokens=False)]


def dims(value: onnx.ValueInfoProto) -> list[str | int]:
    """Symbolic names or sizes of a graph input/output."""
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_graphs_pass_checker_and_load_in_onnxruntime(tiny_concat_bundle):
    files = [tiny_concat_bundle / f for f in (names.ENCODER_FILE, names.DECODER_FILE, *FP16_FILES.values())]
    check_graphs(files)
    for f in files:
        proto = onnx.load(str(f), load_external_data=False)
        assert proto.ir_version <= 13
        data_file = names.weights_file("fp16" if ".fp16." in f.name else None)
        external = {t.name for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
        locations = {dict((e.key, e.value) for e in t.external_data)["location"]
                     for t in proto.graph.initializer if t.name in external}
        assert external and locations == {data_file}  # the variant's weights file
        assert all(len(t.raw_data) < 1024 for t in proto.graph.initializer if t.name not in external)
        open_session(f)  # loads: no IR/opset refusal


def test_graphs_carry_no_debug_metadata_or_local_paths(tiny_concat_bundle):
    here = str(REPO_ROOT).encode()
    for f in tiny_concat_bundle.glob("*.onnx"):
        data = f.read_bytes()
        assert b"stack_trace" not in data and here not in data, f.name


def test_io_names_and_axes_match_names_py(tiny_concat_bundle, tiny_model):
    cfg, n = tiny_model.cfg, tiny_model.cfg.n_decoder_layers
    axes = names.dynamic_axes(n)
    expected = {
        names.ENCODER_FILE: ("encoder", names.encoder_inputs(), names.encoder_outputs(n)),
        names.DECODER_FILE: ("decoder", names.decoder_inputs(n), names.decoder_outputs(n)),
    }
    for file, (graph, inputs, outputs) in expected.items():
        proto = onnx.load(str(tiny_concat_bundle / file))
        assert [i.name for i in proto.graph.input] == inputs
        assert [o.name for o in proto.graph.output] == outputs
        for value in [*proto.graph.input, *proto.graph.output]:
            shape = dims(value)
            for axis, axis_name in axes[graph][value.name].items():
                assert shape[axis] == axis_name, (value.name, shape)
            if "key" in value.name or "value" in value.name:
                assert shape[1] == cfg.n_heads and shape[3] == cfg.d_head  # the only fixed dims
    logprobs = onnx.load(str(tiny_concat_bundle / names.DECODER_FILE)).graph.output[0]
    assert dims(logprobs) == ["batch", "new_len", cfg.vocab_size]


def test_example_sizes_are_distinct_and_never_one(tiny_model):
    s = example_sizes(tiny_model)
    sizes = [s.batch, s.src_len, s.new_len, s.past_len, s.past_len + s.new_len]
    cfg = tiny_model.cfg
    assert min(sizes) >= 2 and len(set(sizes)) == 5
    assert not set(sizes) & {cfg.n_heads, cfg.d_head, cfg.d_model, cfg.vocab_size}


@pytest.mark.parametrize("case", [
    Case(1, 1, 0, 1), Case(3, 64, 0, 3), Case(5, 5, 7, 1), Case(1, 33, 2, 3),
    Case(5, 64, 9, 3), Case(3, 8, 1, 1),
])
def test_parity_with_pytorch(sessions, tiny_model, case):
    diffs = compare_case(*sessions, tiny_model, case, np.random.default_rng(case.src_len))
    assert set(diffs) == {"encoder", "logprobs", "log_normalizer", "present", "cross_attentions"}
    assert max(diffs.values()) <= ATOL, diffs


@pytest.mark.parametrize("batch,src_len,past_len,new_len", [(1, 1, 0, 1), (7, 3, 5, 2), (2, 64, 30, 4)])
def test_dynamic_axes_follow_the_inputs(sessions, tiny_model, batch, src_len, past_len, new_len):
    enc, dec = sessions
    cfg, n = tiny_model.cfg, tiny_model.cfg.n_decoder_layers
    src = np.full((batch, src_len), 5, np.int64)
    cross = enc.run(None, encoder_feeds(src, cfg.pad_id))
    assert all(c.shape == (batch, cfg.n_heads, src_len, cfg.d_head) for c in cross)
    past = [np.zeros((batch, cfg.n_heads, past_len, cfg.d_head), np.float32)] * (2 * n)
    tokens = np.full((batch, new_len), 6, np.int64)
    positions = np.tile(np.arange(past_len, past_len + new_len), (batch, 1))
    feeds = decoder_feeds(tokens, positions, np.ones((batch, past_len + new_len), np.int64),
                          np.ones((batch, src_len), np.int64), past, cross)
    out = dict(zip(names.decoder_outputs(n), dec.run(names.decoder_outputs(n), feeds), strict=True))
    assert out[names.LOGPROBS].shape == (batch, new_len, cfg.vocab_size)
    presents = [out[p] for p in names.self_cache_io(n).values()]
    assert all(p.shape == (batch, cfg.n_heads, past_len + new_len, cfg.d_head) for p in presents)
    assert out[names.CROSS_ATTENTIONS].shape == (batch, new_len, src_len)
    assert out[names.LOG_NORMALIZER].shape == (batch, new_len)
    assert out[names.LOG_NORMALIZER].dtype == np.float32
    np.testing.assert_allclose(np.exp(out[names.LOGPROBS]).sum(-1), 1.0, atol=1e-4)  # log-softmax rows
    np.testing.assert_allclose(out[names.CROSS_ATTENTIONS].sum(-1), 1.0, atol=1e-5)  # attention rows


@torch.inference_mode()
def test_empty_cache_matches_pytorch_without_cache(sessions, tiny_model):
    enc, dec = sessions
    cfg, n = tiny_model.cfg, tiny_model.cfg.n_decoder_layers
    src = np.array([[7, 8, 9, cfg.eos_id], [10, 11, cfg.eos_id, 0]], np.int64)
    tgt = np.array([[cfg.bos_id, 12, 13], [cfg.bos_id, 14, 15]], np.int64)
    cross = enc.run(None, encoder_feeds(src, cfg.pad_id))
    empty = [np.zeros((2, cfg.n_heads, 0, cfg.d_head), np.float32)] * (2 * n)
    feeds = decoder_feeds(tgt, np.tile(np.arange(3), (2, 1)), np.ones((2, 3), np.int64),
                          (src != 0).astype(np.int64), empty, cross)
    logp, *rest = dec.run(names.decoder_outputs(n), feeds)
    src_t = torch.from_numpy(src)
    mask = src_t.ne(cfg.pad_id).unsqueeze(1)
    cross_t = tiny_model.cross_kv(tiny_model.encode(src_t, mask))
    ref, presents, _ = tiny_model.decode(torch.from_numpy(tgt), cross_t, mask)  # past=None: no-cache path
    assert np.abs(logp - ref.numpy()).max() <= ATOL
    assert np.abs(rest[0] - presents[0][0].numpy()).max() <= ATOL
    assert rest[0].shape[2] == 3


def _run_decoder(dec, n, tokens, positions, self_mask, src_mask, past, cross):
    """logprobs, presents and cross-attention of one decoder call."""
    feeds = decoder_feeds(tokens, positions, self_mask, src_mask, past, cross)
    out = dec.run(names.decoder_outputs(n), feeds)
    return out[0], out[1 : 1 + 2 * n], out[1 + 2 * n]


def test_padded_rows_match_unpadded_single_rows(sessions, tiny_model):
    enc, dec = sessions
    cfg, n = tiny_model.cfg, tiny_model.cfg.n_decoder_layers
    rows = [[7, 8, 9, 10, 11, cfg.eos_id], [12, cfg.eos_id], [13, 14, 15, cfg.eos_id]]
    batch = np.zeros((3, 6), np.int64)
    for i, r in enumerate(rows):
        batch[i, : len(r)] = r
    cross_b = enc.run(None, encoder_feeds(batch, cfg.pad_id))
    empty = [np.zeros((3, cfg.n_heads, 0, cfg.d_head), np.float32)] * (2 * n)
    bos = np.full((3, 1), cfg.bos_id, np.int64)
    logp_b, _, attn_b = _run_decoder(dec, n, bos, np.zeros((3, 1), np.int64), np.ones((3, 1), np.int64),
                                     (batch != 0).astype(np.int64), empty, cross_b)
    for i, r in enumerate(rows):
        single = np.array([r], np.int64)
        cross_1 = enc.run(None, encoder_feeds(single, cfg.pad_id))
        for b, c in zip(cross_b, cross_1, strict=True):
            assert np.abs(b[i : i + 1, :, : len(r)] - c).max() <= ATOL  # real positions only
        one = np.ones((1, 1), np.int64)
        logp_1, _, attn_1 = _run_decoder(dec, n, bos[:1], 0 * one, one, np.ones((1, len(r)), np.int64),
                                         [e[:1] for e in empty], cross_1)
        assert np.abs(logp_b[i] - logp_1[0]).max() <= ATOL
        assert np.abs(attn_b[i, :, : len(r)] - attn_1[0]).max() <= ATOL
        assert np.all(attn_b[i, :, len(r) :] == 0.0)  # no weight on padding


def test_masked_cache_slot_is_ignored(sessions, tiny_model):
    """A padding slot in the self-attention cache (attention_mask 0) changes nothing."""
    enc, dec = sessions
    cfg, n = tiny_model.cfg, tiny_model.cfg.n_decoder_layers
    src = np.array([[7, 8, 9, cfg.eos_id]], np.int64)
    cross = enc.run(None, encoder_feeds(src, cfg.pad_id))
    src_mask = np.ones((1, 4), np.int64)
    empty = [np.zeros((1, cfg.n_heads, 0, cfg.d_head), np.float32)] * (2 * n)
    prefix = np.array([[cfg.bos_id, 20, 21]], np.int64)
    ones = np.ones((1, 3), np.int64)
    _, past, _ = _run_decoder(dec, n, prefix, np.arange(3)[None], ones, src_mask, empty, cross)
    new, pos = np.array([[22]], np.int64), np.array([[3]], np.int64)
    ref, _, _ = _run_decoder(dec, n, new, pos, np.ones((1, 4), np.int64), src_mask, past, cross)
    junk = np.random.default_rng(0).standard_normal((1, cfg.n_heads, 1, cfg.d_head)).astype(np.float32) * 5
    padded = [np.concatenate([junk, p], axis=2) for p in past]  # slot 0 is padding
    got, _, _ = _run_decoder(dec, n, new, pos, np.array([[0, 1, 1, 1, 1]], np.int64), src_mask, padded, cross)
    assert np.abs(got - ref).max() <= ATOL
    unmasked, _, _ = _run_decoder(dec, n, new, pos, np.ones((1, 5), np.int64), src_mask, padded, cross)
    assert np.abs(unmasked - ref).max() > 1e-3  # the mask is what hides the junk slot


def test_greedy_is_token_identical(sessions, tiny_model, tiny_checkpoint, tiny_corpus):
    sources = valid_sources(tiny_model, tiny_checkpoint, tiny_corpus, 12)
    same, bad = greedy_agreement(*sessions, tiny_model, sources)
    assert bad == [] and same == 12


def test_verification_fails_for_a_different_model(tiny_concat_bundle, tiny_model):
    other = copy.deepcopy(tiny_model)
    with torch.no_grad():  # pad's logit: its log-prob moves by about 0.01, the normalizer hardly (pad is
        other.generator.proj.bias[other.cfg.pad_id] += 0.01  # never probable), which the next test moves
    with pytest.raises(ParityError, match="logprobs"):
        verify_bundle(tiny_concat_bundle, other, sources=[[5, 2]], cases=(Case(2, 4, 1, 1),))


def test_verification_sees_a_wrong_log_normalizer(tiny_concat_bundle, tiny_model):
    """Logits one larger everywhere: the same log-probs and greedy tokens, a log-normalizer one larger (a
    difference of 1 / max(1, |normalizer|) once scaled)."""
    other = copy.deepcopy(tiny_model)
    with torch.no_grad():
        other.generator.proj.bias.add_(1.0)
    with pytest.raises(ParityError, match="log_normalizer differs by") as caught:
        verify_bundle(tiny_concat_bundle, other, sources=[[5, 2]], cases=(Case(2, 4, 1, 1),))
    scaled = float(str(caught.value).split("differs by ")[1].split()[0])
    assert 0.01 < scaled <= 1.0  # 1 / |normalizer|: the tiny model's normalizers lie within 100


def test_fp32_differences_are_scaled_by_the_reference_beyond_one_and_fp16_ones_are_not():
    ref = torch.tensor([0.5, -20.0, 200.0])
    assert difference(np.array([0.5 + 3e-5, -20.0, 200.0], np.float32), ref) == pytest.approx(3e-5, rel=1e-2)
    assert difference(np.array([0.5, -20.002, 200.0], np.float32), ref) == pytest.approx(1e-4, rel=1e-2)
    assert difference(np.array([0.5, -20.0, 200.2], np.float32), ref) == pytest.approx(1e-3, rel=1e-2)
    absolute = difference(np.array([0.5, -20.0, 200.2], np.float32), ref, scaled=False)
    assert absolute == pytest.approx(0.2, rel=1e-3)


def test_bundle_json_hashes_and_contents(tiny_concat_bundle, tiny_checkpoint, tiny_model):
    manifest = json.loads((tiny_concat_bundle / names.BUNDLE_FILE).read_text())
    files = {p.name for p in tiny_concat_bundle.iterdir()} - {names.BUNDLE_FILE}
    assert set(manifest["files"]) == files
    weights = {names.weights_file(): [names.ENCODER_FILE, names.DECODER_FILE],
               names.weights_file("fp16"): [FP16_FILES["encoder"], FP16_FILES["decoder"]]}
    graphs = {names.ENCODER_FILE, names.DECODER_FILE, *FP16_FILES.values()}
    assert {*graphs, names.TOKENIZER_FILE, *weights} == files
    assert manifest["weights"] == weights
    for name, entry in manifest["files"].items():
        path = tiny_concat_bundle / name
        assert entry == {"sha256": file_sha256(path), "bytes": path.stat().st_size}
    n = tiny_model.cfg.n_decoder_layers
    io = manifest["io"]
    assert io["encoder"] == {"inputs": names.encoder_inputs(), "outputs": names.encoder_outputs(n)}
    assert io["decoder"] == {"inputs": names.decoder_inputs(n), "outputs": names.decoder_outputs(n)}
    assert io["dynamic_axes"] == json.loads(json.dumps(names.dynamic_axes(n)))
    assert manifest["format_version"] == names.BUNDLE_FORMAT_VERSION == 1
    assert manifest["model"] == tiny_model.cfg.to_dict()
    assert manifest["special_tokens"] == {"pad": 0, "bos": 1, "eos": 2, "unk": 3}
    state = torch.load(tiny_checkpoint, weights_only=True)
    assert manifest["checkpoint"] == {"sha256": file_sha256(tiny_checkpoint), "step": state["step"]}
    assert manifest["version"].endswith("-" + file_sha256(tiny_checkpoint)[:8])
    decoder = onnx.load(str(tiny_concat_bundle / names.DECODER_FILE))
    assert manifest["onnx"]["opset"] == {o.domain: o.version for o in decoder.opset_import}[""]
    assert manifest["onnx"]["ir_version"] == decoder.ir_version
    assert manifest["onnx"]["attention"] == "fused" and manifest["onnx"]["optimized"] is False
    assert set(manifest["onnx"]["versions"]) == {"torch", "onnx", "onnxscript", "onnxruntime"}
    assert manifest["variants"] == {"fp16": FP16_FILES}
    assert manifest["provider_variants"] == {"CUDAExecutionProvider": "fp16"}
    assert manifest["verification"]["logprobs_max_diff"] <= ATOL
    assert 0 < manifest["verification"]["log_normalizer_max_diff"] <= ATOL
    assert manifest["verification"]["greedy_identical"] == manifest["verification"]["greedy_sources"] > 0
    tokenizer = tokenizer_path(tiny_checkpoint, state)
    assert (tiny_concat_bundle / names.TOKENIZER_FILE).read_bytes() == tokenizer.read_bytes()


def test_fp16_variant_runs_close_to_pytorch(tiny_concat_bundle, tiny_model):
    proto = onnx.load(str(tiny_concat_bundle / FP16_FILES["decoder"]))
    types = {o.name: o.type.tensor_type.elem_type for o in proto.graph.output}
    assert types[names.LOGPROBS] == onnx.TensorProto.FLOAT16
    assert types[names.LOG_NORMALIZER] == onnx.TensorProto.FLOAT  # float32 in the fp16 variant too
    result = verify_fp16(tiny_concat_bundle, tiny_model, [[5, 6, 2]], **FP16_FILES)
    assert 0 < result["logprobs_max_diff"] <= FP16_ATOL["logprobs"]
    assert 0 < result["log_normalizer_max_diff"] <= FP16_ATOL["log_normalizer"]
    assert result["greedy_identical"] + result["greedy_near_ties"] == result["greedy_sources"] == 1


def test_optimized_graphs_stay_standard_and_keep_parity(tiny_concat_bundle, tiny_model, tmp_path):
    shutil.copy(tiny_concat_bundle / names.weights_file(), tmp_path)  # the graphs' external data
    for f in (names.ENCODER_FILE, names.DECODER_FILE):
        shutil.copy(tiny_concat_bundle / f, tmp_path / f)
        optimize_offline(tmp_path / f)
        proto = onnx.load(str(tmp_path / f))
        exported = {(n.domain, n.op_type) for n in onnx.load(str(tiny_concat_bundle / f)).graph.node}
        added = {(n.domain, n.op_type) for n in proto.graph.node} - exported
        assert {domain for domain, _ in added} <= {"", "ai.onnx"}  # no CPU-only fusions: provider-portable
    before = len(onnx.load(str(tiny_concat_bundle / names.DECODER_FILE)).graph.node)
    assert len(onnx.load(str(tmp_path / names.DECODER_FILE)).graph.node) <= before
    report = verify_bundle(tmp_path, tiny_model, sources=[[5, 6, 2], [7, 2]], cases=(Case(3, 10, 4, 2),))
    assert report.logprobs_max_diff <= ATOL and report.greedy_identical == 2
    assert 0 < report.log_normalizer_max_diff <= ATOL


def test_metrics_from_a_test_split(tiny_checkpoint, tiny_corpus, tiny_model):
    state = torch.load(tiny_checkpoint, weights_only=True)
    tok = load_tokenizer(tokenizer_path(tiny_checkpoint, state))
    got = bundle_metrics(tiny_model, tok, state, tiny_corpus["valid"], 10)
    ref, _ = evaluate(tiny_model, tok, read_tsv(tiny_corpus["valid"])[:10])
    assert got == {"split": "valid", **ref.as_dict()} and got["n"] == 10
    assert bundle_metrics(tiny_model, tok, {"metrics": {"exact_match": 5.0}}, None, 10) == {
        "split": "valid", "exact_match": 5.0}


def test_cli_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    out = tmp_path / "bundle"
    assert cli_main(["--checkpoint", str(tmp_path / "nope.pt"), "--out", str(out)]) == 2
    assert "checkpoint not found" in capsys.readouterr().err
    assert not out.exists()


def test_cli_refuses_to_overwrite_a_non_bundle_dir(tmp_path, tiny_checkpoint, capsys):
    out = tmp_path / "keep"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert cli_main(["--checkpoint", str(tiny_checkpoint), "--out", str(out), "--force"]) == 2
    assert "not a bundle" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"


def test_cli_refuses_a_blank_source_language_before_exporting(tmp_path, capsys):
    checkpoint, out = tmp_path / "any.pt", tmp_path / "bundle"
    checkpoint.write_bytes(b"not read")  # refused before the checkpoint is loaded
    assert cli_main(["--checkpoint", str(checkpoint), "--out", str(out), "--source-language", " "]) == 2
    assert "'source_language' must be a non-empty language code" in capsys.readouterr().err


def test_source_language_goes_into_our_bundles_manifest(tiny_checkpoint, tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(build, "package", lambda source, *_, **__: seen.append(source.manifest))
    build.build_bundle(tiny_checkpoint, tmp_path / "en", build.BuildOptions(source_language="en"))
    build.build_bundle(tiny_checkpoint, tmp_path / "none", build.BuildOptions())
    assert seen == [{"source_language": "en"}, {}]


def test_name_axes_rejects_a_specialized_axis_and_ir_is_pinned():
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, "s"])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, "s"])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)])
    assert proto.ir_version > 10  # onnx 1.23 writes a newer IR than onnxruntime 1.31 loads
    pin_ir_version(proto)
    assert proto.ir_version == 10
    name_axes(proto, {"x": {1: "src_len"}})
    assert dims(proto.graph.input[0]) == [1, "src_len"]
    with pytest.raises(ExportError, match="batch"):
        name_axes(proto, {"x": {0: "batch"}})
