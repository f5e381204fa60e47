"""The language detector on held-out text: the UDHR sentences of data/detect_udhr.json (30 languages, each with
its M2M100, NLLB and mBART-50 code), short (3 to 6 words) and long (a paragraph), mapped to each family's codes
as the server maps them.

The floors come from `python -m bench.detect` over every language of the three lists (docs/api.md, "Source
language detection"): mBART-50's languages (the widely spoken ones, as here) 90% right short and 98% long, the
worst of them right on about half their short samples. So: every language at least 3 of its 4 paragraphs and
2 of its 4 short samples, 95% of all paragraphs and 85% of all short samples; and at the server's default
confidence floor (0.5), 90% of the short samples it keeps right.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.domain.detection import DEFAULT_MIN_CONFIDENCE, Guess, model_code
from service.runtime import detector

CASES = json.loads((Path(__file__).parent / "data" / "detect_udhr.json").read_text(encoding="utf-8"))["languages"]
FAMILIES = ("m2m100", "nllb", "mbart50")
LEAST = {"long": (3, 0.95), "short": (2, 0.85)}  # per language (of 4), overall


@pytest.fixture(scope="module")
def guesses() -> dict[str, Guess]:
    """The detector's best guess of every sample."""
    model = detector.detector()
    return {t: model.best(t) for case in CASES.values() for length in LEAST for t in case[length]}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("length", sorted(LEAST))
def test_accuracy_per_language(family: str, length: str, guesses: dict[str, Guess]) -> None:
    codes = [case[family] for case in CASES.values() if case[family]]
    right_total = count = 0
    for file, case in CASES.items():
        if not case[family]:
            continue
        right = sum(model_code(guesses[t], codes, t) == case[family] for t in case[length])
        assert right >= LEAST[length][0], (file, length, [(t, guesses[t]) for t in case[length]])
        right_total, count = right_total + right, count + len(case[length])
    assert right_total / count >= LEAST[length][1]


def test_confident_short_answers_are_right(guesses: dict[str, Guess]) -> None:
    codes = [case["nllb"] for case in CASES.values()]
    kept = [(t, case["nllb"]) for case in CASES.values() for t in case["short"]
            if guesses[t].confidence >= DEFAULT_MIN_CONFIDENCE]
    right = sum(model_code(guesses[t], codes, t) == code for t, code in kept)
    assert len(kept) >= len(CASES) * 2 and right / len(kept) >= 0.9


def test_guesses_are_ranked_probabilities() -> None:
    found = detector.guesses("Alle Menschen sind frei und gleich an Würde und Rechten geboren.", 4)
    assert [g.language for g in found][0] == "de" and len(found) == 4
    assert all(0 <= g.confidence <= 1 for g in found)
    assert [g.confidence for g in found] == sorted((g.confidence for g in found), reverse=True)


def test_wikipedia_codes_are_renamed() -> None:
    # lid.176's "als" is Alemannic (Wikipedia's code), not ISO's Tosk Albanian (NLLB's als_Latn)
    assert detector.guess_of("__label__als", 0.9) == Guess("gsw", "gsw", 0.9)
    assert model_code(detector.guess_of("__label__als", 0.9), ["als_Latn", "deu_Latn"]) is None
    assert model_code(detector.guess_of("__label__sq", 0.9), ["als_Latn", "deu_Latn"]) == "als_Latn"


def test_every_label_has_an_iso639_3_code() -> None:
    languages = detector.FastText.languages()
    assert len(languages) == 176
    assert all(len(g.iso639_3) == 3 for g in languages)
