"""The languages of a many-to-many model, and a request's source / target language resolved to ids.

A model of one language pair has none (a request naming a language is refused). A many-to-many model (M2M100,
NLLB) has a code -> token id table: with `source_prefix` a source starts with its language's id (the request
must name source_language), with `forced_target` the first generated token is the target language's id (the
request must name target_language).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field

from service.domain.detection import AUTO
from service.domain.errors import InvalidInput

SHOWN_CODES = 5  # known codes an error message suggests
MAX_CODE_CHARS = 40  # longest client-supplied code quoted in a message


@dataclass(frozen=True)
class Languages:
    """A model's language codes (code -> token id) and how a request's languages are used."""

    codes: Mapping[str, int] = field(default_factory=dict)
    source_prefix: bool = False
    forced_target: bool = False
    forced_first: int | None = None  # the model's own forced first token (BART's forced_bos_token_id)

    @property
    def names(self) -> list[str]:
        """The codes, sorted."""
        return sorted(self.codes)

    def example(self) -> tuple[str | None, str | None]:
        """A valid (source_language, target_language) pair: the first codes, or None where none is needed."""
        first = self.names[:1]
        if not first:
            return None, None
        last = self.names[-1]
        return (first[0] if self.source_prefix else None), (last if self.forced_target else None)

    def resolve(self, source: str | None, target: str | None) -> tuple[tuple[int, ...], int | None]:
        """(ids before a source's pieces, the id forced as the first generated token: the target language's,
        else the model's own forced_first) of a request's languages (None: not given); InvalidInput for a
        language the model does not take or needs."""
        for name, code in (("source_language", source), ("target_language", target)):
            if code is not None and not isinstance(code, str):
                raise InvalidInput(f"{name} must be a language code (a string), got {type(code).__name__}")
            if name == "source_language" and code == AUTO and self.codes:  # translations detect it first
                raise InvalidInput("source_language auto is detected only for a translation's texts: name "
                                   f"the language here (e.g. {', '.join(self.names[:SHOWN_CODES])})")
            if code is not None and not self.codes:
                raise InvalidInput(f"{name} {_quoted(code)} given, but this model translates one language "
                                   "pair: it takes no source_language or target_language")
            if code is not None and code not in self.codes:
                raise InvalidInput(f"unknown {name} {_quoted(code)}; this model knows {len(self.codes)} "
                                   f"languages, e.g. {', '.join(self._suggested(code))}")
        if self.source_prefix and source is None:
            raise InvalidInput("this model translates between languages: set source_language, the language "
                               f"of the texts (e.g. {', '.join(self.names[:SHOWN_CODES])})")
        if self.forced_target and target is None:
            raise InvalidInput("this model translates between languages: set target_language, the language "
                               f"to translate into (e.g. {', '.join(self.names[:SHOWN_CODES])})")
        prefix = (self.codes[source],) if self.source_prefix and source is not None else ()
        forced = self.codes[target] if self.forced_target and target is not None else self.forced_first
        return prefix, forced

    def _suggested(self, code: str) -> list[str]:
        """Known codes close to `code`, then the first ones, SHOWN_CODES at most."""
        close = difflib.get_close_matches(code[:MAX_CODE_CHARS], self.names, n=SHOWN_CODES, cutoff=0.6)
        return (close + [c for c in self.names if c not in close])[:SHOWN_CODES]


def _quoted(code: str) -> str:
    """repr() of a client-supplied code, cut to MAX_CODE_CHARS characters."""
    text = repr(code)
    return text if len(text) <= MAX_CODE_CHARS else text[: MAX_CODE_CHARS - 3] + "..."
