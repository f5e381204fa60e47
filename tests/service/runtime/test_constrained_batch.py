"""Required phrases in the continuous batch of the tiny bundle: constrained and unconstrained requests in one
batch (each its own constraints; the unconstrained decode as alone), every phrase placed beside a target
prefix, n-best and repetition controls, phrases too long for max_output_tokens reported, and a greedy output
that already holds its phrases unchanged."""

from __future__ import annotations

from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from tests.support.decoding import assert_same_hypotheses, drain, reference

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


def test_greedy_output_holding_its_phrases_is_unchanged(runner: Runner, texts: list[str]) -> None:
    for text in texts[:3]:
        options = DecodeOptions(max_output_tokens=MAX_NEW)
        (want,) = reference(runner, text, options)
        phrases = [want.tokens[1:3], want.tokens[-2:]]
        (got,) = reference(runner, text, DecodeOptions(max_output_tokens=MAX_NEW, required_phrases=phrases))
        assert got.tokens == want.tokens and got.unmet_phrases == ()
