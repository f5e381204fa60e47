"""A document's texts through the scheduler: in document order, each distinct text once, at most `window` at
once, and a failure fails the document (service/dataplane/documents.py), driven by a stand-in for submit."""

from __future__ import annotations

import asyncio

import pytest

from service.config import DEFAULT_BUNDLE
from service.dataplane.documents import DocumentLimits, document_parts, read_document, translated
from service.documents.formats import parse
from service.domain.errors import InvalidInput
from service.domain.types import DecodeOptions, FinishReason, Hypothesis, Result, Timings
from service.runtime.runner import Runner
from tests.support.polling import until


@pytest.fixture(scope="module")
def tokenizer():
    return Runner(DEFAULT_BUNDLE).tokenizer


def _result(text: str) -> Result:
    best = Hypothesis(tokens=[], text=text, log_prob=0.0, score=0.0, finish_reason=FinishReason.EOS)
    return Result([best], [], FinishReason.EOS, Timings(0.0, 0.0, 0.0))


class Held:
    """A submit whose calls wait until released; it records what it was sent and how many ran at once."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.waiting: dict[str, asyncio.Event] = {}
        self.running = self.most = 0
        self.arrived = asyncio.Event()
        self.log: list[str] = []  # "finished <text>" as each call returns

    async def __call__(self, text: str, options: DecodeOptions) -> Result:
        self.sent.append(text)
        self.running += 1
        self.most = max(self.most, self.running)
        gate = self.waiting[text] = asyncio.Event()
        self.arrived.set()
        try:
            await gate.wait()
        finally:
            self.running -= 1
        self.log.append(f"finished {text}")
        if text.startswith("Bad"):
            raise InvalidInput(f"refused {text!r}")
        return _result(text.upper())

    async def release(self, text: str) -> None:
        """Let the call for `text` finish, once it has been made."""
        while text not in self.waiting:
            self.arrived.clear()
            await self.arrived.wait()
        self.waiting[text].set()


def _collect(agen, log: list[str] | None = None) -> tuple[asyncio.Task, list]:
    got: list = []

    async def run() -> None:
        async for item in agen:
            got.append(item)
            if log is not None:
                log.append(f"part {len(got)}")

    return asyncio.ensure_future(run()), got


def test_outputs_come_in_document_order_whatever_order_the_texts_finish(tokenizer):
    async def main() -> None:
        document = parse("Alpha one. Beta two. Gamma three.", "text", "en")
        held = Held()
        parts = document_parts(held, document, tokenizer, DecodeOptions(), 512, window=8)
        task, got = _collect(parts, held.log)
        texts = [s.text.strip() for s in document.segments]
        for text in reversed(texts):
            await held.release(text)
        await task
        assert held.log.index("part 1") > held.log.index(f"finished {texts[0]}")  # nothing before it is final
        assert [p.done for p in got] == [1, 2, 3]
        assert "".join(p.text for p in got) == "ALPHA ONE. BETA TWO. GAMMA THREE."

    asyncio.run(main())


def test_a_text_repeated_in_a_document_is_sent_once(tokenizer):
    async def main() -> None:
        document = parse("Same here. Other one. Same here. Same here.", "text", "en")
        held = Held()
        task, got = _collect(translated(held, document.segments, tokenizer, DecodeOptions(), 512, window=8))
        for text in ("Same here.", "Other one."):
            await held.release(text)
        await task
        assert sorted(held.sent) == ["Other one.", "Same here."]
        assert [t.text for t, _ in got] == ["SAME HERE.", "OTHER ONE.", "SAME HERE.", "SAME HERE."]

    asyncio.run(main())


def test_at_most_window_texts_are_in_flight_and_they_go_in_document_order(tokenizer):
    async def main() -> None:
        text = " ".join(f"Sentence number {i} is here." for i in range(12))
        document = parse(text, "text", "en")
        held = Held()
        task, _ = _collect(translated(held, document.segments, tokenizer, DecodeOptions(), 512, window=3))
        expected = [s.text.strip() for s in document.segments]
        for one in expected:
            await held.release(one)
        await task
        assert held.sent == expected
        assert held.most == 3

    asyncio.run(main())


def test_a_failed_text_fails_the_document_and_withdraws_the_rest(tokenizer):
    async def main() -> None:
        document = parse("Good one. Bad one. Never sent.", "text", "en")
        held = Held()
        task, got = _collect(translated(held, document.segments, tokenizer, DecodeOptions(), 512, window=2))
        await held.release("Good one.")
        await held.release("Bad one.")
        with pytest.raises(InvalidInput, match="refused 'Bad one.'"):
            await task
        await until(lambda: held.running == 0, "the texts in flight withdrawn")
        assert held.sent == ["Good one.", "Bad one.", "Never sent."]  # the third took the first's place
        assert len(got) == 1

    asyncio.run(main())


@pytest.mark.parametrize("text,limits,says", [
    ("é" * 600, DocumentLimits(max_bytes=1000), "the document is 1200 bytes; .* at most 1000 bytes"),
    ("One. Two. Three.", DocumentLimits(max_sentences=2), "has 3 sentences; .* at most 2 in one call"),
])
def test_a_document_over_the_limits_is_refused_with_its_figure(text, limits, says):
    with pytest.raises(InvalidInput, match=says):
        read_document(text, "text", "en", [], limits)


def test_a_document_at_the_limits_is_read():
    assert len(read_document("One. Two.", "text", "en", [], DocumentLimits(9, 2)).segments) == 2
