"""Translations cut at the model's maximum length, and targets as long, by construction, for the tests of
Score's end-token rule (service/runtime/decoding/scoring.py: a target as long as such a translation is scored
without eos)."""

from __future__ import annotations

from dataclasses import replace

from service.domain.types import DecodeOptions, Hypothesis
from service.runtime.runner import Runner


def cut_translation(runner: Runner, text: str, options: DecodeOptions | None = None) -> Hypothesis:
    """The greedy translation of text cut at the model's maximum length: min_length at the max_len - 1
    tokens a translation may generate keeps eos out until then, so the search stops there for "length"
    with exactly that many tokens (asserted: a forced language token and a target prefix count in it)."""
    limit = runner.max_len - 1
    asked = replace(options or DecodeOptions(), beam_size=1, min_output_tokens=limit)
    (hyp,) = runner.translate([text], asked)[0]
    assert hyp.finish_reason == "length" and len(hyp.tokens) == limit, (
        f"min_length={limit} should keep eos out and cut the translation of {text!r} at {limit} tokens; got "
        f"{len(hyp.tokens)} tokens, finish_reason {hyp.finish_reason!r}")
    return hyp


def limit_target(runner: Runner, word: str = "the") -> str:
    """A target text of exactly the max_len - 1 tokens a translation cut at the maximum length has (no
    forced language): `word` repeated, one token more per word, checked. (A cut translation's own text
    may not tokenize back to its tokens: the runtime tests score those by id.)"""
    limit = runner.max_len - 1
    words: list[str] = []
    while len(runner.encode_target([" ".join(words)])[0]) < limit:
        words.append(word)
    text = " ".join(words)
    assert len(runner.encode_target([text])[0]) == limit, f"{word!r} repeated skips {limit} tokens"
    return text


def limit_and_ended_pairs(runner: Runner, texts: list[str]) -> tuple[list[str], list[str]]:
    """(sources, targets) of two pairs: a target as long as a cut translation (`limit_target`), scored
    without eos, and a greedy translation that ended with eos, scored with it."""
    ended = [(t, h[0]) for t, h in zip(texts, runner.translate(texts), strict=True)
             if h[0].finish_reason == "eos"]
    assert ended, "no greedy translation of the test texts ended with eos"
    return [texts[0], ended[0][0]], [limit_target(runner), ended[0][1].text]
