"""The torch-free runner on the tiny bundle: inputs, search equal to the PyTorch reference decoders,
outputs, backends and variants (the bundle loader: test_bundle.py; the decode batch: test_batch.py)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from model.data import pad
from model.decoding import beam_search, greedy_decode
from service.domain.errors import BundleError, InvalidInput
from service.domain.types import DEFAULT_MAX_BEAM, DecodeOptions, TokenEvent
from service.runtime.cache.backends import HostBackend
from service.runtime.model.bundle import load_bundle
from service.runtime.runner import Runner, check_decoder_inputs
from tests.support import tiny
from tests.support.decoding import (
    MAX_NEW,
    assert_same_hypotheses,
    assert_same_or_near_tie,
    forced_logprobs,
    next_logprobs,
    tokens,
)


# ----- runner basics ----------------------------------------------------------------------------
def test_the_texts_hold_what_the_tests_rely_on(runner, texts):
    """The tiny task's texts (tests/support/tiny.py): distinct sources of clearly different lengths, whose
    greedy outputs differ, end with eos well before the limit, and are decoded exactly."""
    lengths = sorted(len(source) for source in runner.encode_texts(texts))
    assert len(set(texts)) == len(texts) and lengths[-1] >= 2 * lengths[0], lengths
    hyps = [h[0] for h in runner.translate(texts)]
    assert len({tuple(h.tokens) for h in hyps}) == len(texts)
    assert all(h.finish_reason == "eos" and len(h.tokens) < runner.max_len // 2 for h in hyps)
    references = dict(tiny.valid_pairs())
    assert [h.text for h in hyps] == [references[t] for t in texts]


def test_a_decoder_of_another_interface_is_refused_by_name(tiny_concat_bundle):
    from export.verify.base import open_session  # joins the global thread pool if a Runner made one
    from interface.names import ENCODER_ATTENTION_MASK, ENCODER_SEQLENS_K

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
    code = ("import sys, service.runtime.runner, service.runtime.cache.backends; "
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
        ("we 5", DecodeOptions(beam_size=DEFAULT_MAX_BEAM + 1),
         f"beam_size must be between 1 and {DEFAULT_MAX_BEAM}"),
        ("we 5", DecodeOptions(beam_size=2, n_best=3), r"n_best must be between 1 and beam_size \(2\)"),
        ("we 5", DecodeOptions(max_output_tokens=0), "max_output_tokens must be between 1 and"),
        ("we 5", DecodeOptions(max_output_tokens=10_000), "max_output_tokens must be between 1 and"),
        ("we 5", DecodeOptions(length_penalty=-1.0), "length_penalty"),
        ("we 5", DecodeOptions(beam_size=2, stream=True), "streaming needs beam_size 1"),
    ],
)
def test_invalid_input_is_reported_clearly(runner, source, options, message):
    with pytest.raises(InvalidInput, match=message):
        runner.make_request(source, options)
    with pytest.raises(InvalidInput, match=message):
        runner.translate([source], options)


# ----- search equals the PyTorch reference ------------------------------------------------------
def test_greedy_equals_pytorch_on_mixed_lengths(layout_runner, tiny_model, texts):
    ids = layout_runner.encode_texts(texts)
    assert len({len(x) for x in ids}) > 3
    ref = greedy_decode(tiny_model, pad(ids, 0), MAX_NEW)
    got = layout_runner.translate(ids, DecodeOptions(max_output_tokens=MAX_NEW))
    for r, (g,) in zip(ref, got, strict=True):
        assert g.tokens == r.tokens
        assert g.log_prob == pytest.approx(r.log_prob, abs=1e-4)
        assert g.finish_reason == ("eos" if r.finished else "length")
        assert g.text == layout_runner.decode_tokens(r.tokens)


def test_beam_equals_pytorch(layout_runner, tiny_model, texts):
    ids = layout_runner.encode_texts(texts)
    src = pad(ids, 0)
    ref = beam_search(tiny_model, src, MAX_NEW, beam_size=3, n_best=2, alpha=0.6, with_alignment=True)
    opts = DecodeOptions(beam_size=3, n_best=2, length_penalty=0.6, max_output_tokens=MAX_NEW,
                         return_alignment=True)
    got = layout_runner.translate(ids, opts)
    for x, rs, gs in zip(ids, ref, got, strict=True):
        assert [g.tokens for g in gs] == [r.tokens for r in rs] and len(gs) == 2
        for r, g in zip(rs, gs, strict=True):
            assert g.score == pytest.approx(r.score, abs=1e-4)
            assert g.log_prob == pytest.approx(r.log_prob, abs=1e-4)
            assert g.finish_reason == ("eos" if r.finished else "length")
            want = np.array(r.alignment).reshape(len(r.tokens), -1)[:, : len(x)]
            np.testing.assert_allclose(np.array(g.alignment).reshape(want.shape), want, atol=1e-4)


def test_greedy_is_beam_of_one(layout_runner, texts):
    greedy = layout_runner.translate(texts, DecodeOptions(max_output_tokens=MAX_NEW))
    beam1 = layout_runner.translate(texts, [DecodeOptions(beam_size=1,
                                                          max_output_tokens=MAX_NEW)] * len(texts))
    assert tokens(greedy) == tokens(beam1)


def test_length_limit_finish_reason(layout_runner, texts):
    (h,), = layout_runner.translate(texts[1:2], DecodeOptions(max_output_tokens=2))
    assert h.finish_reason == "length" and len(h.tokens) == 2


# ----- outputs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("beam", [1, 3])
def test_alignment_shape_and_rows_sum_to_one(layout_runner, texts, beam):
    ids = layout_runner.encode_texts(texts)
    opts = DecodeOptions(beam_size=beam, n_best=beam, max_output_tokens=MAX_NEW, return_alignment=True)
    for x, hyps in zip(ids, layout_runner.translate(ids, opts), strict=True):
        for h in hyps:
            a = np.array(h.alignment).reshape(len(h.tokens), len(x))
            np.testing.assert_allclose(a.sum(axis=1), 1.0, atol=1e-4)
    assert layout_runner.translate(ids[:1], DecodeOptions(max_output_tokens=5))[0][0].alignment is None


def test_streaming_events_add_up_to_the_result(layout_runner, texts):
    batch = layout_runner.new_batch(4)
    req = layout_runner.make_request(texts[1], DecodeOptions(max_output_tokens=MAX_NEW, stream=True))
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
    opts = [DecodeOptions(beam_size=k, n_best=k, max_output_tokens=MAX_NEW) for k in (1, 3, 2, 1, 2)]
    want = runner.translate(texts, opts, max_rows=5)
    for got, hyps in zip(bound.translate(texts, opts, max_rows=5), want, strict=True):
        assert_same_hypotheses(got, hyps)


def test_fp16_variant_decodes_like_fp32(tiny_bundle, runner, texts):
    half = Runner(tiny_bundle, providers=["CPUExecutionProvider"], variant="fp16")
    assert half.sessions.cache_dtype is np.float16
    opts = DecodeOptions(max_output_tokens=MAX_NEW)
    for h, f in zip(half.translate(texts, opts), runner.translate(texts, opts), strict=True):
        assert h[0].tokens == f[0].tokens
        assert h[0].log_prob == pytest.approx(f[0].log_prob, abs=0.05)
    with pytest.raises(BundleError, match="no variant .int4."):
        Runner(tiny_bundle, variant="int4")


def test_one_forced_run_gives_each_greedy_steps_log_probs_and_the_near_tie_check_uses_them(runner, texts):
    """tests/support/decoding.py's near-tie check (the GPU tier's allowance for fp16): the greedy output
    fed back gives, position by position, the token greedy decoding chose and its log-prob, with outputs
    longer than the source; a divergence passes only within the margin of float32's lead there."""
    source = runner.encode_texts([texts[1]])[0]
    best = runner.translate([source], DecodeOptions(max_output_tokens=MAX_NEW))[0][0]
    assert best.finish_reason == "eos" and len(best.tokens) > len(source), "wanted: a long output that ends"
    steps = forced_logprobs(runner, source, best.tokens)
    assert np.array_equal(steps[2], next_logprobs(runner, source, best.tokens[:2]))
    assert [int(s.argmax()) for s in steps] == [*best.tokens, runner.special.eos]
    total = sum(s[t] for s, t in zip(steps, [*best.tokens, runner.special.eos], strict=True))
    assert total == pytest.approx(best.log_prob, abs=1e-4)
    assert assert_same_or_near_tie(runner, source, best.tokens, best.tokens)
    second = int(np.argsort(steps[2])[-2])  # the runner-up at step 2
    parted = [*best.tokens[:2], second]
    lead = steps[2][best.tokens[2]] - steps[2][second]
    assert assert_same_or_near_tie(runner, source, parted, best.tokens, margin=lead + 1e-6) is False
    with pytest.raises(AssertionError, match="parted at step 2"):
        assert_same_or_near_tie(runner, source, parted, best.tokens, margin=lead - 1e-6)
