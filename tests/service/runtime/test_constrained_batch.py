"""Required phrases in the continuous batch of the tiny bundle: constrained and unconstrained requests in one
batch (each its own constraints; the unconstrained decode as alone), every phrase placed beside a target
prefix, n-best and repetition controls, phrases too long for max_output_tokens reported, and a greedy output
that already holds its phrases unchanged at beam sizes 1, 2, 4 and 5."""

from __future__ import annotations

import dataclasses
from collections import deque

import pytest

from service.domain.types import DecodeOptions, FinishedEvent, Hypothesis
from service.runtime.runner import Runner
from tests.support.decoding import assert_distinct, assert_same_hypotheses, best_tokens, drain, reference

MAX_NEW = 24


def holds(tokens: list[int], form: tuple[int, ...]) -> bool:
    n = len(form)
    return any(tuple(tokens[i : i + n]) == form for i in range(len(tokens) - n + 1))


def placed(runner: Runner, tokens: list[int], phrases: list) -> bool:
    """Whether every phrase (text or ids) appears in tokens, in one of its forms."""
    resolved = runner.resolve(DecodeOptions(required_phrases=phrases)).required_phrases
    return all(any(holds(tokens, f) for f in c.forms) for c in resolved.constraints)


def test_mixed_rows_in_one_batch(runner: Runner, texts: list[str]) -> None:
    plain = [DecodeOptions(beam_size=4, max_output_tokens=MAX_NEW), DecodeOptions(max_output_tokens=MAX_NEW)]
    asked = {0: plain[0],
             1: DecodeOptions(beam_size=4, max_output_tokens=MAX_NEW, required_phrases=["seven"]),
             2: plain[1], 3: DecodeOptions(max_output_tokens=MAX_NEW, required_phrases=[["dollars", "euros"],
                                                                                        "thousand"]),
             4: DecodeOptions(beam_size=2, n_best=2, max_output_tokens=MAX_NEW, target_prefix="we",
                              no_repeat_ngram_size=4, repetition_penalty=1.2, required_phrases=["hundred"])}
    batch = runner.new_batch(32)
    requests = [runner.make_request(texts[i % len(texts)], o) for i, o in asked.items()]
    batch.add(requests)
    got = drain(batch)
    for (i, options), request in zip(asked.items(), requests, strict=True):
        hyps = got[request.id]
        if not options.required_phrases:
            assert_same_hypotheses(hyps, reference(runner, texts[i % len(texts)], options))
            continue
        prefix = runner.resolve(options).target_prefix
        for h in hyps:
            assert h.unmet_phrases == () and placed(runner, h.tokens, list(options.required_phrases))
            assert tuple(h.tokens[: len(prefix)]) == prefix
    assert len(got[requests[4].id]) == 2


def test_phrases_too_long_for_the_length_are_named(runner: Runner, texts: list[str]) -> None:
    phrases = ["thousand", "dollars", "seven"]
    options = DecodeOptions(beam_size=4, max_output_tokens=9, required_phrases=phrases)
    (h,) = reference(runner, texts[0], options)
    assert h.unmet_phrases and len(h.unmet_phrases) < len(phrases)
    for i, phrase in enumerate(phrases):
        assert placed(runner, h.tokens, [phrase]) == (i not in h.unmet_phrases)


def decode_all(runner: Runner, texts: list[str], options: list[DecodeOptions]) -> list[list[Hypothesis]]:
    """Each text decoded with its options, all in one batch."""
    requests = [runner.make_request(t, o) for t, o in zip(texts, options, strict=True)]
    batch = runner.new_batch(sum(r.options.rows for r in requests))
    batch.add(requests)
    got = drain(batch)
    return [got[r.id] for r in requests]


def picks(tokens: list[int]) -> list[list]:
    """Phrase lists the tokens hold: one token, a run of two, two phrases, two overlapping ones, a
    disjunction with a form the output lacks (as ids)."""
    n = len(tokens)
    return [[tokens[n // 2 : n // 2 + 1]], [tokens[1:3]], [tokens[:2], tokens[-2:]],
            [tokens[-3:-1], tokens[-2:]], [[tokens[-3:], [tokens[0]] * 5]]]


@pytest.mark.parametrize("beam", [1, 2, 4, 5])
def test_an_output_holding_its_phrases_is_unchanged(runner: Runner, texts: list[str], beam: int) -> None:
    """Phrases taken from the unconstrained output itself, max_output_tokens just long enough for it (so
    that phrases must be placed in time): the output, its log-prob and score unchanged."""
    first = decode_all(runner, texts, [DecodeOptions(beam_size=beam, max_output_tokens=MAX_NEW)] * len(texts))
    plain = [DecodeOptions(beam_size=beam, max_output_tokens=len(h[0].tokens) + 1) for h in first]
    want = decode_all(runner, texts, plain)
    assert_distinct([w[0].tokens for w in want])
    cases = [(text, o, w[0], phrases) for text, o, w in zip(texts, plain, want, strict=True)
             if len(w[0].tokens) >= 3 for phrases in picks(w[0].tokens)]
    assert len(cases) >= 5 * (len(texts) - 1)
    options = [dataclasses.replace(o, required_phrases=phrases) for _, o, _, phrases in cases]
    got = decode_all(runner, [text for text, *_ in cases], options)
    for (_, _, w, phrases), (g,) in zip(cases, got, strict=True):
        assert g.tokens == w.tokens and g.unmet_phrases == (), phrases
        assert_same_hypotheses([g], [w])


def test_the_rows_of_an_ended_half_are_freed(runner: Runner, texts: list[str]) -> None:
    """A request alone in its batch, with phrases its plain output lacks: 2k rows until its plain search
    ends, then k (the batch's live rows, its free rows and its shape), the request still decoding; the
    answer is the one decoded alone."""
    freed = 0
    options = DecodeOptions(beam_size=4, max_output_tokens=MAX_NEW, required_phrases=["thousand", "dollars"])
    for text in texts:
        batch = runner.new_batch(8)
        request = runner.make_request(text, options)
        batch.add([request])
        seen, got = [], None
        while got is None:
            seen.append((batch.used_rows, batch.free_rows, len(batch.rows_of(request)), batch.shape[0]))
            got = next((e.hypotheses for e in batch.step() if isinstance(e, FinishedEvent)), None)
        assert_same_hypotheses(got, reference(runner, text, options))
        assert seen[0] == (8, 0, 8, 8) and set(seen) <= {(8, 0, 8, 8), (4, 4, 4, 4)}
        assert seen == sorted(seen, reverse=True)  # never back to 8 rows
        freed += (4, 4, 4, 4) in seen
    assert freed >= 2


def continuous(runner: Runner, asked: list[tuple[str, DecodeOptions]], max_rows: int
               ) -> tuple[list[list[Hypothesis]], int]:
    """Requests decoded in a continuous batch of max_rows rows, each added (in order) as soon as its rows
    are free: each one's hypotheses, and how many joined in rows given back by a request still decoding
    (the rows the requests there asked for left too few)."""
    requests = [runner.make_request(t, o) for t, o in asked]
    pending, batch, out, joined = deque(requests), runner.new_batch(max_rows), {}, 0
    while pending or len(batch):
        while pending and pending[0].options.rows <= batch.free_rows:
            asked_rows = sum(r.options.rows for r in batch.requests)
            joined += asked_rows + pending[0].options.rows > max_rows
            batch.add([pending.popleft()])
        out |= {e.request.id: e.hypotheses for e in batch.step() if isinstance(e, FinishedEvent)}
    return [out[r.id] for r in requests], joined


def test_requests_join_the_freed_rows(runner: Runner, texts: list[str]) -> None:
    """A continuous batch of 8 rows: a beam-4 request with phrases takes all 8, and the next request joins
    in the rows its plain half gives back, while it still decodes; every answer (n_best 2 with phrases its
    plain output holds or lacks, n_best 1, plain requests) is the one of the request decoded alone."""
    own = best_tokens(runner, texts[1], DecodeOptions(beam_size=2, max_output_tokens=MAX_NEW))
    asked = [(texts[0], DecodeOptions(beam_size=4, max_output_tokens=MAX_NEW, required_phrases=["thousand"])),
             (texts[1], DecodeOptions(beam_size=2, n_best=2, max_output_tokens=MAX_NEW,
                                      required_phrases=[own[1:3]])),
             (texts[2], DecodeOptions(beam_size=4, max_output_tokens=MAX_NEW)),
             (texts[3], DecodeOptions(beam_size=2, n_best=2, max_output_tokens=MAX_NEW,
                                      required_phrases=["seven", "hundred"])),
             (texts[4], DecodeOptions(max_output_tokens=MAX_NEW, required_phrases=["dollars"])),
             (texts[0], DecodeOptions(beam_size=3, max_output_tokens=MAX_NEW))]
    got, joined = continuous(runner, asked, 8)
    assert joined >= 1
    for hyps, (text, options) in zip(got, asked, strict=True):
        assert_same_hypotheses(hyps, reference(runner, text, options))
    assert got[1][0].tokens == own and len(got[1]) == 2
    assert len(got[3]) == 2 and all(h.unmet_phrases == () for h in got[3])
