"""Reference decoding: what the runner gives for a text decoded alone, which batched, scheduled and
served decoding must reproduce (tokens, log-probs and scores), and the checks that compare them."""

from __future__ import annotations

import numpy as np

from interface import names
from service.domain.types import DecodeOptions, FinishedEvent, Hypothesis, TokenEvent
from service.runtime.runner import Runner

MAX_NEW = 30  # output tokens of most decoding tests: several steps, short runs


def tokens(results: list[list[Hypothesis]]) -> list[list[list[int]]]:
    """Tokens of every hypothesis of every input."""
    return [[h.tokens for h in hyps] for hyps in results]


def drain(batch, limit: int = 500) -> dict[int, list[Hypothesis]]:
    """Step a batch until it is empty; hypotheses by request id."""
    out = {}
    for _ in range(limit):
        if not len(batch):
            return out
        out |= {e.request.id: e.hypotheses for e in batch.step() if isinstance(e, FinishedEvent)}
    raise AssertionError("batch did not drain")


Source = str | list[int]


def reference(runner: Runner, source: Source, options: DecodeOptions | None = None) -> list[Hypothesis]:
    """The n-best hypotheses of one text (or source ids) decoded alone, the fault hook not called: the
    tests' one reference decoder."""
    hook, runner.fault_hook = runner.fault_hook, None
    try:
        return runner.translate([source], options)[0]
    finally:
        runner.fault_hook = hook


def best_tokens(runner: Runner, source: Source, options: DecodeOptions | None = None) -> list[int]:
    """Tokens of the best reference hypothesis."""
    return reference(runner, source, options)[0].tokens


def best_texts(runner: Runner, texts: list[str], options: DecodeOptions | None = None) -> list[str]:
    """The best reference translation of each text."""
    return [reference(runner, t, options)[0].text for t in texts]


def reference_stream(runner: Runner, text: str, max_new_tokens: int | None = None) -> tuple[list[str], str]:
    """The non-empty pieces the decode batch streams for `text` decoded alone (greedy), and the full
    translation."""
    batch = runner.new_batch(4)
    batch.add([runner.make_request(text, DecodeOptions(stream=True, max_output_tokens=max_new_tokens))])
    pieces: list[str] = []
    for _ in range(runner.max_len):
        for event in batch.step():
            if isinstance(event, TokenEvent) and event.text:
                pieces.append(event.text)
            elif isinstance(event, FinishedEvent):
                return pieces, event.hypotheses[0].text
    raise AssertionError("reference decoding did not finish")


def assert_same_hypotheses(got: list[Hypothesis], want: list[Hypothesis], rtol: float = 1e-5,
                           atol: float = 1e-5) -> None:
    """Same tokens, and log-probs and scores equal within float32 noise (another batch shape may sum
    in another order)."""
    assert [h.tokens for h in got] == [h.tokens for h in want]
    np.testing.assert_allclose([h.log_prob for h in got], [h.log_prob for h in want], rtol=rtol, atol=atol)
    np.testing.assert_allclose([h.score for h in got], [h.score for h in want], rtol=rtol, atol=atol)


def assert_distinct(outputs: list) -> None:
    """The reference outputs differ across inputs: a test comparing with them cannot pass by
    returning one output for everything."""
    assert len({repr(o) for o in outputs}) > 1, "every reference output is the same"


# fp16 greedy may part from float32 only at a near-tie: where float32's own token leads fp16's choice
# by at most this in log-probability (export/verify/fp16.py TIE_MARGIN, docs/export.md)
FP16_TIE_MARGIN = 0.1


def forced_logprobs(runner: Runner, source: list[int], tokens: list[int]) -> np.ndarray:
    """A runner's log-probs (len(tokens) + 1, V) float64 after the decoder start and after each of `tokens`
    for source ids: its in-place decoder (batch 1) fed one token per run, the cache carried from run to
    run as a translation decodes, read from its own sessions. (One run of several new tokens would work
    only up to the source's length: the cross-attention's GroupQueryAttention takes no more.)"""
    n_layers = runner.bundle.n_decoder_layers
    ids = np.array([source], np.int64)
    cross = runner.sessions.encoder.run(None, {names.INPUT_IDS: ids, names.ATTENTION_MASK: np.ones_like(ids)})
    fed = [runner.spec.decoder_start, *tokens]
    heads, d_head = cross[0].shape[1], cross[0].shape[3]
    cross_names = [names.past_name(i, "encoder", kv) for i in range(n_layers) for kv in ("key", "value")]
    cache = names.self_cache_io(n_layers)  # past -> present
    past = {name: np.zeros((1, heads, len(fed), d_head), cross[0].dtype) for name in cache}
    fixed = {names.ENCODER_SEQLENS_K: np.array([len(source) - 1], np.int32),
             names.ENCODER_TOTAL_LENGTH: np.array(len(source), np.int32),
             **dict(zip(cross_names, cross, strict=True))}
    out = []
    for j, token in enumerate(fed):
        feeds = {names.INPUT_IDS: np.array([[token]], np.int64),
                 names.POSITION_IDS: np.array([[j]], np.int64), names.SEQLENS_K: np.array([j], np.int32),
                 names.TOTAL_SEQUENCE_LENGTH: np.array(j + 1, np.int32), **fixed, **past}
        logp, *presents = runner.sessions.decoder.run([names.LOGPROBS, *cache.values()], feeds)
        past = dict(zip(cache, presents, strict=True))
        out.append(logp[0, -1].astype(np.float64))
    return np.stack(out)


def next_logprobs(runner: Runner, source: list[int], prefix: list[int]) -> np.ndarray:
    """A runner's log-probs of the token after `prefix` for source ids (`forced_logprobs`'s last row)."""
    return forced_logprobs(runner, source, prefix)[-1]


def forced_log_prob(runner: Runner, source: list[int], tokens: list[int]) -> float:
    """A runner's total log-prob of `tokens` then eos for source ids (teacher-forced, one run per step)."""
    full = [*tokens, runner.special.eos]
    return float(sum(forced_logprobs(runner, source, tokens)[np.arange(len(full)), full]))


def assert_same_or_near_tie(fp32: Runner, source: list[int], got: list[int], want: list[int],
                            margin: float = FP16_TIE_MARGIN) -> bool:
    """got == want (greedy tokens), or they part where the float32 runner's own token leads got's by at
    most `margin`; returns whether they were identical."""
    if got == want:
        return True
    parted = (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b)
    step = next(parted, min(len(got), len(want)))
    logp, eos = next_logprobs(fp32, source, want[:step]), fp32.special.eos
    lead = logp[want[step] if step < len(want) else eos] - logp[got[step] if step < len(got) else eos]
    assert lead <= margin, f"parted at step {step}, float32 leading by {lead:.3g}: {got} vs {want}"
    return False
