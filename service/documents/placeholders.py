"""Placeholders: the parts of a text that must reach the output unchanged and never reach the model.

Roles: each format passes every stretch of translatable text through `split`, which gives the stretches in
between (for the model) and the placeholders (kept as atoms: point marks of their segment). Found, in one
pass, leftmost first and the longest at a position: printf forms (`%s`, `%d`, `%1$s`, `%.2f`, `%%`,
`%(name)s`), ICU/brace forms (`{name}`, `{0}`, `{count, plural, one {# item} other {# items}}` as one unit,
`{{name}}`, `${name}`), URLs (scheme:// or www.), e-mail addresses, and each regex of the request's
`protect`. Contract: the stretches and the placeholders, joined in order, are the text again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_PRINTF = r"%%|%(?:\d+\$)?[-+0#']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|ll|[hlLqjzt])?[diouxXeEfFgGaAcspn@]"
_PYFORMAT = r"%\([^()\s]{1,64}\)[-+0#]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]"
_URL = r"(?:[a-zA-Z][a-zA-Z0-9+.-]{1,20}://|www\.)[^\s<>\"'`]+"
_EMAIL = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
_BUILTIN = re.compile(f"{_PYFORMAT}|{_PRINTF}|{_URL}|{_EMAIL}")
_TRAILING = ".,;:!?'\""
_BRACE_START = re.compile(r"\$?\{")


def compile_protect(protect: Sequence[str]) -> list[re.Pattern[str]]:
    """The request's protected patterns compiled; ValueError for one that is not a valid regex."""
    patterns = []
    for pattern in protect:
        try:
            patterns.append(re.compile(pattern))
        except (re.error, TypeError) as e:
            raise ValueError(f"protect pattern {pattern!r} is not a regular expression: {e}") from e
    return patterns


def find(text: str, protect: Sequence[re.Pattern[str]] = ()) -> list[tuple[int, int]]:
    """The spans of the placeholders of `text`, in order, not overlapping (leftmost, then longest wins)."""
    found: list[tuple[int, int]] = []
    for m in _BUILTIN.finditer(text):
        found.append((m.start(), _trimmed(text, m.start(), m.end())))
    for m in _BRACE_START.finditer(text):
        end = _brace_end(text, m.end() - 1)
        if end is not None:
            found.append((m.start(), end))
    for pattern in protect:
        found += [(m.start(), m.end()) for m in pattern.finditer(text) if m.end() > m.start()]
    found.sort(key=lambda span: (span[0], -span[1]))
    out: list[tuple[int, int]] = []
    for start, end in found:
        if end > start and (not out or start >= out[-1][1]):
            out.append((start, end))
    return out


def split(text: str, protect: Sequence[re.Pattern[str]] = ()) -> list[tuple[str, bool]]:
    """`text` as (stretch, is_placeholder) pairs, in order; joined, they are the text again."""
    out: list[tuple[str, bool]] = []
    at = 0
    for start, end in find(text, protect):
        if start > at:
            out.append((text[at:start], False))
        out.append((text[start:end], True))
        at = end
    if at < len(text):
        out.append((text[at:], False))
    return out


def _trimmed(text: str, start: int, end: int) -> int:
    """The end of a URL or address without the punctuation after it and without a closing bracket that
    it does not open."""
    while end > start + 1:
        ch = text[end - 1]
        unopened = ch in ")]}" and text.count("([{"[")]}".index(ch)], start, end) < text.count(ch, start, end)
        if ch in _TRAILING or unopened:
            end -= 1
        else:
            break
    return end


def _brace_end(text: str, at: int) -> int | None:
    """The end of the balanced {...} at `at` if its content starts with a name, a number or another brace
    (an ICU or template placeholder), else None."""
    inner = text[at + 1 : at + 2]
    if not (inner.isalnum() or inner in "_{#/" and inner):
        return None
    depth = 0
    for i in range(at, min(len(text), at + 2000)):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif ch in "\n\r" and depth == 1 and "," not in text[at:i]:
            return None
    return None
