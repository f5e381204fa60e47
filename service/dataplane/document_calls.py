"""The document calls of the data plane (service/dataplane/calls.py's DataPlane has them): a whole document
translated through its model's scheduler, whole or streamed in parts (service/dataplane/documents.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import AsyncIterator, Sequence

from service.dataplane import detection
from service.dataplane.documents import (
    DocumentAnswer,
    DocumentLimits,
    DocumentPart,
    DocumentStart,
    check_document,
    document_parts,
    read_document,
)
from service.domain.detection import MAX_DETECT_CHARS
from service.domain.types import DecodeOptions, Result
from service.models.repository import ModelRepository

MARKUP = re.compile(r"<[^>]*>")  # tags, left out of the text a document's language is detected on


class DocumentCalls:
    """Documents on the repository's models, taken up to `documents` (the server's limits)."""

    models: ModelRepository
    documents: DocumentLimits
    min_language_confidence: float

    async def document(self, name: str, version: str, text: str, fmt: str, options: DecodeOptions,
                       protect: Sequence[str], deadline: float | None) -> DocumentAnswer:
        """A whole document (fmt: text, html, markdown) translated sentence by sentence, its markup, spacing
        and placeholders in place (service/dataplane/documents.py)."""
        parts: list[str] = []
        split: list[int] = []
        async for item in self.document_stream(name, version, text, fmt, options, protect, deadline):
            if isinstance(item, DocumentStart):
                start = item
            else:
                parts.append(item.text)
                split += [item.done - 1] if item.split else []
        return DocumentAnswer(start.model_name, start.model_version, "".join(parts), start.segments, split)

    async def document_stream(self, name: str, version: str, text: str, fmt: str, options: DecodeOptions,
                              protect: Sequence[str], deadline: float | None
                              ) -> AsyncIterator[DocumentStart | DocumentPart]:
        """DocumentStart, then the document's translation in parts, in order, each as soon as it is final."""
        check_document(fmt, options)
        async with self.models.use(name, version, deadline) as model:
            scheduler, runner = model.scheduler, model.runner
            if detection.wanted(options, runner.languages):  # the document's language, from its first text
                sample = " ".join(MARKUP.sub(" ", text[:MAX_DETECT_CHARS]).split())
                floor = detection.floor_of(options, self.min_language_confidence)
                (found,) = detection.resolve([sample], runner.languages, floor, model.name)
                options = dataclasses.replace(options, source_language=found.model_code)
            options = detection.unasked(options)
            language = options.source_language or runner.source_language  # else English (segmentation.py)
            document = await asyncio.to_thread(read_document, text, fmt, language, protect, self.documents)
            yield DocumentStart(name or model.name, str(model.version), len(document.segments))

            async def submit(one: str, asked: DecodeOptions) -> Result:
                (result,) = await scheduler.submit([one], asked, deadline)
                return result

            async for part in document_parts(submit, document, runner.tokenizer, options,
                                             scheduler.limits.max_source_tokens,
                                             scheduler.settings.max_batch_size):
                yield part
            scheduler.recorder.documented(len(document.segments))
