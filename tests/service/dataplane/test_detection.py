"""source_language "auto" in the data plane (service/dataplane/detection.py): detections used, refused under
the floor or for a language the model lacks (naming it), counted, and texts grouped by language in order."""

from __future__ import annotations

import asyncio

import pytest

from service.api.status import http_status_of, status_of
from service.dataplane import detection
from service.domain.detection import AUTO
from service.domain.errors import InvalidInput, LanguageUndetermined
from service.domain.languages import Languages
from service.domain.types import DecodeOptions
from service.ops import metrics

MODEL = Languages({"eng_Latn": 5, "deu_Latn": 6, "fra_Latn": 7}, source_prefix=True, forced_target=True)
GERMAN = "Alle Menschen sind frei und gleich an Würde und Rechten geboren."
FRENCH = "Tous les êtres humains naissent libres et égaux en dignité et en droits."
ITALIAN = "Tutti gli esseri umani nascono liberi ed eguali in dignità e diritti."


def test_each_text_gets_the_model_code_of_its_language_and_is_counted() -> None:
    before = metrics.counter_value(metrics.DETECTED_LANGUAGES, model="m", language="deu_Latn")
    found = detection.resolve([GERMAN, FRENCH], MODEL, 0.5, "m")
    assert [d.model_code for d in found] == ["deu_Latn", "fra_Latn"]
    assert [d.language for d in found] == ["de", "fr"] and all(d.confidence >= 0.5 for d in found)
    assert metrics.counter_value(metrics.DETECTED_LANGUAGES, model="m", language="deu_Latn") == before + 1


def test_a_language_the_model_lacks_is_refused_naming_it() -> None:
    with pytest.raises(LanguageUndetermined, match=r"text 1 reads as it with confidence 0\.\d\d, a language "
                                                   "this model does not translate from"):
        detection.resolve([GERMAN, ITALIAN], MODEL, 0.5, "m")


def test_below_the_floor_is_refused_not_guessed() -> None:
    with pytest.raises(LanguageUndetermined, match=r"reads as de \(deu_Latn\) with confidence [01]\.\d\d, "
                                                   r"below the confidence floor 1\.00"):
        detection.resolve([GERMAN], MODEL, 1.0, "m")


def test_the_refusal_is_invalid_argument_in_the_one_table() -> None:
    error = LanguageUndetermined("x")
    assert status_of(error)[0] == "INVALID_ARGUMENT" and http_status_of(error)[0] == 400


def test_the_request_floor_overrides_the_server_floor() -> None:
    assert detection.floor_of(DecodeOptions(min_language_confidence=0.9), 0.5) == 0.9
    assert detection.floor_of(DecodeOptions(), 0.5) == 0.5
    with pytest.raises(InvalidInput, match="min_language_confidence"):
        detection.floor_of(DecodeOptions(min_language_confidence=2.0), 0.5)


def test_auto_is_ignored_by_a_model_that_takes_no_source_language() -> None:
    asked = DecodeOptions(source_language=AUTO)
    assert not detection.wanted(asked, Languages())
    assert not detection.wanted(asked, Languages({"de": 1}, forced_target=True))
    assert detection.unasked(asked).source_language is None
    assert detection.wanted(asked, MODEL)


def test_texts_go_in_groups_of_one_language_and_come_back_in_order() -> None:
    sent: list[tuple[list[str], str | None]] = []

    async def submit(texts: list[str], options: DecodeOptions) -> list[str]:
        sent.append((texts, options.source_language))
        return [f"{options.source_language}:{t}" for t in texts]

    texts = [GERMAN, FRENCH, GERMAN + " Ja."]
    found = detection.resolve(texts, MODEL, 0.5, "m")
    results = asyncio.run(detection.by_language(submit, texts, DecodeOptions(source_language=AUTO), found))
    assert results == [f"deu_Latn:{GERMAN}", f"fra_Latn:{FRENCH}", f"deu_Latn:{GERMAN} Ja."]
    assert sorted(sent) == [([GERMAN, GERMAN + " Ja."], "deu_Latn"), ([FRENCH], "fra_Latn")]


def test_detect_gives_alternatives_and_no_model_code_without_a_model() -> None:
    found = detection.detect(GERMAN)
    assert found.language == "de" and found.model_code is None and len(found.alternatives) == 3
    with pytest.raises(InvalidInput, match="empty"):
        detection.detect("   ")
