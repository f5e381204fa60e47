"""Glossaries in the scheduler: each text's own options (the terms it holds as required phrases), the model's
glossary under the request's, the sentence cache keyed by them (a translation made without a glossary is
never served to a request with one; a text holding no term shares the entry), the unmet terms kept with a
cached result, and the per-model counters."""

from __future__ import annotations

import dataclasses
import itertools

from service.domain.glossary import Glossary
from service.domain.types import DecodeOptions, Result
from service.ops.model_metrics import ModelMetrics
from service.scheduling.cache import SentenceCache
from service.scheduling.policies import SchedulerSettings, make_policy
from service.scheduling.scheduler import Scheduler
from tests.support.metrics import sample
from tests.support.scheduling import run

HELD, OTHER = "the 4217 cat.", "we 8 big."  # the tiny model says neither "seven" nor "eight" for them
BEAM = DecodeOptions(max_output_tokens=20, beam_size=2)
_names = itertools.count(1)


def scheduler(runner, cache: SentenceCache | None = None, model: Glossary | None = None) -> Scheduler:
    """A continuous scheduler of the runner (with the model glossary given), recording under a name of its
    own."""
    settings = SchedulerSettings(max_batch_size=8, queue_size=64)
    limits = dataclasses.replace(runner.limits(), glossary=model or Glossary())
    recorder = ModelMetrics(f"glossary-test-{next(_names)}", "1")
    return Scheduler(runner, make_policy("continuous", settings), settings, limits, recorder, cache)


def holds(runner, result: Result, word: str) -> bool:
    """Whether the best hypothesis holds a form of `word` (standalone or after a space)."""
    ids = result.hypotheses[0].tokens
    forms = runner.resolve(DecodeOptions(required_phrases=[word])).required_phrases.constraints[0].forms
    return any(tuple(ids[i : i + len(f)]) == f for f in forms for i in range(len(ids) - len(f) + 1))


def decoded(s: Scheduler) -> int:
    """Texts the scheduler's worker decoded."""
    return s.recorder.stats.snapshot().inference_count


def test_the_cache_never_serves_an_unglossed_translation_to_a_glossary(runner) -> None:
    cache = SentenceCache(1 << 20)
    glossed = dataclasses.replace(BEAM, glossary=Glossary.from_request({"cat": "seven"}))
    tight = dataclasses.replace(glossed, max_output_tokens=2, required_phrases=["thousand"])

    async def main() -> tuple[list[list[Result]], list[int]]:
        s = scheduler(runner, cache)
        await s.start()
        answers, counts = [], []
        for options in (BEAM, glossed, glossed, tight, tight):
            answers.append(await s.submit([HELD, OTHER], options))
            counts.append(decoded(s))
        await s.drain(5)
        return answers, counts

    answers, counts = run(main())
    (plain_held, plain_other), (held, other), (again_held, again_other) = answers[:3]
    assert not holds(runner, plain_held, "seven") and plain_held.glossary_terms == ()
    assert holds(runner, held, "seven") and held.glossary_terms == ("cat",)
    assert other.hypotheses[0].tokens == plain_other.hypotheses[0].tokens and other.glossary_terms == ()
    assert counts == [2, 3, 3, 5, 5]  # the glossary request decoded only the text holding its term; then none
    assert again_held.hypotheses[0].tokens == held.hypotheses[0].tokens
    assert again_held.glossary_terms == ("cat",)
    assert again_other.hypotheses[0].tokens == other.hypotheses[0].tokens
    for short, _ in answers[3:]:  # no room: decoded, then from the cache, the same unmet phrase and term
        assert (short.hypotheses[0].unmet_phrases, short.hypotheses[0].unmet_terms) == ((0,), ("cat",))


def test_the_model_glossary_applies_and_a_request_term_overrides_it(runner) -> None:
    model = Glossary.from_request({"cat": "seven", "big": "eight"})
    own = dataclasses.replace(BEAM, glossary=Glossary.from_request({"CAT": "eight"}))
    tight = dataclasses.replace(BEAM, max_output_tokens=2)

    async def main() -> tuple[list[Result], list[Result], list[Result], ModelMetrics]:
        s = scheduler(runner, model=model)
        await s.start()
        out = (await s.submit([HELD], BEAM), await s.submit([HELD], own),
               await s.submit([HELD, OTHER], tight))
        await s.drain(5)
        return *out, s.recorder

    (by_model,), (by_request,), (short, other), recorder = run(main())
    assert holds(runner, by_model, "seven") and by_model.glossary_terms == ("cat",)
    assert holds(runner, by_request, "eight") and by_request.glossary_terms == ("CAT",)
    assert short.hypotheses[0].unmet_terms == ("cat",) and short.hypotheses[0].unmet_phrases == ()
    assert other.glossary_terms == ("big",)
    labels = {"model": recorder.model, "version": recorder.version}
    assert sample("translator_glossary_texts_total", **labels) == 4
    assert sample("translator_unmet_glossary_terms_total", **labels) >= 1
