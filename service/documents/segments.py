"""The types of whole-document translation, and the placing of marks in a model's output through its links.

Roles: each format (plain, html, markdown) turns a document into `Segment`s, the sentences the model reads,
each with the `Mark`s of what was taken out of it (inline tags, placeholders); the translator sends
`Segment.text` and hands back one `Translated` per segment; `Document.render` puts them back with `place`.

Contract of `place` (docs/documents.md, "Formats"): every mark's `before` and `after` appear exactly once in
its result, well nested (a mark that contains another in the segment never crosses it in the output), and
with identity links (`identity`) the segment's own text and marks come back in their order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

Span = tuple[int, int]
Link = tuple[Span, Span]


@dataclass(frozen=True)
class Mark:
    """Something of a segment that the model does not read: `before` and `after` go around the words of
    Segment.text[start:end]; a point (start == end, after == "") goes back at that position."""

    start: int
    end: int
    before: str
    after: str = ""


@dataclass(frozen=True)
class Segment:
    """A sentence as the model reads it, with its marks in document order (an outer mark before the marks
    it contains; a point before a mark that opens at its position)."""

    text: str
    marks: tuple[Mark, ...] = ()


@dataclass(frozen=True)
class Translated:
    """The model's output for a segment; per output token ((source start, end), (target start, end)): the
    source characters that token attends to most."""

    text: str
    links: tuple[Link, ...] = ()


class Document(Protocol):
    """A parsed document: its segments, and its text again with one output per segment in their place
    (whole, or in parts: part(0, ...) ... part(n - 1, ...) then tail() spell render's text)."""

    segments: list[Segment]

    def render(self, outputs: Sequence[Translated]) -> str: ...

    def part(self, index: int, output: Translated) -> str: ...

    def tail(self) -> str: ...


def identity(segment: Segment) -> Translated:
    """The output that translates nothing: the segment's text, each character linked to itself."""
    return Translated(segment.text, tuple(((i, i + 1), (i, i + 1)) for i in range(len(segment.text))))


def _same(text: str) -> str:
    return text


def place(segment: Segment, output: Translated, escape: Callable[[str], str] = _same) -> str:
    """`output.text` (each stretch of it passed through `escape`, in order) with the segment's marks placed
    through the links. A covering mark goes around the smallest stretch that holds every output token
    linked into its source range (without the whitespace at its ends unless the source has it there), around
    the whole output if none is; crossings are resolved by shrinking the later mark. A point goes before the
    output token linked to the first source token at or after it, at the end if none is."""
    text = output.text
    n = len(text)
    links = _clean(output.links, n)
    covering: list[tuple[int, int, int]] = []  # (lo, hi, mark index), in placing order
    points: dict[int, list[str]] = {}
    order = sorted(
        range(len(segment.marks)), key=lambda i: (segment.marks[i].start, -segment.marks[i].end, i)
    )
    for i in order:
        mark = segment.marks[i]
        if mark.end <= mark.start:
            at = _point(segment.text, mark.start, links, text)
            points.setdefault(at, []).append(mark.before + mark.after)
            continue
        lo, hi = _laminar(_cover(segment.text, mark, links, text), covering, text)
        covering.append((lo, hi, i))
    opens: dict[int, list[tuple[int, int, int]]] = {}
    closes: dict[int, list[tuple[int, int, int]]] = {}
    for rank, (lo, hi, i) in enumerate(covering):
        if lo == hi:
            points.setdefault(lo, []).append(segment.marks[i].before + segment.marks[i].after)
            continue
        opens.setdefault(lo, []).append((-hi, rank, i))
        closes.setdefault(hi, []).append((-lo, -rank, i))
    pieces: list[str] = []
    at = 0
    for cut in sorted(set(opens) | set(closes) | set(points)):
        if cut > at:
            pieces.append(escape(text[at:cut]))
            at = cut
        pieces += [segment.marks[i].after for _, _, i in sorted(closes.get(cut, ()))]
        pieces += points.get(cut, ())
        pieces += [segment.marks[i].before for _, _, i in sorted(opens.get(cut, ()))]
    if at < n or not pieces:
        pieces.append(escape(text[at:]))
    return "".join(pieces)


def _clean(links: Sequence[Link], n: int) -> list[Link]:
    """The links with target spans clipped to the output; malformed ones dropped."""
    out = []
    for link in links:
        try:
            (ss, se), (ts, te) = link
            ss, se, ts, te = int(ss), int(se), int(ts), int(te)
        except (TypeError, ValueError):
            continue
        ts = max(0, min(ts, n))
        out.append(((ss, se), (ts, max(ts, min(te, n)))))
    return out


def _cover(source: str, mark: Mark, links: list[Link], text: str) -> tuple[int, int]:
    """The target stretch of a covering mark, before it is made to nest with the others."""
    spans = [t for s, t in links if s[0] < mark.end and s[1] > mark.start and t[1] > t[0]]
    lo, hi = (min(t[0] for t in spans), max(t[1] for t in spans)) if spans else (0, len(text))
    if not spans or not source[mark.start : mark.start + 1].isspace():
        while lo < hi and text[lo].isspace():
            lo += 1
    if not spans or not source[mark.end - 1 : mark.end].isspace():
        while hi > lo and text[hi - 1].isspace():
            hi -= 1
    return lo, hi


def _laminar(span: tuple[int, int], placed: list[tuple[int, int, int]], text: str) -> tuple[int, int]:
    """`span` shrunk until it crosses no placed stretch: it keeps the larger of its parts inside and
    outside the one it crosses (inside on a tie), without whitespace at the ends of a part."""
    lo, hi = span
    crossed = True
    while crossed:
        crossed = False
        for plo, phi, _ in placed:
            if lo < phi and plo < hi and not (plo <= lo and hi <= phi) and not (lo <= plo and phi <= hi):
                inside = (max(lo, plo), min(hi, phi))
                outside = (lo, plo) if lo < plo else (phi, hi)
                lo, hi = inside if inside[1] - inside[0] >= outside[1] - outside[0] else outside
                while lo < hi and text[lo].isspace():
                    lo += 1
                while hi > lo and text[hi - 1].isspace():
                    hi -= 1
                crossed = True
    return lo, hi


def _point(source: str, at: int, links: list[Link], text: str) -> int:
    """Where a point mark at source position `at` goes in the output."""
    best: tuple[int, int, int, int] | None = None
    for (ss, _), (ts, te) in links:
        if ss >= at and (best is None or (ss, ts) < best[:2]):
            best = (ss, ts, te, ss)
    if best is None:
        return len(text) if source[at - 1 : at].isspace() else len(text.rstrip())
    _, ts, te, ss = best
    if not source[ss : ss + 1].isspace():
        while ts < te and text[ts].isspace():
            ts += 1
    return ts
