"""The language detector on held-out text: the UDHR sentences of data/detect_udhr.json (30 languages, each
with its M2M100, NLLB and mBART-50 code), short (3 to 6 words) and long (a paragraph), mapped to each family's
codes as the server maps them.

The floors come from `python -m bench.detect` over every language of the three lists (docs/api.md, "Source
language detection"): on mBART-50's languages (the widely spoken ones, as here) py3langid is 94.6% right on
short samples and 98.7% on long ones; its worst language, Indonesian (read as Malay), 35% short. So: every
language at least 1 of its 4 short samples and 2 of its 4 paragraphs right, 90% of all short samples and 95%
of all paragraphs; and at the server's default confidence floor (0.5), 90% of the short samples it keeps
right.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.domain.detection import DEFAULT_MIN_CONFIDENCE, Guess, model_code
from service.runtime import detector

DATA = Path(__file__).parent / "data" / "detect_udhr.json"
CASES = json.loads(DATA.read_text(encoding="utf-8"))["languages"]
FAMILIES = ("m2m100", "nllb", "mbart50")
LEAST = {"long": (2, 0.95), "short": (1, 0.90)}  # per language (of 4), overall


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


def test_every_language_has_an_iso639_3_code() -> None:
    languages = detector.detector().languages()
    assert len(languages) > 130 and all(len(g.iso639_3) == 3 for g in languages)
    assert detector.guess_of("sw", 0.5) == Guess("sw", "swa", 0.5)
