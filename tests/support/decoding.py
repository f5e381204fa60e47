"""Reference decoding: what the runner gives for a text decoded alone, which batched, scheduled and
served decoding must reproduce (tokens, log-probs and scores), and the checks that compare them."""

from __future__ import annotations

import numpy as np

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
    batch.add([runner.make_request(text, DecodeOptions(stream=True, max_new_tokens=max_new_tokens))])
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
