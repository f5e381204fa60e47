"""The mapping of a detector's ISO codes to each model family's codes, the script of a text, and the checks of
a text to detect (service/domain/detection.py)."""

from __future__ import annotations

import re

import pytest

from service.domain.detection import Detection, Guess, check_floor, check_text, model_code, script_of
from service.domain.errors import InvalidInput

NLLB = ["eng_Latn", "arb_Arab", "zho_Hans", "zho_Hant", "pes_Arab", "ace_Arab", "ace_Latn", "nob_Latn",
        "swh_Latn", "zsm_Latn"]
M2M100 = ["en", "ar", "zh", "fa", "no", "sw", "ms", "ast", "ns"]
MBART50 = ["en_XX", "ar_AR", "zh_CN", "fa_IR", "sw_KE"]


@pytest.mark.parametrize(("guess", "text", "nllb", "m2m100", "mbart50"), [
    (Guess("en", "eng", 1), "", "eng_Latn", "en", "en_XX"),
    (Guess("ar", "ara", 1), "", "arb_Arab", "ar", "ar_AR"),  # macrolanguage -> NLLB's Standard Arabic
    (Guess("fa", "fas", 1), "", "pes_Arab", "fa", "fa_IR"),
    (Guess("sw", "swa", 1), "", "swh_Latn", "sw", "sw_KE"),
    (Guess("ms", "msa", 1), "", "zsm_Latn", "ms", None),
    (Guess("no", "nor", 1), "", "nob_Latn", "no", None),
    (Guess("nb", "nob", 1), "", "nob_Latn", "no", None),
    (Guess("ast", "ast", 1), "", None, "ast", None),  # no ISO 639-1 code: M2M100 uses 639-3
    (Guess("nso", "nso", 1), "", None, "ns", None),  # M2M100's own code of Northern Sotho
    (Guess("zh", "zho", 1), "人人生而自由，在尊严和权利上一律平等。", "zho_Hans", "zh", "zh_CN"),
    (Guess("zh", "zho", 1), "人人生而自由，在尊嚴和權利上一律平等。", "zho_Hant", "zh", "zh_CN"),
    (Guess("de", "deu", 1), "", None, None, None),
])
def test_model_code_per_family(guess: Guess, text: str, nllb: str | None, m2m100: str | None,
                               mbart50: str | None) -> None:
    assert model_code(guess, NLLB, text) == nllb
    assert model_code(guess, M2M100, text) == m2m100
    assert model_code(guess, MBART50, text) == mbart50


def test_the_text_script_picks_among_scripts() -> None:
    assert model_code(Guess("ace", "ace", 1), NLLB, "Bandum ureuëng lahée bebah") == "ace_Latn"
    assert model_code(Guess("ace", "ace", 1), NLLB, "بندوم اورڠ") == "ace_Arab"
    assert script_of("Привет") == "Cyrl" and script_of("123 !") is None


@pytest.mark.parametrize(("text", "says"), [
    ("", "empty"), ("  \n", "empty"), (7, "must be a string"),
    ("a\x00b", "control character (U+0000) at index 1"),
    ("x" * 100_001, "100001 characters"),
])
def test_bad_texts_are_refused(text: object, says: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(says)):
        check_text(text)


def test_tabs_and_line_breaks_pass() -> None:
    assert check_text("a\tb\r\nc") == "a\tb\r\nc"


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), True, "0.5"])
def test_floor_must_be_a_probability(value: object) -> None:
    with pytest.raises(InvalidInput, match="min_language_confidence"):
        check_floor(value)


def test_shown_names_language_model_code_and_confidence() -> None:
    assert Detection(Guess("ar", "ara", 0.4321), "arb_Arab").shown() == "ar (arb_Arab) with confidence 0.43"
