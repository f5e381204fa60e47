"""Glossaries: source terms and the target terms they must become, and which terms a sentence holds.

The matching rule (docs/service.md, "Glossaries"):
- terms and sentences are compared in NFC, each character case-folded alone (`str.casefold`, or
  `str.lower` where folding would change its length: "ß" stays one character), so that offsets in the
  folded sentence are offsets in the sentence;
- a term occurs only as whole words: the characters just before and after it are not word characters
  (letters, digits, marks, "_"), except beside a character of a script written without spaces between
  words (Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar), where every position is a boundary;
- where occurrences overlap, the earliest wins, and of those starting there the longest;
- several entries with one source term are alternatives: the output must hold one of their targets.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from service.domain.errors import InvalidInput
from service.domain.text import shown

MAX_TERM_CHARS = 256  # longest source or target term
MAX_ALTERNATIVES = 16  # target forms of one source term
MAX_REQUEST_TERMS = 256  # source terms a request's own glossary may hold
MAX_MODEL_TERMS = 100_000  # source terms of a model's glossary file
NO_SPACE_SCRIPTS = (  # code point ranges of scripts written without spaces between words
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3400, 0x4DBF),  # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0x20000, 0x3FFFF),  # CJK Unified Ideographs Extensions B..
)


def fold(text: str) -> str:
    """NFC text with each character case-folded alone, its length kept."""
    out = []
    for c in unicodedata.normalize("NFC", text):
        f = c.casefold()
        out.append(f if len(f) == 1 else c.lower() if len(c.lower()) == 1 else c)
    return "".join(out)


def _word(c: str) -> bool:
    """A letter, digit, mark or underscore."""
    return c == "_" or unicodedata.category(c)[0] in "LNM"


def _unspaced(c: str) -> bool:
    """A character of a script written without spaces between words."""
    return any(lo <= ord(c) <= hi for lo, hi in NO_SPACE_SCRIPTS)


def boundary(text: str, i: int) -> bool:
    """Whether a whole word may start or end between text[i - 1] and text[i]."""
    if i <= 0 or i >= len(text):
        return True
    before, after = text[i - 1], text[i]
    return not (_word(before) and _word(after)) or _unspaced(before) or _unspaced(after)


def check_term(term: Any, where: str) -> str:
    """The term as NFC text without surrounding whitespace; InvalidInput naming `where` if it is not a
    non-empty string of at most MAX_TERM_CHARS characters free of control characters."""
    if not isinstance(term, str):
        raise InvalidInput(f"{where}: a term must be a string, got {shown(term)}")
    text = unicodedata.normalize("NFC", term).strip()
    if not text:
        raise InvalidInput(f"{where}: empty term")
    if len(text) > MAX_TERM_CHARS:
        raise InvalidInput(f"{where}: a term of {len(text)} characters (at most {MAX_TERM_CHARS})")
    bad = next((c for c in text if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise InvalidInput(f"{where}: control character U+{ord(bad):04X} in term {shown(text)}")
    return text


@dataclass(frozen=True)
class Term:
    """A source term and the target forms it must become (any one of them)."""

    source: str
    targets: tuple[str, ...]


@dataclass(frozen=True)
class TermMatch:
    """Where a term occurs in a sentence: characters [start, end) of its NFC form."""

    term: Term
    start: int
    end: int


class Glossary:
    """Terms by their folded source; immutable once built."""

    def __init__(self, terms: Iterable[Term] = ()) -> None:
        """Index the terms (a later term with the same folded source replaces an earlier one)."""
        self._terms: dict[str, Term] = {fold(t.source): t for t in terms}
        self._lengths = sorted({len(k) for k in self._terms}, reverse=True)

    @classmethod
    def from_entries(cls, entries: Iterable[tuple[str, Any, Any]], origin: str, max_terms: int) -> Glossary:
        """A glossary of (where, source, target) entries; several targets of one source are alternatives.
        InvalidInput naming `origin`, or the entry's `where`, for a bad term, too many terms or forms."""
        targets: dict[str, list[str]] = {}
        sources: dict[str, str] = {}
        for where, source, target in entries:
            src, tgt = check_term(source, f"{where} (source)"), check_term(target, f"{where} (target)")
            key = fold(src)
            sources.setdefault(key, src)
            forms = targets.setdefault(key, [])
            if len(targets) > max_terms:
                raise InvalidInput(f"{origin}: more than {max_terms} source terms")
            if tgt not in forms:
                forms.append(tgt)
            if len(forms) > MAX_ALTERNATIVES:
                raise InvalidInput(f"{where}: more than {MAX_ALTERNATIVES} target forms of {shown(src)}")
        return cls(Term(sources[k], tuple(v)) for k, v in targets.items())

    @classmethod
    def from_request(cls, value: Any, origin: str = "glossary") -> Glossary:
        """A request's glossary: {source: target or [targets]} or [[source, target or [targets]], ...];
        InvalidInput naming the entry for a bad term, a source without targets, too many terms or forms."""
        if isinstance(value, Mapping):
            items = [(f"{origin}[{shown(s, 40)}]", s, ts) for s, ts in value.items()]
        elif isinstance(value, list | tuple) and all(isinstance(p, list | tuple) and len(p) == 2
                                                     for p in value):
            items = [(f"{origin}[{i}]", *p) for i, p in enumerate(value)]
        else:
            raise InvalidInput(f"{origin} must be an object of source term -> target term(s) or a list of "
                               f"[source, target] pairs, got {shown(value)}")
        if len(items) > MAX_REQUEST_TERMS * MAX_ALTERNATIVES:
            raise InvalidInput(f"{origin}: {len(items)} entries; at most {MAX_REQUEST_TERMS} source terms")
        pairs = []
        for where, source, targets in items:
            many = targets if isinstance(targets, list | tuple) else [targets]
            if not many:
                raise InvalidInput(f"{where}: no target term for {shown(source, 40)}")
            if len(many) > MAX_ALTERNATIVES:
                raise InvalidInput(f"{where}: more than {MAX_ALTERNATIVES} target forms of "
                                   f"{shown(source, 40)}")
            pairs += [(where, source, t) for t in many]
        return cls.from_entries(pairs, origin, MAX_REQUEST_TERMS)

    def __len__(self) -> int:
        return len(self._terms)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Glossary) and self.terms() == other.terms()

    def __hash__(self) -> int:
        return hash(self.terms())

    def terms(self) -> tuple[Term, ...]:
        """Every term, in the order first given."""
        return tuple(self._terms.values())

    def __bool__(self) -> bool:
        return bool(self._terms)

    def over(self, base: Glossary) -> Glossary:
        """This glossary's terms over `base`'s: a source term in both takes this one's targets (either one
        itself when the other is empty; a model's large glossary is not re-indexed per request)."""
        if not self._terms or not base._terms:
            return self if self._terms else base
        merged = Glossary()
        merged._terms = {**base._terms, **self._terms}
        merged._lengths = sorted({*base._lengths, *self._lengths}, reverse=True)
        return merged

    def matches(self, sentence: str) -> list[TermMatch]:
        """The terms that occur in the sentence by the matching rule, in sentence order, none overlapping."""
        if not self._terms:
            return []
        text = fold(sentence)
        found, i = [], 0
        while i < len(text):
            hit = next((n for n in self._lengths if i + n <= len(text) and text[i : i + n] in self._terms
                        and boundary(text, i + n)), None) if boundary(text, i) else None
            if hit is None:
                i += 1
                continue
            found.append(TermMatch(self._terms[text[i : i + hit]], i, i + hit))
            i += hit
        return found

    def terms_in(self, sentence: str) -> list[Term]:
        """The distinct terms that occur in the sentence, in sentence order (the ones it applies)."""
        seen: dict[str, Term] = {}
        for m in self.matches(sentence):
            seen.setdefault(fold(m.term.source), m.term)
        return list(seen.values())

    def required(self, sentence: str) -> list[tuple[str, ...]]:
        """The target forms the translation of `sentence` must hold, one tuple of alternatives per
        distinct source term found (in sentence order)."""
        return [t.targets for t in self.terms_in(sentence)]
