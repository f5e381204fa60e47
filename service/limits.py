"""Per-text limits the server enforces before any model work: source and output tokens.

The model's own limits (the bundle's max_len) cap both; `--max-source-tokens` and
`--max-output-tokens` may lower them. A text far longer in characters than any text of
max_source_tokens tokens can be is refused before it is tokenized, so that a huge message
costs the event loop nothing: a byte-level BPE token covers at most `longest_token` bytes, and a
character is at least one byte, so a text of C characters has at least C / longest_token tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.search import DecodeOptions, InvalidInput

CHAR_SLACK = 2  # normalizers may shrink a text a little: refuse unseen only texts twice over the bound


@dataclass(frozen=True)
class RequestLimits:
    """Most source tokens (incl. eos) and output tokens per text, and the character bound they imply."""

    max_source_tokens: int
    max_output_tokens: int
    max_text_chars: int

    @classmethod
    def of(cls, runner: Any, max_source_tokens: int = 0, max_output_tokens: int = 0) -> RequestLimits:
        """The limits of a runner's model, lowered by the given values (0: the model's own)."""
        source = min(runner.max_len, max_source_tokens or runner.max_len)
        output = min(runner.max_len - 1, max_output_tokens or runner.max_len - 1)
        longest = max((len(token) for token in runner.tokenizer.get_vocab()), default=1)
        return cls(source, output, source * max(1, longest) * CHAR_SLACK)

    def check_texts(self, texts: Sequence[Any]) -> None:
        """InvalidInput for a text too long in characters to fit max_source_tokens (before tokenizing)."""
        for i, text in enumerate(texts):
            if isinstance(text, str) and len(text) > self.max_text_chars:
                raise InvalidInput(f"text {i} is {len(text)} characters long: far over the limit of "
                                   f"{self.max_source_tokens} tokens")

    def check_sources(self, sources: Sequence[Sequence[int]]) -> None:
        """InvalidInput for a tokenized text (ids incl. eos) over max_source_tokens."""
        for i, ids in enumerate(sources):
            if len(ids) > self.max_source_tokens:
                raise InvalidInput(f"text {i} is {len(ids)} tokens long (incl. eos); this server accepts at "
                                   f"most {self.max_source_tokens} (--max-source-tokens)")

    def outputs(self, asked: DecodeOptions, resolved: DecodeOptions) -> DecodeOptions:
        """Resolved options within max_output_tokens: the default shrinks to it, an explicit larger
        value is InvalidInput."""
        if resolved.max_new_tokens <= self.max_output_tokens:
            return resolved
        if asked.max_new_tokens is not None:
            raise InvalidInput(f"max_output_tokens {asked.max_new_tokens} exceeds this server's limit of "
                               f"{self.max_output_tokens} (--max-output-tokens)")
        return dataclasses.replace(resolved, max_new_tokens=self.max_output_tokens)
