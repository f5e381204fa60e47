"""What both servicers share: the served model name, deadlines, and the checks of request fields."""

from __future__ import annotations

import time

from grpc import aio

from service.domain.errors import InvalidInput
from service.domain.types import DecodeOptions, ModelDefaults

SHOWN_CHARS = 80  # longest echo of a client-supplied value in an error message
MODEL_NAME = "translator"
MODEL_VERSION = "1"


def deadline_of(context: aio.ServicerContext) -> float | None:
    """The call's deadline as an absolute time.monotonic() value, None when the client set none."""
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining


def check_text_count(count: int, max_batch_size: int) -> None:
    """InvalidInput unless 1 <= count <= max_batch_size texts were sent."""
    if count < 1:
        raise InvalidInput("no texts to translate: send at least one text")
    if count > max_batch_size:
        raise InvalidInput(
            f"{count} texts in one request; this server accepts at most {max_batch_size} (max_batch_size)"
        )


def check_max_output_tokens(value: int | None, max_len: int, name: str = "max_output_tokens") -> None:
    """InvalidInput unless value (None = default) is within 1 .. max_len - 1 (the model's limit)."""
    if value is not None and not 1 <= value <= max_len - 1:
        raise InvalidInput(f"{name} must be between 1 and {max_len - 1}, got {value}")


def streams_pieces(options: DecodeOptions, defaults: ModelDefaults) -> bool:
    """Whether a request can stream its pieces as generated: one hypothesis decoded greedily or by
    sampling (beam_size 1, the model's default when unset unless it samples, and no alternatives)."""
    beam = (1 if options.sampling else defaults.beam_size) if options.beam_size is None else options.beam_size
    return beam == 1 and not options.return_alternatives


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """repr() of a client-supplied value for an error message, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
