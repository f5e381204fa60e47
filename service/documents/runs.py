"""Runs (the inline content of one block: text, untranslated atoms, inline tags) cut into sentence segments,
and the document that puts the outputs back in their place.

Roles: a format builds a `Laid` document from literal markup and `Run`s; `Laid.add` cuts a run into
sentences (segmentation.sentences), turns the atoms and tags inside a sentence into marks and keeps
everything else literally. Contract: with identity outputs, `Laid.render` gives back, for every run, the
sources of its pieces in order (for text: `source_of` its surface; whitespace collapsed where `normalise`).
Rules (docs/documents.md, "Formats"): a segment never splits an atom, and a tag pair crossing a sentence
boundary joins the sentences it touches unless it covers them whole (then it stays outside, literally); a
segment with no letter or digit is not sent but kept literally; an atom takes the whitespace after it
(else before it) along, so "Hello {name}, welcome" reads "Hello, welcome".
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from service.documents.marks import segment_of
from service.documents.segmentation import sentences
from service.documents.segments import Segment, Translated, place


@dataclass
class Run:
    """The inline content of one block, in order: pieces of text (a surface range), atoms (kept as their
    source; their surface, possibly empty, only guides segmentation) and tags (open/close pairs)."""

    surface: str = ""
    pieces: list[list] = field(default_factory=list)  # [kind, start, end, source, pair]; kind in "taoc"
    _stack: list[int] = field(default_factory=list)
    _pairs: int = 0

    def text(self, surface: str) -> None:
        """Text the model reads."""
        if surface:
            self.pieces.append(["t", len(self.surface), len(self.surface) + len(surface), "", -1])
            self.surface += surface

    def atom(self, source: str, surface: str = "") -> None:
        """Something kept as it is (`source`), read as `surface` by the sentence segmenter only."""
        self.pieces.append(["a", len(self.surface), len(self.surface) + len(surface), source, -1])
        self.surface += surface

    def open(self, source: str) -> None:
        """An opening tag; the next unmatched `close` ends its pair."""
        self._stack.append(self._pairs)
        self.pieces.append(["o", len(self.surface), len(self.surface), source, self._pairs])
        self._pairs += 1

    def close(self, source: str) -> None:
        """The closing tag of the last open pair."""
        self.pieces.append(["c", len(self.surface), len(self.surface), source, self._stack.pop()])


class Laid:
    """A document as literal strings and segments; `render` puts one output in each segment's place."""

    def __init__(self, escape: Callable[[str], str] = str) -> None:
        self.segments: list[Segment] = []
        self._items: list[str | tuple[int, tuple[str, ...]]] = []
        self._slots: list[int] = []  # the item position of each segment (made on first use)
        self._escape = escape

    def literal(self, text: str) -> None:
        """Markup kept as it is."""
        if text:
            self._items.append(text)

    def render(self, outputs: Sequence[Translated]) -> str:
        """The document with outputs[i] in the place of segments[i]."""
        if len(outputs) != len(self.segments):
            raise ValueError(f"{len(outputs)} outputs for {len(self.segments)} segments")
        return "".join([*(self.part(i, output) for i, output in enumerate(outputs)), self.tail()])

    def part(self, index: int, output: Translated) -> str:
        """The stretch of the document that ends with segments[index] in its place: the literals after the
        segment before it, then `output` placed. The parts in order, then `tail`, are `render`'s text."""
        at = self._slot(index)
        begin = self._slot(index - 1) + 1 if index > 0 else 0
        literals = "".join(item for item in self._items[begin:at] if isinstance(item, str))
        _, breaks = self._items[at]
        return literals + place(self.segments[index], output, self._writer(breaks))

    def tail(self) -> str:
        """The literals after the last segment (the whole document when it has none)."""
        begin = self._slot(len(self.segments) - 1) + 1 if self.segments else 0
        return "".join(item for item in self._items[begin:] if isinstance(item, str))

    def _slot(self, index: int) -> int:
        """The position of segments[index] among the items."""
        if not 0 <= index < len(self.segments):
            raise IndexError(f"segment {index} of {len(self.segments)}")
        if len(self._slots) != len(self.segments):
            self._slots = [k for k, item in enumerate(self._items) if not isinstance(item, str)]
        return self._slots[index]

    def _writer(self, breaks: tuple[str, ...]) -> Callable[[str], str]:
        """The escape of a segment's output text, each line break in it replaced by breaks[k] in turn (the
        last one again when the output has more)."""
        if not breaks:
            return self._escape
        count = [0]

        def write(text: str) -> str:
            lines = self._escape(text).split("\n")
            out = [lines[0]]
            for line in lines[1:]:
                out.append(breaks[min(count[0], len(breaks) - 1)] + line)
                count[0] += 1
            return "".join(out)

        return write

    def add(
        self,
        run: Run,
        language: str | None,
        source_of: Callable[[int, int], str] | None = None,
        normalise: bool = False,
    ) -> None:
        """Cut `run` into segments and literal pieces; `source_of(start, end)`: the literal form of
        run.surface[start:end] (a range of text pieces that follow each other), by default its escape."""
        surface = run.surface
        source = source_of or (lambda a, b: self._escape(surface[a:b]))
        if surface.isspace() or not surface:
            for piece in run.pieces:
                self.literal(source(piece[1], piece[2]) if piece[0] == "t" else piece[3])
            return
        probe = re.sub(r"[\n\r\f]", " ", surface) if normalise else surface
        spans = _joined(sentences(probe, language), run.pieces)
        starts = [s for s, _ in spans]
        pieces = _split(run.pieces, starts + [e for _, e in spans])
        pairs = _pair_ranges(run.pieces)
        home = [_home(p, spans, starts, pairs) for p in pieces]
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for i, k in enumerate(home):
            if k is not None:
                first.setdefault(k, i)
                last[k] = i
        i = 0
        while i < len(pieces):
            k = home[i]
            if k is None:
                self._literal(pieces[i], source)
                i += 1
                continue
            group = pieces[first[k] : last[k] + 1]
            segment, breaks = segment_of(group, surface, pairs, source, self._escape if normalise else None)
            if any(ch.isalnum() for ch in segment.text):
                self._items.append((len(self.segments), breaks))
                self.segments.append(segment)
            else:
                for piece in group:
                    self._literal(piece, source)
            i = last[k] + 1

    def _literal(self, piece: list, source: Callable[[int, int], str]) -> None:
        self.literal(source(piece[1], piece[2]) if piece[0] == "t" else piece[3])


def _joined(spans: list[tuple[int, int]], pieces: list[list]) -> list[tuple[int, int]]:
    """The sentence spans joined so that no atom is split and no tag pair crosses a boundary (a pair
    that covers whole sentences may); an atom reaching out of its sentence widens it."""
    opened: dict[int, int] = {}
    ranges = []
    for kind, start, end, _, pair in pieces:
        if kind == "a" and end > start:
            ranges.append((start, end, True))
        elif kind == "o":
            opened[pair] = start
        elif kind == "c" and start > opened[pair]:
            ranges.append((opened[pair], start, False))
    spans = list(spans)
    changed = True
    while changed:
        changed = False
        ends = [e for _, e in spans]
        starts = [s for s, _ in spans]
        for a, b, atom in ranges:
            lo, hi = bisect_right(ends, a), bisect_left(starts, b) - 1
            if lo > hi:
                continue
            s, e = spans[lo][0], spans[hi][1]
            if atom and (a < s or b > e):
                s, e = min(s, a), max(e, b)
            elif lo == hi or (not atom and a <= s and b >= e):
                continue
            merged = spans[:lo] + [(s, e)] + spans[hi + 1 :]
            spans = []
            for span in merged:  # a widened span may now overlap a neighbour
                if spans and span[0] < spans[-1][1]:
                    spans[-1] = (spans[-1][0], max(spans[-1][1], span[1]))
                else:
                    spans.append(span)
            changed = True
            break
    return spans


def _split(pieces: list[list], cuts: list[int]) -> list[list]:
    """The pieces with every text piece cut at the given surface offsets."""
    cuts = sorted(set(cuts))
    out = []
    for piece in pieces:
        kind, start, end = piece[0], piece[1], piece[2]
        if kind != "t":
            out.append(piece)
            continue
        at = start
        for cut in cuts[bisect_right(cuts, start) : bisect_left(cuts, end)]:
            out.append(["t", at, cut, "", -1])
            at = cut
        out.append(["t", at, end, "", -1])
    return out


def _home(piece: list, spans: list[tuple[int, int]], starts: list[int], pairs: dict) -> int | None:
    """The index of the span a piece belongs to, None for a literal one (between sentences, or a tag pair
    that covers its sentences whole)."""
    kind, start, end = piece[0], piece[1], piece[2]
    k = bisect_right(starts, start) - 1
    inside = k >= 0 and start < spans[k][1]
    if kind == "t" or (kind == "a" and end > start):
        if kind == "a" and not inside and k + 1 < len(spans) and spans[k + 1][0] < end:
            return k + 1
        return k if inside else None
    if kind == "a":
        return k if inside and start > spans[k][0] else None
    a, b = pairs[piece[4]]
    if a == b:
        return k if inside and start > spans[k][0] else None
    lo = bisect_right([e for _, e in spans], a)
    hi = bisect_left(starts, b) - 1
    if lo > hi or (a <= spans[lo][0] and b >= spans[hi][1]):
        return None
    return lo


def _pair_ranges(pieces: list[list]) -> dict[int, tuple[int, int]]:
    """The surface range (open, close) of each tag pair."""
    opened: dict[int, int] = {}
    ranges = {}
    for kind, start, _, _, pair in pieces:
        if kind == "o":
            opened[pair] = start
        elif kind == "c":
            ranges[pair] = (opened[pair], start)
    return ranges
