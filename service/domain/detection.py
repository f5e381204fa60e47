"""A detected source language, and the one mapping from a detector's ISO 639 codes to a model's own code.

Plain data and pure functions, no I/O (the detector itself is service/runtime/detector.py). A detector names a
language by ISO 639-1 where it has one (else ISO 639-3) and by ISO 639-3; models name it their own way:
M2M100 "en" (ISO 639-1, or 639-3 where there is none: "ast"), NLLB "eng_Latn" (an individual ISO 639-3
language and its script), mBART-50 "en_XX" (639-1 and a region). `model_code` tries the detector's codes, then
the individual languages of a macrolanguage (Arabic "ara" -> NLLB's Standard Arabic "arb"), against each model
code's part before "_"; where a model has a language in several scripts (NLLB's "zho_Hans" / "zho_Hant",
"ace_Arab" / "ace_Latn") the text's script decides.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from service.domain.errors import InvalidInput
from service.domain.text import shown

AUTO = "auto"  # the source_language that asks for detection
DEFAULT_MIN_CONFIDENCE = 0.5  # the server's floor unless --detect-min-confidence says otherwise (docs/api.md)
TOP_ALTERNATIVES = 3  # alternatives a /detect answer lists beside the best
MAX_DETECT_CHARS = 100_000  # longest text detection reads (some ms of fastText; a model's limit may be lower)
ALLOWED_CONTROLS = "\t\n\r"

# a detector's code -> the codes models use for that language, in preference order (macrolanguages to the
# individual language NLLB and the UDHR name; other spellings of a language's code)
ALIASES: dict[str, tuple[str, ...]] = {
    "ara": ("arb",), "fas": ("pes", "prs"), "msa": ("zsm",), "lav": ("lvs",), "sqi": ("als",),
    "aze": ("azj", "azb"), "mon": ("khk",), "swa": ("swh",), "uzb": ("uzn",), "zho": ("cmn",),
    "kur": ("kmr", "ckb"), "pus": ("pbt", "pbu"), "yid": ("ydd",), "orm": ("gaz",), "nep": ("npi",),
    "ful": ("fuv",), "que": ("quy",), "mlg": ("plt",), "aym": ("ayr",), "kau": ("knc",),
    "nor": ("nob", "nno"),
    "ori": ("ory",), "est": ("ekk",), "grn": ("gug",), "nb": ("no",), "nn": ("no",), "nso": ("ns",),
    "iw": ("he",), "in": ("id",), "fil": ("tl", "tgl"), "hbs": ("hrv", "srp", "bos"),
}
# Unicode character name prefix -> ISO 15924 script (the scripts NLLB codes tell apart)
SCRIPTS = {"LATIN": "Latn", "CYRILLIC": "Cyrl", "ARABIC": "Arab", "DEVANAGARI": "Deva", "TIFINAGH": "Tfng",
           "CJK": "Hani", "HEBREW": "Hebr", "BENGALI": "Beng", "GREEK": "Grek"}


@dataclass(frozen=True)
class Guess:
    """One language a detector considers: its code (ISO 639-1 where there is one, else 639-3), ISO 639-3
    code and confidence in [0, 1]."""

    language: str
    iso639_3: str
    confidence: float


@dataclass(frozen=True)
class Detection:
    """A text's language as detected: the best guess, the model's code of it (None: no model named, or the
    model lacks it) and the next guesses, best first."""

    best: Guess
    model_code: str | None = None
    alternatives: tuple[Guess, ...] = ()

    @property
    def language(self) -> str:
        """The detector's code of the best guess."""
        return self.best.language

    @property
    def confidence(self) -> float:
        """The best guess's confidence."""
        return self.best.confidence

    def shown(self) -> str:
        """The best guess as an error message names it: code, model code, confidence."""
        model = f" ({self.model_code})" if self.model_code and self.model_code != self.language else ""
        return f"{self.language}{model} with confidence {self.confidence:.2f}"


def script_of(text: str) -> str | None:
    """The ISO 15924 script of most of the text's letters among SCRIPTS (Han as "Hans" or "Hant" by which of
    GB2312 and Big5 encodes more of its characters); None when none."""
    counts: dict[str, int] = {}
    for char in text:
        if char.isalpha():
            script = SCRIPTS.get(unicodedata.name(char, "").split(" ", 1)[0])
            if script:
                counts[script] = counts.get(script, 0) + 1
    if not counts:
        return None
    script = max(counts, key=lambda s: counts[s])
    if script != "Hani":
        return script
    han = [c for c in text if unicodedata.name(c, "").startswith("CJK")]
    simplified = sum(_encodes(c, "gb2312") and not _encodes(c, "big5") for c in han)
    traditional = sum(_encodes(c, "big5") and not _encodes(c, "gb2312") for c in han)
    return "Hant" if traditional > simplified else "Hans"


def _encodes(char: str, codec: str) -> bool:
    """Whether `codec` encodes the character."""
    try:
        char.encode(codec)
    except UnicodeEncodeError:
        return False
    return True


def codes_of(guess: Guess, codes: Iterable[str]) -> list[str]:
    """Every code among `codes` of a detected language (NLLB: one per script), sorted; [] if none."""
    by_base: dict[str, list[str]] = {}
    for code in sorted(codes):
        by_base.setdefault(code.split("_", 1)[0], []).append(code)
    keys = [guess.language, *ALIASES.get(guess.language, ()), guess.iso639_3,
            *ALIASES.get(guess.iso639_3, ())]
    return next((by_base[key] for key in keys if key in by_base), [])


def model_code(guess: Guess, codes: Iterable[str], text: str = "") -> str | None:
    """The model's code of a detected language among `codes` (None: the model lacks it); several codes of
    the language in different scripts: the one of the text's script, else the first in sorted order."""
    found = codes_of(guess, codes)
    return _of_script(found, text) if found else None


def _of_script(found: list[str], text: str) -> str:
    """The code among `found` ("zho_Hans", "zho_Hant") whose script suffix is the text's, else the first."""
    if len(found) == 1:
        return found[0]
    script = script_of(text)
    return next((c for c in found if script and c.endswith("_" + script)), found[0])


def check_text(text: Any, where: str = "text") -> str:
    """The text to detect; InvalidInput for a non-string, an empty or blank one, one over MAX_DETECT_CHARS
    characters or one with a control character (tab and line breaks aside)."""
    if not isinstance(text, str):
        raise InvalidInput(f"{where} must be a string, got {shown(text)}")
    if not text.strip():
        raise InvalidInput(f"{where} is empty: there is no language to detect")
    if len(text) > MAX_DETECT_CHARS:
        raise InvalidInput(f"{where} is {len(text)} characters long; language detection reads at most "
                           f"{MAX_DETECT_CHARS}")
    bad = next((i for i, c in enumerate(text)
                if unicodedata.category(c) == "Cc" and c not in ALLOWED_CONTROLS), None)
    if bad is not None:
        raise InvalidInput(f"{where} has a control character (U+{ord(text[bad]):04X}) at index {bad}")
    return text


def check_floor(value: Any) -> float:
    """A confidence floor: a number in [0, 1]; InvalidInput naming min_language_confidence otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not (
            0.0 <= value <= 1.0):
        raise InvalidInput(f"min_language_confidence must be a number between 0 and 1, got {shown(value)}")
    return float(value)
