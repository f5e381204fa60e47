"""Markdown as segments, at the source level: markdown-it-py (CommonMark, with GFM tables and strikethrough)
finds the blocks (token .map line ranges) and the inline syntax, and each inline token's text is located in
the source, so that everything outside the segments is kept byte for byte.

Roles and rules (docs/documents.md, "Formats"): paragraphs, headings, table cells (each inline token) bound
sentences; emphasis, strong, strikethrough and link text become covering marks (`*`, `**`, `~~`, `[` and
`](destination "title")` go back around the words they cover); code spans, autolinks, images, inline HTML
and placeholders become atoms; code blocks, HTML blocks, link reference definitions and all block syntax
stay as they are. The model reads the source text (backslash escapes included); a line break inside a
sentence stays in Segment.text as "\\n" and brings back the line's prefix ("> ", indentation) in the output.
Contract: identity outputs give back the input exactly. An inline token whose source cannot be matched to
markdown-it's reading (tabs expanded in a prefix, for one) is kept as it is, untranslated.
"""

from __future__ import annotations

import html
import re
from bisect import bisect_right
from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.helpers import parseLinkDestination, parseLinkTitle
from markdown_it.token import Token

from service.documents import placeholders
from service.documents.runs import Laid, Run

_MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)?")
_BREAK = re.compile(r"[ \t]*\\?\n[ \t]*")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{0,31});")
_PUNCT = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_LABEL = re.compile(r"\[(?:\\.|[^\[\]\\])*\]")
_OPENS = {"em_open", "strong_open", "s_open"}
_CLOSES = {"em_close", "strong_close", "s_close"}


class _Mismatch(Exception):
    """The source does not read as markdown-it read it."""


def parse(text: str, language: str | None, protect: Sequence[re.Pattern[str]] = ()) -> Laid:
    """The segments of a Markdown document and the document that renders them back."""
    laid = Laid()
    lines = [
        (m.start(), m.end(), m.group().rstrip("\r\n")) for m in _LINE.finditer(text) if m.end() > m.start()
    ]
    at = 0
    for token in _MD.parse(text):
        if token.type != "inline" or token.map is None or not token.children or not token.content:
            continue
        try:
            block = _Block(text, lines, token, at, protect)
            block.walk(token.children)
        except (_Mismatch, IndexError, ValueError):
            continue
        start, end = block.file(0), block.file(len(token.content))
        laid.literal(text[at:start])
        laid.add(block.run, language, block.source_of)
        at = end
    laid.literal(text[at:])
    return laid


class _Block:
    """One inline token: its content located line by line in the file, and the run read from it."""

    def __init__(
        self,
        text: str,
        lines: list[tuple[int, int, str]],
        token: Token,
        at: int,
        protect: Sequence[re.Pattern[str]],
    ) -> None:
        self.text = text
        self.content = token.content
        self.protect = protect
        self.run = Run()
        self.cur = 0
        self.line_starts: list[int] = []  # content offset of each content line
        self.file_starts: list[int] = []  # its file offset
        self.pieces: list[tuple[int, int]] = []  # (surface start, content start) of each text piece
        offset = 0
        for j, line in enumerate(self.content.split("\n")):
            start, _, whole = lines[token.map[0] + j]
            col = whole.find(line, max(0, at - start) if j == 0 else 0)
            if col < 0:
                raise _Mismatch
            self.line_starts.append(offset)
            self.file_starts.append(start + col)
            offset += len(line) + 1

    def file(self, offset: int) -> int:
        """The file offset of a content offset."""
        j = bisect_right(self.line_starts, offset) - 1
        return self.file_starts[j] + offset - self.line_starts[j]

    def slice(self, start: int, end: int) -> str:
        """The file text of a content range."""
        return self.text[self.file(start) : self.file(end)]

    def source_of(self, start: int, end: int) -> str:
        """The file text of a surface range of text pieces that follow each other."""
        surface = [s for s, _ in self.pieces]
        first = self.pieces[bisect_right(surface, start) - 1]
        last = self.pieces[bisect_right(surface, max(start, end - 1)) - 1]
        return self.slice(first[1] + start - first[0], last[1] + end - last[0])

    def add_text(self, end: int) -> None:
        """Content [cur, end) as text the model reads, placeholders taken out."""
        for stretch, protected in placeholders.split(self.content[self.cur : end], self.protect):
            if protected:
                self.run.atom(self.slice(self.cur, self.cur + len(stretch)), stretch)
            else:
                self.pieces.append((len(self.run.surface), self.cur))
                self.run.text(stretch)
            self.cur += len(stretch)

    def expect(self, markup: str) -> int:
        """The end of `markup`, which must come next."""
        if not markup or not self.content.startswith(markup, self.cur):
            raise _Mismatch
        return self.cur + len(markup)

    def walk(self, children: list[Token]) -> None:
        i = 0
        content = self.content
        while i < len(children):
            token = children[i]
            kind = token.type
            if kind == "text":
                self.add_text(_decoded_end(content, self.cur, token.content))
            elif kind == "text_special":
                self.add_text(self.expect(token.markup))
            elif kind in ("softbreak", "hardbreak"):
                m = _BREAK.match(content, self.cur)
                if m is None:
                    raise _Mismatch
                self.add_text(m.end())
            elif kind in _OPENS or kind in _CLOSES:
                end = self.expect(token.markup)
                (self.run.open if kind in _OPENS else self.run.close)(self.slice(self.cur, end))
                self.cur = end
            elif kind == "code_inline":
                m = re.compile(f"(?<!`){re.escape(token.markup)}(?!`)").search(
                    content, self.expect(token.markup)
                )
                if m is None:
                    raise _Mismatch
                self.run.atom(self.slice(self.cur, m.end()), token.content)
                self.cur = m.end()
            elif kind == "link_open" and token.markup == "autolink":
                end = content.index(">", self.expect("<")) + 1
                self.run.atom(self.slice(self.cur, end), content[self.cur + 1 : end - 1])
                self.cur = end
                while children[i].type != "link_close":
                    i += 1
            elif kind == "link_open":
                end = self.expect("[")
                self.run.open(self.slice(self.cur, end))
                self.cur = end
            elif kind == "link_close":
                end = _tail(content, self.expect("]"))
                self.run.close(self.slice(self.cur, end))
                self.cur = end
            elif kind == "image":
                m = _LABEL.match(content, self.expect("![") - 1)
                if m is None:
                    raise _Mismatch
                end = _tail(content, m.end())
                self.run.atom(self.slice(self.cur, end), token.content)
                self.cur = end
            elif kind == "html_inline":
                end = self.expect(token.content)
                self.run.atom(self.slice(self.cur, end))
                self.cur = end
            else:
                raise _Mismatch
            i += 1
        if self.cur != len(content):
            raise _Mismatch


def _decoded_end(content: str, at: int, expected: str) -> int:
    """The end of the source at `at` that reads as `expected` (backslash escapes and entities decoded)."""
    j = 0
    while j < len(expected):
        ch = content[at] if at < len(content) else ""
        if ch == "\\" and content[at + 1 : at + 2] == expected[j] and expected[j] in _PUNCT:
            at, j = at + 2, j + 1
        elif (
            ch == "&"
            and (m := _ENTITY.match(content, at))
            and expected.startswith(html.unescape(m.group()), j)
        ):
            at, j = m.end(), j + len(html.unescape(m.group()))
        elif ch == expected[j]:
            at, j = at + 1, j + 1
        else:
            raise _Mismatch
    return at


def _tail(content: str, at: int) -> int:
    """The end of a link's or image's destination part after its "]": (destination "title"), [label] or
    nothing (a shortcut reference)."""
    if content.startswith("(", at):
        p = _skip_space(content, at + 1)
        if content.startswith(")", p):
            return p + 1
        dest = parseLinkDestination(content, p, len(content))
        if dest.ok:
            p = _skip_space(content, dest.pos)
            title = parseLinkTitle(content, p, len(content))
            if title.ok:
                p = _skip_space(content, title.pos)
            if content.startswith(")", p):
                return p + 1
    if (m := _LABEL.match(content, at)) is not None:
        return m.end()
    return at


def _skip_space(content: str, at: int) -> int:
    while at < len(content) and content[at] in " \t\n":
        at += 1
    return at
