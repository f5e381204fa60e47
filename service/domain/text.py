"""How a client-supplied value is quoted in an error message."""

from __future__ import annotations

from typing import Any

SHOWN_CHARS = 80  # longest echo of a client-supplied value in an error message


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """repr() of a client-supplied value cut to `limit` characters; a huge int by its size (repr() refuses
    ints of over 4300 digits), a value nested too deeply for repr() by its type."""
    if isinstance(value, int) and value.bit_length() > 4 * limit:
        return f"a {value.bit_length()}-bit integer"
    try:
        text = repr(value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deeply to show"
    return text if len(text) <= limit else text[: limit - 3] + "..."
