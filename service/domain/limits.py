"""Per-text limits the server enforces before any model work, and the one place options are resolved.

The model's own limits (the bundle's max_len) cap both; `--max-source-tokens` and `--max-output-tokens` may
lower them. A text far longer in characters than any text of max_source_tokens tokens can be is refused before
it is tokenized, so that a huge message costs the event loop nothing: a byte-level BPE token covers at most
`longest_token` bytes, and a character is at least one byte, so a text of C characters has at least C /
longest_token tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.domain.errors import InvalidInput
from service.domain.glossary import Glossary
from service.domain.languages import Languages
from service.domain.options import (
    DEFAULT_MAX_BEAM,
    DecodeOptions,
    ModelDefaults,
    ResolvedOptions,
    TargetEncoder,
)
from service.domain.tasks import Tasks
from service.domain.text import shown

# a translation's text over the source limit: what to do instead (a plain call is one text, one sequence)
AS_DOCUMENT = ("; to have a long text translated sentence by sentence, send it as a document (parameter "
               "format, the HTTP document route, or translator.v1 TranslateDocument)")
CHAR_SLACK = 2  # normalizers may shrink a text a little: refuse unseen only texts twice over the bound


@dataclass(frozen=True)
class RequestLimits:
    """The model's max_len, the widest beam, most source tokens (incl. eos) and output tokens per
    text, the character bound they imply, the model's languages, request defaults, target vocabulary,
    glossary and tasks."""

    max_len: int
    max_beam: int
    max_source_tokens: int
    max_output_tokens: int
    max_text_chars: int
    languages: Languages = Languages()
    defaults: ModelDefaults = ModelDefaults()
    vocab_size: int = 0  # target ids a request may name (0: unchecked)
    glossary: Glossary = Glossary()  # the model's own terms (its repository's glossary file)
    eos: int | None = None  # the end id, which no required phrase may hold (None: unchecked)
    tasks: Tasks = Tasks()  # the model's task prefixes and default task

    @classmethod
    def of(cls, max_len: int, longest_token: int, max_beam: int = DEFAULT_MAX_BEAM,
           max_source_tokens: int = 0, max_output_tokens: int = 0,
           languages: Languages | None = None, defaults: ModelDefaults | None = None,
           vocab_size: int = 0, eos: int | None = None, tasks: Tasks | None = None) -> RequestLimits:
        """The limits of a model (its max_len, longest vocabulary entry in bytes and languages), lowered
        by the given values (0: the model's own)."""
        source = min(max_len, max_source_tokens or max_len)
        output = min(max_len - 1, max_output_tokens or max_len - 1)
        return cls(max_len, max_beam, source, output, source * max(1, longest_token) * CHAR_SLACK,
                   languages or Languages(), defaults or ModelDefaults(), vocab_size, eos=eos,
                   tasks=tasks or Tasks())

    def check_texts(self, texts: Sequence[Any]) -> None:
        """InvalidInput for a text too long in characters to fit max_source_tokens (before tokenizing)."""
        for i, text in enumerate(texts):
            if isinstance(text, str) and len(text) > self.max_text_chars:
                raise InvalidInput(f"text {i} is {len(text)} characters long: far over the limit of "
                                   f"{self.max_source_tokens} tokens")

    def check_sources(self, sources: Sequence[Sequence[int]], hint: str = "") -> None:
        """InvalidInput for a tokenized text (ids incl. eos) over max_source_tokens; `hint` ends the error."""
        for i, ids in enumerate(sources):
            if len(ids) > self.max_source_tokens:
                raise InvalidInput(f"text {i} is {len(ids)} tokens long (incl. eos); this server accepts at "
                                   f"most {self.max_source_tokens} (--max-source-tokens){hint}")

    def resolve(self, asked: DecodeOptions, encode_target: TargetEncoder | None = None) -> ResolvedOptions:
        """The options a request decodes with, validated once: the model's limits, max_beam, languages, tasks
        and defaults (texts of options through `encode_target`), then max_output_tokens (the default shrinks
        to it, an explicit larger value is InvalidInput)."""
        if not isinstance(asked, DecodeOptions):
            raise InvalidInput(f"options must be DecodeOptions, got {type(asked).__name__}")
        resolved = asked.resolved(self.max_len, self.max_beam, self.languages, self.defaults, self.vocab_size,
                                  encode_target)
        for i, c in enumerate(resolved.required_phrases.constraints):
            if self.eos is not None and any(self.eos in form for form in c.forms):
                raise InvalidInput(f"required_phrases[{i}] holds the end-of-sequence id {self.eos}")
        resolved = dataclasses.replace(resolved, glossary=resolved.glossary.over(self.glossary),
                                       task_prefix=self.tasks.resolve(asked.task))
        if resolved.max_output_tokens <= self.max_output_tokens:
            return resolved
        if asked.max_output_tokens is not None:
            raise InvalidInput(f"max_output_tokens {asked.max_output_tokens} exceeds this server's limit of "
                               f"{self.max_output_tokens} (--max-output-tokens)")
        return dataclasses.replace(resolved, max_output_tokens=self.max_output_tokens)

    def for_text(self, resolved: ResolvedOptions, text: str,
                 encode_target: TargetEncoder | None = None) -> ResolvedOptions:
        """The options one text of a request decodes with: the request's resolved options with the terms of
        its glossary (the request's over the model's) that the text holds as required phrases after its own
        (ResolvedOptions.with_terms); a text holding none decodes exactly as without a glossary."""
        terms = resolved.glossary.terms_in(text) if resolved.glossary and isinstance(text, str) else []
        if not terms:
            return dataclasses.replace(resolved, glossary=Glossary()) if resolved.glossary else resolved
        own = resolved.with_terms(terms, encode_target, self.vocab_size)
        for c, source in zip(own.required_phrases.constraints[len(resolved.required_phrases):],
                             own.glossary_terms, strict=False):
            if self.eos is not None and any(self.eos in form for form in c.forms):
                raise InvalidInput(f"glossary term {shown(source, 40)} holds the end-of-sequence id "
                                   f"{self.eos}")
        return own

