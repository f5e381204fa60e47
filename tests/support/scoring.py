"""Translations cut at the model's maximum length, by construction, for the tests of Score's end-token rule
(service/runtime/scoring.py: a target as long as such a translation is scored without eos)."""

from __future__ import annotations

from dataclasses import replace

from service.domain.types import DecodeOptions, Hypothesis
from service.runtime.runner import Runner


def cut_translation(runner: Runner, text: str, options: DecodeOptions | None = None) -> Hypothesis:
    """The greedy translation of text cut at the model's maximum length: min_length at the max_len - 1
    tokens a translation may generate keeps eos out until then, so the search stops there for "length"
    with exactly that many tokens (asserted: a forced language token and a target prefix count in it)."""
    limit = runner.max_len - 1
    asked = replace(options or DecodeOptions(), beam_size=1, min_length=limit)
    (hyp,) = runner.translate([text], asked)[0]
    assert hyp.finish_reason == "length" and len(hyp.tokens) == limit, (
        f"min_length={limit} should keep eos out and cut the translation of {text!r} at {limit} tokens; got "
        f"{len(hyp.tokens)} tokens, finish_reason {hyp.finish_reason!r}")
    return hyp


def cut_target(runner: Runner, text: str) -> str:
    """The text of cut_translation(text), checked to tokenize back to exactly its tokens (Score reads
    the text)."""
    hyp = cut_translation(runner, text)
    assert runner.encode_target([hyp.text])[0] == hyp.tokens, (
        f"the cut translation {hyp.text!r} does not tokenize back to the {len(hyp.tokens)} tokens generated")
    return hyp.text
