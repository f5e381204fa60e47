"""The entry point of document formats: `parse(text, fmt, language, protect)` gives a document's segments and
the document that renders outputs back (segments.Document). fmt: "text", "html" or "markdown"; protect:
the request's regexes of protected patterns (placeholders). ValueError for another format or a protect
pattern that is not a regex."""

from __future__ import annotations

from collections.abc import Sequence

from service.documents import placeholders, plain
from service.documents.segments import Document

FORMATS = ("text", "html", "markdown")


def parse(text: str, fmt: str, language: str | None, protect: Sequence[str] = ()) -> Document:
    """The parsed document of `text` in format `fmt`."""
    patterns = placeholders.compile_protect(protect)
    if fmt == "text":
        return plain.parse(text, language, patterns)
    if fmt == "html":
        from service.documents import html

        return html.parse(text, language, patterns)
    if fmt == "markdown":
        from service.documents import markdown

        return markdown.parse(text, language, patterns)
    raise ValueError(f"unknown document format {fmt!r}; known: {', '.join(FORMATS)}")
