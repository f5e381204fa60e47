"""Required phrases: the target phrases a request's output must hold, as token ids (`ConstraintSet`), and
how a request's given phrases become one.

A request lists phrases; each is a text, a list of token ids, or a list of forms (texts and id lists), any
one of which satisfies it (a disjunction: inflections, spellings). A text is tokenized by the model's target
tokenizer as a target prefix is, standalone (a sentence's first word), and again after a space (the same
word inside a sentence); where the two differ (a byte-level BPE's leading space) both are forms of the
phrase. Forms are deduplicated, each non-empty and at most MAX_PHRASE_TOKENS long. A glossary may build a
ConstraintSet per sentence the same way (phrases as forms of target ids): decoding reads nothing else.

Phrases are numbered as given; an answer names the unmet ones by that number (`required_phrases[i]`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from service.domain.errors import InvalidInput
from service.domain.text import shown

MAX_REQUIRED = 32  # most required phrases per request
MAX_FORMS = 16  # most forms (alternatives) per phrase
MAX_PHRASE_TOKENS = 64  # longest form in tokens
NAME = "required_phrases"

Phrase = tuple[int, ...]
FormsOf = Callable[[str, Any], list[Phrase]]  # (name, a text or ids) -> its checked forms as ids


@dataclass(frozen=True)
class Constraint:
    """One required phrase: any one of its forms (token-id sequences, each non-empty) must appear."""

    forms: tuple[Phrase, ...]

    @property
    def shortest(self) -> int:
        """Tokens of its shortest form: the fewest it takes to place the phrase."""
        return min(len(f) for f in self.forms)


@dataclass(frozen=True)
class ConstraintSet:
    """A request's required phrases, in the order given; empty: unconstrained."""

    constraints: tuple[Constraint, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.constraints)

    def __len__(self) -> int:
        return len(self.constraints)

    @property
    def min_tokens(self) -> int:
        """Tokens it takes at least to place every phrase (no two overlapping)."""
        return sum(c.shortest for c in self.constraints)

    @classmethod
    def of(cls, phrases: Sequence[Sequence[Phrase]]) -> ConstraintSet:
        """A set of phrases given as their forms' ids (a glossary's, or a test's)."""
        return cls(tuple(Constraint(tuple(tuple(int(t) for t in f) for f in forms)) for forms in phrases))

    def without(self, forbidden: Sequence[Phrase], name: str = "") -> ConstraintSet:
        """Each phrase less the forms that hold a forbidden sequence (they could never be generated);
        InvalidInput naming the phrase (`name`, else required_phrases[i]) when one has no form left."""
        out = []
        for i, c in enumerate(self.constraints):
            kept = tuple(f for f in c.forms if not any(_holds(f, bad) for bad in forbidden))
            if not kept:
                raise InvalidInput(f"{name or f'{NAME}[{i}]'} holds a sequence of suppress_sequences: it "
                                   "cannot be both required and suppressed")
            out.append(Constraint(kept))
        return ConstraintSet(tuple(out))


def _holds(form: Phrase, seq: Phrase) -> bool:
    """Whether `seq` appears in `form` as a contiguous run."""
    n = len(seq)
    return any(form[i : i + n] == seq for i in range(len(form) - n + 1))


def check_text(name: str, text: str) -> None:
    """InvalidInput for a phrase text holding a control character (a tokenizer would drop or mangle it)."""
    bad = next((ch for ch in text if unicodedata.category(ch) == "Cc"), None)
    if bad is not None:
        raise InvalidInput(f"{name} holds the control character U+{ord(bad):04X}")


def required(given: Any, forms_of: FormsOf) -> ConstraintSet:
    """The ConstraintSet of a request's required_phrases (a list of texts, id lists and lists of forms);
    InvalidInput naming the first bad item."""
    if isinstance(given, str | bytes) or not isinstance(given, Sequence):
        raise InvalidInput(f"{NAME} must be a list of phrases (texts, token-id lists, or lists of forms), "
                           f"got {shown(given)}")
    if len(given) > MAX_REQUIRED:
        raise InvalidInput(f"{NAME} lists {len(given)} phrases; at most {MAX_REQUIRED}")
    out = []
    for i, item in enumerate(given):
        name = f"{NAME}[{i}]"
        alternatives = _alternatives(name, item)
        labels = [name if len(alternatives) == 1 and alternatives[0] is item else f"{name}[{j}]"
                  for j in range(len(alternatives))]
        out.append(constraint(name, list(zip(labels, alternatives, strict=True)), forms_of))
    return ConstraintSet(tuple(out))


def constraint(name: str, alternatives: Sequence[tuple[str, Any]], forms_of: FormsOf,
               most_forms: int = MAX_FORMS) -> Constraint:
    """One phrase of (label, text or ids) alternatives: their forms deduplicated; InvalidInput naming the
    label of an empty one, or `name` for more than `most_forms` forms or a form too long."""
    forms: list[Phrase] = []
    for label, alt in alternatives:
        found = forms_of(label, alt)
        if not found or not all(found):
            raise InvalidInput(f"{label} is empty")
        forms += found
    forms = list(dict.fromkeys(forms))
    if len(forms) > most_forms:
        raise InvalidInput(f"{name} has {len(forms)} forms; at most {most_forms}")
    longest = max(len(f) for f in forms)
    if longest > MAX_PHRASE_TOKENS:
        raise InvalidInput(f"{name} is {longest} tokens long; at most {MAX_PHRASE_TOKENS}")
    return Constraint(tuple(forms))


def _alternatives(name: str, item: Any) -> list[Any]:
    """An item's forms as given: [text], [ids], or the list of forms of a disjunction."""
    if isinstance(item, str):
        check_text(name, item)
        return [item]
    if isinstance(item, bytes) or not isinstance(item, Sequence):
        raise InvalidInput(f"{name} must be a text, a list of token ids or a list of forms, "
                           f"got {shown(item)}")
    if not item:
        raise InvalidInput(f"{name} is empty")
    if all(not isinstance(x, str | bytes) and not isinstance(x, Sequence) for x in item):
        return [item]  # token ids (checked by forms_of)
    for j, x in enumerate(item):
        if isinstance(x, str):
            check_text(f"{name}[{j}]", x)
        elif isinstance(x, bytes) or not isinstance(x, Sequence):
            raise InvalidInput(f"{name}[{j}] must be a text or a list of token ids, got {shown(x)}")
    return list(item)
