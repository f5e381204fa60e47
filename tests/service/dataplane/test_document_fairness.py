"""The fairness rule of documents (docs/documents.md): a document holds at most `window` texts in the
scheduler, so a small request sent while a large document is being translated is answered after at most a
few windows of the document's sentences, never after the whole document. Counted in sentences, not seconds,
on the default model and a real continuous-batching scheduler."""

from __future__ import annotations

import asyncio

import pytest

from service.config import DEFAULT_BUNDLE
from service.dataplane.documents import document_parts
from service.documents.formats import parse
from service.domain.types import DecodeOptions, Result
from service.runtime.runner import Runner
from service.scheduling.scheduler import make_scheduler

WINDOW = 4  # the scheduler's max_batch_size, which is the document's window
SENTENCES = 240


@pytest.fixture(scope="module")
def default_runner() -> Runner:
    return Runner(DEFAULT_BUNDLE)


def _document() -> str:
    units = ["apples", "pears", "plums", "figs", "limes"]
    return " ".join(f"We sold {i * 7 + 3} {units[i % 5]} on May {i % 28 + 1}." for i in range(SENTENCES))


@pytest.mark.parametrize("mode", ["continuous", "dynamic"])
def test_a_small_request_beside_a_large_document_waits_for_a_few_windows_only(default_runner, mode):
    runner = default_runner

    async def main() -> tuple[int, int, int]:
        scheduler = make_scheduler(mode, runner, max_batch_size=WINDOW, queue_size=64)
        await scheduler.start()
        try:
            async def submit(text: str, options: DecodeOptions) -> Result:
                (result,) = await scheduler.submit([text], options)
                return result

            document = parse(_document(), "text", "en")
            assert len(document.segments) == SENTENCES
            done = 0
            small: asyncio.Future | None = None
            seen: tuple[int, int] | None = None
            parts = document_parts(submit, document, runner.tokenizer, DecodeOptions(), 512, WINDOW)
            async for part in parts:
                done = part.done
                if done == 10 and small is None:
                    small = asyncio.ensure_future(scheduler.submit(["we paid 12 dollars"], DecodeOptions()))
                    sent_at = done
                if small is not None and small.done() and seen is None:
                    seen = (sent_at, done)
            assert small is not None and seen is not None, "the small request never finished before the end"
            (answer,) = await small
            assert answer.hypotheses[0].text.strip()
            return seen[0], seen[1], done
        finally:
            await scheduler.drain(5.0)

    sent_at, answered_at, total = asyncio.run(main())
    assert total == SENTENCES
    # ahead of the small request: at most WINDOW texts of the document, queued or decoding; the parts seen
    # lag the completions by at most WINDOW more (they come in document order); one window beside it
    assert answered_at - sent_at <= 4 * WINDOW, (sent_at, answered_at)
