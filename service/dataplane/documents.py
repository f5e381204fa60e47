"""A whole document in one call: its sentences translated through the model's scheduler and put back in place.

Roles: service/documents/ reads the document (plain text, HTML, Markdown) into segments and renders it back;
this module sends each segment's text to the scheduler, cuts a sentence over the model's source limit at a
clause or word boundary (segmentation.split_long) and joins its pieces' outputs, and turns each result's
cross-attention into the token links that place the segment's marks (tags, placeholders) in its output.

Fairness: a document keeps at most `window` of its texts queued or decoding at once (the model's
max_batch_size), each submitted as its own one-text request as an earlier one finishes; so the requests of
other clients queue behind at most that many of the document's texts, never behind the whole document.
A text that occurs more than once in a document is decoded once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.documents.formats import FORMATS, parse
from service.documents.segmentation import split_long
from service.documents.segments import Document, Link, Segment, Translated
from service.domain.errors import InvalidInput
from service.domain.text import shown
from service.domain.types import DecodeOptions, Result
from service.runtime.model.tokenization import TextTokenizer

SOURCE_SLACK = 2  # ids a source takes besides the text's own: a language prefix and eos


@dataclass(frozen=True)
class DocumentLimits:
    """The largest document a call takes: UTF-8 bytes and sentences (--max-document-bytes, -sentences)."""

    max_bytes: int = 1 << 20
    max_sentences: int = 10_000


@dataclass(frozen=True)
class DocumentAnswer:
    """A translated document: the model that answered it, the text, the segments sent and those cut at the
    model's source limit (their indexes among the segments)."""

    model_name: str
    model_version: str
    text: str
    segments: int
    split: list[int]


@dataclass(frozen=True)
class DocumentStart:
    """The start of a streamed document: the model that answers it and the number of its segments."""

    model_name: str
    model_version: str
    segments: int


@dataclass(frozen=True)
class DocumentPart:
    """The next stretch of a streamed document's translation, final: the parts in order spell the whole
    document. `done`: the segments translated so far; `split`: whether the last of them was cut."""

    text: str
    done: int
    split: bool = False


ONE_OUTPUT = ("n_best", "return_alternatives")  # parameters a document refuses: one translation per sentence
FORMAT, PROTECT = "format", "protect"  # a call's parameters that make its text a document (generate, KServe)


def document_parameters(given: Mapping[str, Any]) -> tuple[str, list[str], dict[str, Any]] | None:
    """(format, protected patterns, the other parameters) when `given` names a document format, else None;
    InvalidInput for a format that is not a string, patterns that are not a string or a list of strings, and
    the parameters a document refuses."""
    if FORMAT not in given:
        return None
    rest = dict(given)
    fmt, protect = rest.pop(FORMAT), rest.pop(PROTECT, [])
    if not isinstance(fmt, str):
        raise InvalidInput(f"parameter {FORMAT} must be a string ({', '.join(FORMATS)}), got {shown(fmt)}")
    protect = [protect] if isinstance(protect, str) else protect
    if not isinstance(protect, list) or not all(isinstance(p, str) for p in protect):
        raise InvalidInput(f"parameter {PROTECT} must be a regular expression or a list of them, got "
                           f"{shown(protect)}")
    refuse_many(rest)
    return fmt, protect, rest


def refuse_many(given: Mapping[str, object]) -> None:
    """InvalidInput when a document's parameters ask for more than one output per sentence."""
    for key in ONE_OUTPUT:
        if key in given:
            raise InvalidInput(f"{key} is refused for documents: a document comes back as one text, one "
                               "translation per sentence")


def check_document(fmt: str, options: DecodeOptions) -> None:
    """InvalidInput for an unknown format, options that ask for more than one output per sentence, and
    required phrases (every sentence would have to hold them: a glossary applies per sentence instead)."""
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown document format {fmt!r}; this server reads {', '.join(FORMATS)}")
    if options.n_best != 1 or options.return_alternatives:
        raise InvalidInput("n_best and return_alternatives are refused for documents: a document comes back "
                           "as one text, one translation per sentence")
    if options.required_phrases:
        raise InvalidInput("required_phrases are refused for documents: each sentence would have to hold "
                           "every phrase; give a glossary (source term -> target term) instead, applied to "
                           "the sentences that hold its source terms")


def read_document(text: str, fmt: str, language: str | None, protect: Sequence[str],
                  limits: DocumentLimits) -> Document:
    """The parsed document (InvalidInput for a document over the limits or a bad protect pattern)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_bytes:
        raise InvalidInput(f"the document is {size} bytes; this server translates documents of at most "
                           f"{limits.max_bytes} bytes (--max-document-bytes)")
    try:
        document = parse(text, fmt, language, protect)
    except ValueError as e:
        raise InvalidInput(str(e)) from None
    if len(document.segments) > limits.max_sentences:
        raise InvalidInput(f"the document has {len(document.segments)} sentences; this server translates at "
                           f"most {limits.max_sentences} in one call (--max-document-sentences)")
    return document


def pieces(segment: Segment, tokenizer: TextTokenizer, max_source_tokens: int) -> list[tuple[int, int]]:
    """The spans of the segment's text sent to the model: the whole text when it fits, else split_long's."""
    text = segment.text
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    if start >= end:
        return []

    def fits(piece: str) -> bool:
        return len(tokenizer.encode([piece])[0]) + SOURCE_SLACK <= max_source_tokens

    try:
        return split_long(text, (start, end), fits)
    except ValueError as e:
        raise InvalidInput(f"a sentence cannot be cut to fit {max_source_tokens} tokens: {e}") from None


def links(text: str, result: Result, tokenizer: TextTokenizer, offset: int = 0, shift: int = 0
          ) -> tuple[str, tuple[Link, ...]]:
    """The best hypothesis's text and its links: each output token's characters (shifted by `shift`) to the
    characters (shifted by `offset`) of the source token it attends to most. No links when the hypothesis
    has no alignment or its pieces do not spell its text."""
    if not result.hypotheses:
        return "", ()
    best = result.hypotheses[0]
    if best.alignment is None:
        return best.text, ()
    ids, spans = tokenizer.encode([text])[0], tokenizer.spans(text)
    source = list(result.source_ids)
    prefix = next((i for i in range(len(source) - len(ids) + 1) if source[i:i + len(ids)] == ids), None)
    step, at, out = tokenizer.stream(), 0, []
    for token, row in zip(best.tokens, best.alignment, strict=False):
        piece = step(token)
        if piece and prefix is not None and row:
            j = max(range(len(row)), key=row.__getitem__) - prefix
            if 0 <= j < len(spans):
                (s, e), lead = spans[j], len(piece) - len(piece.lstrip())
                out.append(((s + offset, e + offset), (at + lead + shift, at + len(piece) + shift)))
        at += len(piece)
    return best.text, tuple(out) if at == len(best.text) else ()


Submit = Callable[[str, DecodeOptions], Awaitable[Result]]


async def translated(submit: Submit, segments: Sequence[Segment], tokenizer: TextTokenizer,
                     options: DecodeOptions, max_source_tokens: int, window: int
                     ) -> AsyncIterator[tuple[Translated, bool]]:
    """Each segment's output in order, as soon as it and those before it are final, and whether it was cut:
    every text sent through `submit(text, options) -> Result` (at most `window` at once, each distinct text
    once; with the alignment asked only for a segment with marks), a long segment in pieces joined by a
    space."""
    plain = dataclasses.replace(options, stream=False)
    aligned = dataclasses.replace(plain, return_alignment=True)  # for a segment with marks to place
    gate = asyncio.Semaphore(max(1, window))
    plans = [pieces(s, tokenizer, max_source_tokens) for s in segments]
    jobs: dict[tuple[str, bool], asyncio.Future[Result]] = {}

    async def one(text: str, align: bool) -> Result:
        async with gate:
            return await submit(text, aligned if align else plain)

    for seg, plan in zip(segments, plans, strict=True):  # queued in document order (the gate is FIFO)
        for a, b in plan:
            key = (seg.text[a:b], bool(seg.marks))
            if key not in jobs:
                jobs[key] = asyncio.ensure_future(one(*key))
    try:
        for seg, plan in zip(segments, plans, strict=True):
            text, joined = "", []
            for a, b in plan:
                result = await jobs[seg.text[a:b], bool(seg.marks)]
                sep = " " if text else ""
                piece, found = links(seg.text[a:b], result, tokenizer, offset=a, shift=len(text) + len(sep))
                text, joined = text + sep + piece, joined + list(found)
            yield Translated(text, tuple(joined)), len(plan) > 1
    finally:
        for job in jobs.values():
            if job.done() and not job.cancelled():
                job.exception()  # retrieved: a failure after the first one is not logged as lost
            job.cancel()


async def document_parts(submit: Submit, document: Document, tokenizer: TextTokenizer, options: DecodeOptions,
                         max_source_tokens: int, window: int) -> AsyncIterator[DocumentPart]:
    """The document's translation in parts, in order, each as soon as it is final (`translated`); the
    literal tail last, when there is one."""
    done = 0
    async for output, cut in translated(submit, document.segments, tokenizer, options, max_source_tokens,
                                        window):
        yield DocumentPart(document.part(done, output), done + 1, cut)
        done += 1
    if tail := document.tail():
        yield DocumentPart(tail, done)
