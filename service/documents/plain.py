"""Plain text as segments: every sentence of every paragraph (segmentation.sentences), placeholders taken
out as point marks. Contract: everything outside the segments (paragraphs, line breaks, all spacing) is
kept byte for byte, and a segment's text is the sentence as written (its line breaks included), so
identity outputs give back the input exactly."""

from __future__ import annotations

import re
from collections.abc import Sequence

from service.documents import placeholders
from service.documents.runs import Laid, Run


def parse(text: str, language: str | None, protect: Sequence[re.Pattern[str]] = ()) -> Laid:
    """The segments of a plain text and the document that renders them back."""
    laid = Laid()
    run = Run()
    for stretch, protected in placeholders.split(text, protect):
        if protected:
            run.atom(stretch, stretch)
        else:
            run.text(stretch)
    laid.add(run, language)
    return laid
