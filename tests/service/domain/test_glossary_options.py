"""A glossary in a request's options: resolved over the model's, then per text (RequestLimits.for_text) the
terms it holds as required phrases after the request's own, the unmet ones split back into the request's
phrases (by index) and the glossary's terms (by source); faults named by term."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from service.domain.constraints import MAX_REQUIRED
from service.domain.errors import InvalidInput
from service.domain.glossary import Glossary
from service.domain.limits import RequestLimits
from service.domain.options import DecodeOptions

EOS = 2


def encode(texts: Sequence[str]) -> list[list[int]]:
    """A made-up target tokenizer: one id per character (a leading space is id 3)."""
    return [[3 if c == " " else 10 + ord(c) % 200 for c in t] for t in texts]


def limits(model: dict | None = None) -> RequestLimits:
    return RequestLimits(64, 4, 64, 63, 1000, vocab_size=300, glossary=Glossary.from_request(model or {}),
                         eos=EOS)


def test_a_text_holding_terms_requires_them_after_the_requests_own_phrases() -> None:
    lim = limits({"bank": "Ufer", "river": "Fluss"})
    resolved = lim.resolve(DecodeOptions(beam_size=2, required_phrases=["ab"],
                                         glossary={"Bank": ["Bank", "Banco"]}), encode)
    one = lim.for_text(resolved, "The river BANK, the bank.", encode)
    assert one.glossary_terms == ("river", "Bank")  # the request's target over the model's
    assert one.glossary_placed == 2
    assert one.required_phrases.constraints[0] == resolved.required_phrases.constraints[0]
    assert one.required_phrases.constraints[1].forms == tuple(map(tuple, encode(["Fluss", " Fluss"])))
    assert len(one.required_phrases.constraints[2].forms) == 4  # two targets, standalone and after a space
    assert one.glossary == Glossary() and hash(one)
    assert one.split_unmet((0, 2)) == ((0,), ("Bank",))
    none = lim.for_text(resolved, "riverbank", encode)  # not whole words
    assert none.required_phrases == resolved.required_phrases and none.glossary_terms == ()
    unglossed = lim.resolve(DecodeOptions(beam_size=2, required_phrases=["ab"]), encode)
    assert none == lim.for_text(unglossed, "riverbank", encode)  # as without: the same options and cache key


def test_terms_over_the_limit_or_unplaceable_are_reported_unmet() -> None:
    lim = limits({f"w{i}": "x" for i in range(MAX_REQUIRED + 3)})
    text = " ".join(f"w{i}" for i in range(MAX_REQUIRED + 3))
    one = lim.for_text(lim.resolve(DecodeOptions(beam_size=2, required_phrases=["ab", "cd"]), encode), text,
                       encode)
    assert len(one.required_phrases) == MAX_REQUIRED and one.glossary_placed == MAX_REQUIRED - 2
    assert one.split_unmet(())[1] == tuple(f"w{i}" for i in range(MAX_REQUIRED - 2, MAX_REQUIRED + 3))
    sampled = lim.for_text(lim.resolve(DecodeOptions(temperature=0.7), encode), "w1 w2", encode)
    assert not sampled.required_phrases and sampled.split_unmet(()) == ((), ("w1", "w2"))


def test_faults_are_named_by_term() -> None:
    with pytest.raises(InvalidInput, match="placed by beam search"):
        limits().resolve(DecodeOptions(glossary={"a": "b"}, temperature=0.5), encode)
    with pytest.raises(InvalidInput, match="glossary term 'cat' holds a sequence of suppress_sequences"):
        lim = limits({"cat": "dog"})
        lim.for_text(lim.resolve(DecodeOptions(suppress_sequences=["o"]), encode), "a cat", encode)
    with pytest.raises(InvalidInput, match="glossary term 'cat' is 71 tokens long"):
        lim = limits({"cat": "d" * 70})
        lim.for_text(lim.resolve(DecodeOptions(), encode), "a cat", encode)
    with pytest.raises(InvalidInput, match="glossary term 'cat' holds the end-of-sequence id"):
        lim = limits()
        lim.for_text(lim.resolve(DecodeOptions(glossary={"cat": "dog"}), lambda ts: [[EOS] for _ in ts]),
                     "a cat", lambda ts: [[EOS] for _ in ts])
    with pytest.raises(InvalidInput, match=r"glossary\[0\]: no target term"):
        Glossary.from_request([["cat", []]])
    assert Glossary.from_request([["cat", ["a", "b"]]]) == Glossary.from_request({"cat": ["a", "b"]})


def test_over_keeps_the_model_glossary_unindexed() -> None:
    model = Glossary.from_request({"New York": "Nueva York", "bank": "Ufer"})
    assert Glossary().over(model) is model and model.over(Glossary()) is model
    merged = Glossary.from_request({"BANK": "Bank", "York": "Yorck"}).over(model)
    assert [t.source for t in merged.terms_in("a bank in new york; York")] == ["BANK", "New York", "York"]
