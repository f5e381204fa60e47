"""Glossary matching (service/domain/glossary.py) against an independent regex oracle, and its refusals."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.domain.errors import InvalidInput
from service.domain.glossary import MAX_ALTERNATIVES, MAX_REQUEST_TERMS, MAX_TERM_CHARS, Glossary

ALPHABET = "abAB éÉ,-"  # letters in two cases, a space, punctuation: where \w and case folding are simple


def oracle(terms: list[str], text: str) -> list[tuple[int, int]]:
    """Leftmost-longest occurrences by Python's re (IGNORECASE), not inside a word: no \\w glued to a
    term's edge where that edge is itself \\w."""
    spans = set()
    for t in terms:
        before = r"(?<!\w)" if re.match(r"\w", t[0]) else ""
        after = r"(?!\w)" if re.match(r"\w", t[-1]) else ""
        for m in re.finditer(rf"{before}(?=({re.escape(t)}){after})", text, re.IGNORECASE):
            spans.add(m.span(1))
    chosen: list[tuple[int, int]] = []
    for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
        if not chosen or start >= chosen[-1][1]:
            chosen.append((start, end))
    return chosen


term = st.text(ALPHABET, min_size=1, max_size=4).filter(lambda t: t.strip() == t and t.strip())


@settings(max_examples=300, deadline=None)
@given(st.lists(term, min_size=1, max_size=5, unique_by=str.casefold), st.data())
def test_matches_are_the_leftmost_longest_whole_word_occurrences(terms: list[str], data) -> None:
    given_terms = st.sampled_from(terms)
    pieces = st.one_of(given_terms, given_terms.map(str.swapcase), st.text(ALPHABET, max_size=2))
    text = "".join(data.draw(st.lists(pieces, max_size=8)))  # the terms, in either case, among other text
    glossary = Glossary.from_request({t: "x" for t in terms})
    assert [(m.start, m.end) for m in glossary.matches(text)] == oracle(terms, text)


def test_whole_words_case_folded_and_longest_first() -> None:
    g = Glossary.from_request({"New York": "Nueva York", "York": "Yorkk", "straße": "Strasse"})
    assert g.required("i love NEW YORK city") == [("Nueva York",)]
    assert g.required("Yorkshire and York") == [("Yorkk",)]
    assert g.required("die STRAßE") == [("Strasse",)]
    assert g.required("Newyork") == []
    longest = Glossary.from_request({"New": "Neu", "New York": "Nueva York"})
    assert longest.required("New York") == [("Nueva York",)]


def test_scripts_without_spaces_match_inside_a_sentence() -> None:
    g = Glossary.from_request({"東京": "Tokyo", "ภาษา": "language"})
    assert [(m.start, m.end) for m in g.matches("我住在東京。")] == [(3, 5)]
    assert g.required("ภาษาไทย") == [("language",)]


def test_alternatives_and_a_requests_terms_over_the_models() -> None:
    model = Glossary.from_request([["bank", "Bank"], ["bank", "Ufer"], ["river", "Fluss"]])
    request = Glossary.from_request({"River": "Strom"})
    assert model.required("the bank of the river") == [("Bank", "Ufer"), ("Fluss",)]
    assert request.over(model).required("the bank of the river") == [("Bank", "Ufer"), ("Strom",)]
    assert model.required("bank, bank") == [("Bank", "Ufer")]  # one constraint per term


@pytest.mark.parametrize(("value", "needle"), [
    ({"": "x"}, "empty term"),
    ({"a": "  "}, "empty term"),
    ({"a\x00b": "x"}, "control character U+0000"),
    ({"a": "b\x1b[31m"}, "control character U+001B"),
    ({"a" * (MAX_TERM_CHARS + 1): "x"}, f"at most {MAX_TERM_CHARS}"),
    ({f"t{i}": "x" for i in range(MAX_REQUEST_TERMS + 1)}, f"more than {MAX_REQUEST_TERMS} source terms"),
    ({"a": [f"x{i}" for i in range(MAX_ALTERNATIVES + 1)]}, f"more than {MAX_ALTERNATIVES} target forms"),
    ({"a": 3}, "must be a string"),
    ("a=b", "must be an object"),
    ([["a", "b", "c"]], "must be an object"),
])
def test_hostile_glossaries_are_refused_naming_the_problem(value, needle: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(needle)):
        Glossary.from_request(value)
