"""A sentence's pieces (text, atoms, tags of a runs.Run) turned into a Segment with its marks.

Rules (docs/documents.md, "Formats"): an atom standing as a word of its own takes the whitespace after it
along, else the whitespace before it ("Hello {name}, welcome" reads "Hello, welcome"); one glued to the word
before it takes none ("x{h} px"). Points next to each other become one; an empty tag pair becomes a point;
a point at the inner edge of a tag pair goes into its tag, so that a point at a tag's position lies outside
it (segments.place relies on this to give identity outputs back exactly). With `escape` (HTML), whitespace
runs are collapsed to one space (across tags, not across atoms).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from service.documents.segments import Mark, Segment

_HTML_SPACE = re.compile(r"[ \t\n\r\f]+")
_LEADING = re.compile(r"^\s+")
_TRAILING = re.compile(r"\s+$")


def segment_of(
    group: list[list],
    surface: str,
    pairs: dict[int, tuple[int, int]],
    source: Callable[[int, int], str],
    escape: Callable[[str], str] | None,
) -> tuple[Segment, tuple[str, ...]]:
    """The segment of a sentence's pieces, and what each line break of its text stands for in the
    document; `escape` given: whitespace is collapsed (HTML) and text sources are its escape."""
    tokens: list[list] = []  # ["t", text, start] | ["p", source] | ["o", source] | ["c", source]
    for kind, start, end, src, pair in group:
        if kind == "t" and tokens and tokens[-1][0] == "t" and tokens[-1][2] + len(tokens[-1][1]) == start:
            tokens[-1][1] += surface[start:end]
        elif kind == "t":
            tokens.append(["t", surface[start:end], start])
        elif kind == "a" or pairs[pair][0] == pairs[pair][1]:
            tokens.append(["p", src])
        else:
            tokens.append([kind, src])

    def text_source(token: list, i: int, j: int) -> str:
        if escape is not None:
            return escape(token[1][i:j])
        return source(token[2] + i, token[2] + j)

    if escape is not None:
        space = False
        for token in tokens:
            if token[0] == "t":
                token[1] = _HTML_SPACE.sub(" ", token[1])
                if space and token[1].startswith(" "):
                    token[1] = token[1][1:]
                if token[1]:
                    space = token[1].endswith(" ")
            elif token[0] == "p":  # spaces on both sides of an atom are both kept (one each)
                space = False
    last = ""  # the text before the token: "" at the start of the segment
    for i, token in enumerate(tokens):  # a word-like atom takes the whitespace after it along, else before it
        if token[0] == "t":
            last = (last + token[1])[-1:]
        if token[0] != "p" or (last and not last.isspace()):
            continue  # an atom glued to the word before it ("x{h}", "Size({w})") takes no whitespace
        after = tokens[i + 1] if i + 1 < len(tokens) and tokens[i + 1][0] == "t" else None
        before = tokens[i - 1] if i > 0 and tokens[i - 1][0] == "t" else None
        if after is not None and (m := _LEADING.match(after[1])):
            token[1] += text_source(after, 0, m.end())
            after[1], after[2] = after[1][m.end() :], after[2] + m.end()
        elif before is not None and before[1].strip() and (m := _TRAILING.search(before[1])):
            token[1] = text_source(before, m.start(), len(before[1])) + token[1]
            before[1] = before[1][: m.start()]
            last = before[1][-1:]
    tokens = _folded([t for t in tokens if t[0] != "t" or t[1]])
    text: list[str] = []
    breaks: list[str] = []
    marks: list[Mark | None] = []
    stack: list[tuple[int, int, str]] = []
    at = 0
    for token in tokens:
        if token[0] == "t":
            for i, ch in enumerate(token[1]):
                if ch == "\n":
                    breaks.append(text_source(token, i, i + 1))
            text.append(token[1])
            at += len(token[1])
        elif token[0] == "p":
            marks.append(Mark(at, at, token[1], ""))
        elif token[0] == "o":
            stack.append((len(marks), at, token[1]))
            marks.append(None)
        else:
            index, start, opening = stack.pop()
            marks[index] = (
                Mark(start, at, opening, token[1]) if at > start else Mark(at, at, opening + token[1])
            )
    if all(b == "\n" for b in breaks):
        breaks = []
    return Segment("".join(text), tuple(m for m in marks if m is not None)), tuple(breaks)


def _folded(tokens: list[list]) -> list[list]:
    """The tokens with neighbouring points merged, empty tag pairs turned into points, and points at the
    inner edge of a tag pair moved into its tags (so that a point at a tag's position lies outside it)."""
    changed = True
    while changed:
        changed = False
        out: list[list] = []
        for token in tokens:
            prev = out[-1] if out else None
            if prev is not None and prev[0] == "p" and token[0] == "p":
                prev[1] += token[1]
            elif prev is not None and prev[0] == "o" and token[0] == "c":
                out[-1] = ["p", prev[1] + token[1]]
            elif prev is not None and prev[0] == "o" and token[0] == "p":
                prev[1] += token[1]
            elif (
                prev is not None and prev[0] == "p" and token[0] == "c" and len(out) > 1 and out[-2][0] != "o"
            ):
                out[-1] = ["c", prev[1] + token[1]]
            else:
                out.append(token)
                continue
            changed = True
        tokens = out
    return tokens
