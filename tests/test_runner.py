"""Torch-free runner and decode engine against the PyTorch reference decoders, on the tiny bundle."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from model.checkpoint import load_checkpoint
from model.data import pad
from model.decoding import beam_search, greedy_decode
from service.batch import SOURCE_AXIS_MIN
from service.bundle import BundleError, load_bundle
from service.runner import (
    DecodeOptions,
    FinishedEvent,
    InvalidInput,
    Runner,
    TokenEvent,
    check_decoder_inputs,
)
from service.sessions import HostBackend
from tests.conftest import tiny_pairs

MAX_NEW = 30


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    """The PyTorch model the bundle was exported from."""
    torch.set_num_threads(1)
    return load_checkpoint(tiny_checkpoint)[0]


@pytest.fixture(scope="module", params=["inplace", "concat"])
def runner(request, tiny_bundle, tiny_concat_bundle):
    """CPU runner of the tiny bundle, in both KV-cache layouts (service/kvcache.py)."""
    bundle = tiny_bundle if request.param == "inplace" else tiny_concat_bundle
    r = Runner(bundle, providers=["CPUExecutionProvider"])
    assert r.kv_cache == request.param
    return r


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Sources of clearly different lengths."""
    pairs = tiny_pairs(12, 7)
    long = f"{pairs[1][0]} {pairs[2][0]} {pairs[3][0]}"
    return [pairs[0][0], long, "we 5", pairs[4][0], f"{pairs[5][0]} 90"]


def reference_src(ids: list[list[int]]) -> torch.Tensor:
    """Right-padded source batch for the PyTorch decoders."""
    return pad(ids, 0)


def tokens(results) -> list[list[list[int]]]:
    """Tokens of every hypothesis of every input."""
    return [[h.tokens for h in hyps] for hyps in results]


def alone(runner: Runner, ids: list[list[int]], opts: list[DecodeOptions]) -> list[list[list[int]]]:
    """Tokens when each request is decoded by itself."""
    return [tokens(runner.translate([x], o))[0] for x, o in zip(ids, opts, strict=True)]


def drain(batch, limit: int = 500) -> dict[int, list]:
    """Step a batch until it is empty; hypotheses by request id."""
    out = {}
    for _ in range(limit):
        if not len(batch):
            return out
        out |= {e.request.id: e.hypotheses for e in batch.step() if isinstance(e, FinishedEvent)}
    raise AssertionError("batch did not drain")


# ----- bundle ---------------------------------------------------------------------------------
@pytest.fixture
def bundle_copy(tiny_bundle, tmp_path):
    """A writable copy of the tiny bundle."""
    return shutil.copytree(tiny_bundle, tmp_path / "bundle")


def test_bundle_loads_manifest(tiny_bundle):
    b = load_bundle(tiny_bundle)
    assert b.format_version == 1 and b.version and b.name
    assert (b.special.pad, b.special.bos, b.special.eos, b.special.unk) == (0, 1, 2, 3)
    assert b.encoder_path.is_file() and b.decoder_path.is_file() and b.tokenizer_path.is_file()
    assert b.max_len == b.config["max_len"]


def _corrupt_byte(path):
    """Flip one byte in the middle of a file, keeping its size."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: shutil.rmtree(d), r"bundle directory not found"),
        (lambda d: (d / "bundle.json").unlink(), r"bundle\.json not found"),
        (lambda d: (d / "bundle.json").write_text("{not json"), r"not valid JSON"),
        (lambda d: (d / "decoder.onnx").unlink(), r"decoder\.onnx is missing"),
        (lambda d: (d / "encoder.onnx").write_bytes((d / "encoder.onnx").read_bytes()[:100]),
         r"encoder\.onnx is truncated: 100 bytes"),
        (lambda d: _corrupt_byte(d / "tokenizer.json"), r"tokenizer\.json is corrupt: sha256 mismatch"),
    ],
    ids=["missing-dir", "missing-manifest", "bad-json", "missing-file", "truncated", "corrupt"],
)
def test_bundle_errors_name_the_problem(bundle_copy, damage, message):
    damage(bundle_copy)
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle_copy)


def test_unknown_format_version_names_found_and_supported(bundle_copy):
    manifest = json.loads((bundle_copy / "bundle.json").read_text())
    manifest["format_version"] = 99
    (bundle_copy / "bundle.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"format_version 99; this runtime supports format_version 1"):
        load_bundle(bundle_copy)


# ----- runner basics ----------------------------------------------------------------------------
def test_a_decoder_of_another_interface_is_refused_by_name(tiny_concat_bundle):
    from export.names import ENCODER_ATTENTION_MASK, ENCODER_SEQLENS_K
    from export.verify import open_session  # joins the global thread pool if a Runner made one

    path = tiny_concat_bundle / "decoder.onnx"
    dec = open_session(path)
    n = load_bundle(tiny_concat_bundle).n_decoder_layers
    check_decoder_inputs(dec, n, "concat", path)  # its own interface: fine
    with pytest.raises(BundleError, match="export the checkpoint again") as err:
        check_decoder_inputs(dec, n, "inplace", path)
    assert ENCODER_SEQLENS_K in str(err.value) and ENCODER_ATTENTION_MASK in str(err.value)


def test_cpu_provider_reported_and_host_backend(runner):
    assert runner.provider == "CPUExecutionProvider"
    assert runner.providers[0] == "CPUExecutionProvider"
    assert isinstance(runner.backend, HostBackend)


def test_service_imports_no_torch():
    code = ("import sys, service.runner, service.cuda; "
            "assert 'torch' not in sys.modules and 'model' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_encode_decode_round_trip(runner, texts):
    ids = runner.encode_texts(texts)
    assert all(x[-1] == runner.special.eos for x in ids)
    assert [runner.decode_tokens(x[:-1]) for x in ids] == texts


@pytest.mark.parametrize(
    ("source", "options", "message"),
    [
        ("", None, "text 0 is empty"),
        ("   ", None, "text 0 is empty"),
        ("1 " * 200, None, r"tokens long \(incl. eos\); the model accepts at most"),
        ([], None, "source is empty"),
        ([5, 100000, 2], None, r"integers in \[0, "),
        ("we 5", DecodeOptions(beam_size=0), "beam_size must be between 1 and"),
        ("we 5", DecodeOptions(beam_size=17), "beam_size must be between 1 and 16"),
        ("we 5", DecodeOptions(beam_size=2, n_best=3), r"n_best must be between 1 and beam_size \(2\)"),
        ("we 5", DecodeOptions(max_new_tokens=0), "max_new_tokens must be between 1 and"),
        ("we 5", DecodeOptions(max_new_tokens=10_000), "max_new_tokens must be between 1 and"),
        ("we 5", DecodeOptions(alpha=-1.0), "alpha"),
        ("we 5", DecodeOptions(beam_size=2, stream=True), "streaming needs beam_size 1"),
    ],
)
def test_invalid_input_is_reported_clearly(runner, source, options, message):
    with pytest.raises(InvalidInput, match=message):
        runner.make_request(source, options)
    with pytest.raises(InvalidInput, match=message):
        runner.translate([source], options)


# ----- search equals the PyTorch reference ------------------------------------------------------
def test_greedy_equals_pytorch_on_mixed_lengths(runner, model, texts):
    ids = runner.encode_texts(texts)
    assert len({len(x) for x in ids}) > 3
    ref = greedy_decode(model, reference_src(ids), MAX_NEW)
    got = runner.translate(ids, DecodeOptions(max_new_tokens=MAX_NEW))
    for r, (g,) in zip(ref, got, strict=True):
        assert g.tokens == r.tokens
        assert g.log_prob == pytest.approx(r.log_prob, abs=1e-4)
        assert g.finish_reason == ("eos" if r.finished else "length")
        assert g.text == runner.decode_tokens(r.tokens)


def test_beam_equals_pytorch(runner, model, texts):
    ids = runner.encode_texts(texts)
    src = reference_src(ids)
    ref = beam_search(model, src, MAX_NEW, beam_size=3, n_best=2, alpha=0.6, with_alignment=True)
    opts = DecodeOptions(beam_size=3, n_best=2, alpha=0.6, max_new_tokens=MAX_NEW, with_alignment=True)
    got = runner.translate(ids, opts)
    for x, rs, gs in zip(ids, ref, got, strict=True):
        assert [g.tokens for g in gs] == [r.tokens for r in rs] and len(gs) == 2
        for r, g in zip(rs, gs, strict=True):
            assert g.score == pytest.approx(r.score, abs=1e-4)
            assert g.log_prob == pytest.approx(r.log_prob, abs=1e-4)
            assert g.finish_reason == ("eos" if r.finished else "length")
            want = np.array(r.alignment).reshape(len(r.tokens), -1)[:, : len(x)]
            np.testing.assert_allclose(np.array(g.alignment).reshape(want.shape), want, atol=1e-4)


def test_greedy_is_beam_of_one(runner, texts):
    greedy = runner.translate(texts, DecodeOptions(max_new_tokens=MAX_NEW))
    beam1 = runner.translate(texts, [DecodeOptions(beam_size=1, max_new_tokens=MAX_NEW)] * len(texts))
    assert tokens(greedy) == tokens(beam1)


def test_length_limit_finish_reason(runner, texts):
    (h,), = runner.translate(texts[1:2], DecodeOptions(max_new_tokens=2))
    assert h.finish_reason == "length" and len(h.tokens) == 2


# ----- batching ----------------------------------------------------------------------------------
def test_batched_equals_one_by_one_greedy_and_beam(runner, texts):
    ids = runner.encode_texts(texts)
    beam = DecodeOptions(beam_size=4, n_best=3, max_new_tokens=MAX_NEW)
    for o in (DecodeOptions(max_new_tokens=MAX_NEW), beam):
        assert tokens(runner.translate(ids, o)) == alone(runner, ids, [o] * len(ids))


def test_mixed_beam_sizes_in_one_batch(runner, model, texts):
    ids = runner.encode_texts(texts)
    sizes = [1, 3, 2, 4, 1]
    opts = [DecodeOptions(beam_size=k, n_best=k, alpha=0.6, max_new_tokens=MAX_NEW) for k in sizes]
    got = runner.translate(ids, opts)
    assert tokens(got) == alone(runner, ids, opts)
    for x, k, gs in zip(ids, sizes, got, strict=True):
        ref = beam_search(model, reference_src([x]), MAX_NEW, beam_size=k, n_best=k, alpha=0.6)[0]
        assert [g.tokens for g in gs] == [r.tokens for r in ref]


def test_request_added_midway_matches_alone(runner, texts):
    ids = runner.encode_texts(texts)
    beam = DecodeOptions(beam_size=3, n_best=2, max_new_tokens=MAX_NEW)
    opts = [DecodeOptions(max_new_tokens=MAX_NEW), beam]
    batch = runner.new_batch(16)
    first = [runner.make_request(ids[1], opts[1]), runner.make_request(ids[0], opts[0])]
    batch.add(first)
    out = {}
    for _ in range(3):
        out |= {e.request.id: e.hypotheses for e in batch.step() if isinstance(e, FinishedEvent)}
    assert len(batch) == 2 and batch.shape[1] == 3  # the late rows join a cache that has columns
    late = [runner.make_request(ids[4], opts[0]), runner.make_request(ids[2], opts[1])]
    batch.add(late)
    out |= drain(batch)
    reqs = first + late
    got = [[h.tokens for h in out[r.id]] for r in reqs]
    assert got == alone(runner, [r.source for r in reqs], [r.options for r in reqs])
    # empty: with a mask S is 0; with source lengths S and the host buffers stay for the next request
    lengths = runner.kv_cache == "inplace"
    assert batch.shape == (0, 0, min(SOURCE_AXIS_MIN, runner.max_len) if lengths else 0)
    again = runner.make_request(ids[3], beam)  # reads buffers its predecessors wrote
    batch.add(again)
    assert [h.tokens for h in drain(batch)[again.id]] == alone(runner, [again.source], [beam])[0]


def test_batch_tokens_count_every_rows_source_and_decoded_tokens(runner, texts):
    ids = runner.encode_texts(texts)
    batch = runner.new_batch(8)
    assert batch.tokens == 0
    a = runner.make_request(ids[0], DecodeOptions(max_new_tokens=MAX_NEW))
    b = runner.make_request(ids[1], DecodeOptions(beam_size=2, n_best=1, max_new_tokens=MAX_NEW))
    batch.add(a)
    assert batch.tokens == len(ids[0])
    finished = [e for _ in range(2) for e in batch.step() if isinstance(e, FinishedEvent)]
    batch.add(b)
    finished += [e for e in batch.step() if isinstance(e, FinishedEvent)]
    assert not finished and len(batch) == 2  # (MAX_NEW leaves room for three steps)
    assert batch.tokens == (len(ids[0]) + 3) + 2 * (len(ids[1]) + 1)  # b's two beam rows count twice
    batch.cancel(a)
    assert batch.tokens == 2 * (len(ids[1]) + 1)


def test_a_row_reused_by_a_shorter_source_ignores_the_longer_sources_columns(runner, texts):
    ids = sorted(runner.encode_texts(texts), key=len)
    short, long_ = ids[0], (ids[-1][:-1] * 4)[: runner.max_len - 1] + [ids[-1][-1]]
    opts = DecodeOptions(max_new_tokens=MAX_NEW)
    batch = runner.new_batch(4)
    gone, kept = runner.make_request(long_, opts), runner.make_request(long_, opts)  # kept: S stays long
    batch.add([gone, kept])
    batch.cancel(gone)
    req = runner.make_request(short, opts)
    batch.add(req)
    row = batch.rows_of(req)[0]
    stale = [c[row, :, len(short):len(long_)] for c in batch._cross.tensors()]
    assert all(np.abs(c).max() > 0 for c in stale)  # a long source's K/V are still there, unzeroed
    got = drain(batch)[req.id][0]
    ref = runner.new_batch(4)
    again = runner.make_request(short, opts)
    ref.add(again)
    want = drain(ref)[again.id][0]
    assert got.tokens == want.tokens
    assert np.isclose(got.log_prob, want.log_prob, rtol=1e-5, atol=1e-6)


def test_translate_reuses_the_thread_batch_and_recovers_from_a_failed_call(runner, texts):
    ids = runner.encode_texts(texts)
    opts = [DecodeOptions(beam_size=1 + i % 2, max_new_tokens=MAX_NEW) for i in range(len(ids))]

    def fresh(x: list[int], o: DecodeOptions) -> list[list[int]]:
        batch = runner.new_batch(64)
        req = runner.make_request(x, o)
        batch.add(req)
        return [h.tokens for h in drain(batch)[req.id]]

    want = [fresh(x, o) for x, o in zip(ids, opts, strict=True)]
    assert tokens(runner.translate(ids, opts)) == want
    kept = runner._thread_batch(64)
    assert tokens(runner.translate(ids[::-1], opts[::-1])) == want[::-1]  # buffers written by the call before
    assert runner._thread_batch(64) is kept and len(kept) == 0

    def boom(stage: str) -> None:
        raise RuntimeError(f"injected {stage} failure")

    runner.fault_hook = boom
    try:
        with pytest.raises(RuntimeError, match="injected encoder failure"):
            runner.translate(ids, opts)
    finally:
        runner.fault_hook = None
    assert runner._thread_batch(64) is not kept  # the failed call's batch is not reused
    assert tokens(runner.translate(ids, opts)) == want


def test_cancel_frees_rows(runner, texts):
    ids = runner.encode_texts(texts)
    batch = runner.new_batch(8)
    a = runner.make_request(ids[1], DecodeOptions(beam_size=3, max_new_tokens=MAX_NEW))
    b = runner.make_request(ids[0], DecodeOptions(max_new_tokens=MAX_NEW))
    batch.add([a, b])
    assert batch.free_rows == 4 and batch.used_rows == 4
    batch.step()
    assert batch.cancel(a) is True
    assert batch.free_rows == 7 and batch.requests == [b] and batch.rows_of(a) == []
    assert batch.cancel(a) is False
    c = runner.make_request(ids[2], DecodeOptions(beam_size=2, max_new_tokens=MAX_NEW))
    batch.add(c)
    assert set(batch.rows_of(c)) <= {0, 1, 2}  # reuses the freed rows: no new ones
    out = drain(batch)
    assert [h.tokens for h in out[b.id]] == alone(runner, [b.source], [b.options])[0]
    assert [h.tokens for h in out[c.id]] == alone(runner, [c.source], [c.options])[0]


def test_finished_rows_become_holes_then_get_compacted(runner, texts):
    ids = runner.encode_texts(texts)
    batch = runner.new_batch(8)
    a = runner.make_request(ids[1], DecodeOptions(beam_size=3, max_new_tokens=2))
    b = runner.make_request(ids[0], DecodeOptions(max_new_tokens=MAX_NEW))
    batch.add([a, b])
    assert batch.rows_of(a) == [0, 1, 2] and batch.rows_of(b) == [3]
    # the source axis: the longest source with a mask; with source lengths a power of two >= 64
    # (at most max_len) that does not shrink
    lengths = runner.kv_cache == "inplace"
    assert len(ids[0]) < len(ids[1]) <= SOURCE_AXIS_MIN
    axis = min(SOURCE_AXIS_MIN, runner.max_len) if lengths else len(ids[1])
    assert batch.shape == (4, 0, axis)
    batch.step()
    (done,) = batch.step()
    assert done.request is a and len(done.hypotheses[0].tokens) == 2
    assert done.hypotheses[0].finish_reason == "length"
    # 3 holes of 4 rows: b moved to row 0; with a mask, the source axis shrank to b's length
    assert batch.rows_of(b) == [0] and batch.shape == (1, 2, axis if lengths else len(ids[0]))
    assert [h.tokens for h in drain(batch)[b.id]] == alone(runner, [b.source], [b.options])[0]


def test_continuous_churn_through_a_small_batch(runner, texts):
    ids = runner.encode_texts(texts) * 3
    opts = [DecodeOptions(beam_size=1 + i % 3, n_best=1, max_new_tokens=MAX_NEW - i) for i in range(len(ids))]
    assert tokens(runner.translate(ids, opts, max_rows=4)) == alone(runner, ids, opts)


def test_fault_hook_fails_a_step_without_corrupting_the_batch(runner, texts):
    ids = runner.encode_texts(texts)
    batch = runner.new_batch(8)
    req = runner.make_request(ids[3], DecodeOptions(beam_size=2, max_new_tokens=MAX_NEW))
    batch.add(req)
    batch.step()
    before = batch.shape

    def boom(stage: str) -> None:
        raise RuntimeError(f"injected {stage} failure")

    runner.fault_hook = boom
    try:
        with pytest.raises(RuntimeError, match="injected decoder failure"):
            batch.step()
        with pytest.raises(RuntimeError, match="injected encoder failure"):
            batch.add(runner.make_request(ids[0]))
    finally:
        runner.fault_hook = None
    assert batch.shape == before and batch.requests == [req]
    assert [h.tokens for h in drain(batch)[req.id]] == alone(runner, [req.source], [req.options])[0]


# ----- outputs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("beam", [1, 3])
def test_alignment_shape_and_rows_sum_to_one(runner, texts, beam):
    ids = runner.encode_texts(texts)
    opts = DecodeOptions(beam_size=beam, n_best=beam, max_new_tokens=MAX_NEW, with_alignment=True)
    for x, hyps in zip(ids, runner.translate(ids, opts), strict=True):
        for h in hyps:
            a = np.array(h.alignment).reshape(len(h.tokens), len(x))
            np.testing.assert_allclose(a.sum(axis=1), 1.0, atol=1e-4)
    assert runner.translate(ids[:1], DecodeOptions(max_new_tokens=5))[0][0].alignment is None


def test_streaming_events_add_up_to_the_result(runner, texts):
    batch = runner.new_batch(4)
    req = runner.make_request(texts[1], DecodeOptions(max_new_tokens=MAX_NEW, stream=True))
    batch.add(req)
    streamed, final = [], None
    for _ in range(MAX_NEW + 1):
        for e in batch.step():
            if isinstance(e, TokenEvent):
                streamed.append(e)
            else:
                final = e.hypotheses[0]
        if final:
            break
    assert [e.token for e in streamed] == final.tokens
    assert "".join(e.text for e in streamed) == final.text


def test_io_binding_backend_on_cpu_gives_the_same_results(tiny_bundle, runner, texts):
    bound = Runner(tiny_bundle, providers=["CPUExecutionProvider"], io_binding=True)
    assert type(bound.backend).__name__ == "IoBindingBackend"
    opts = [DecodeOptions(beam_size=k, n_best=k, max_new_tokens=MAX_NEW) for k in (1, 3, 2, 1, 2)]
    want = tokens(runner.translate(texts, opts, max_rows=5))
    assert tokens(bound.translate(texts, opts, max_rows=5)) == want


def test_fp16_variant_decodes_like_fp32(tiny_bundle, runner, texts):
    half = Runner(tiny_bundle, providers=["CPUExecutionProvider"], variant="fp16")
    assert half.sessions.cache_dtype is np.float16
    opts = DecodeOptions(max_new_tokens=MAX_NEW)
    for h, f in zip(half.translate(texts, opts), runner.translate(texts, opts), strict=True):
        assert h[0].tokens == f[0].tokens
        assert h[0].log_prob == pytest.approx(f[0].log_prob, abs=0.05)
    with pytest.raises(ValueError, match="no variant 'int4'"):
        Runner(tiny_bundle, variant="int4")
