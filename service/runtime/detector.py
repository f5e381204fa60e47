"""The language detector: py3langid (langid.py's model, 142 languages, in its wheel; numpy only), loaded once,
on the first detection, never downloaded.

Why this one (its accuracy on short and long texts in M2M100's, NLLB's and mBART-50's languages, its speed,
against fastText's lid.176, lingua, CLD3 and langdetect): docs/api.md, "Source language detection". It names
languages by ISO 639-1 where there is one, else ISO 639-3; `guesses` adds the ISO 639-3 code
(service/domain/detection.py maps both to a model's own codes) and normalized probabilities.
"""

from __future__ import annotations

import threading
from typing import Any

from service.domain.detection import TOP_ALTERNATIVES, Guess

NO_LANGUAGE = "zxx"  # py3langid's class of text with no linguistic content (ISO 639-2's "zxx")
ISO639_3 = dict(pair.split(":") for pair in [  # py3langid's ISO 639-1 codes -> ISO 639-3
    "af:afr", "am:amh", "an:arg", "ar:ara", "as:asm", "av:ava", "az:aze", "ba:bak", "be:bel", "bg:bul",
    "bn:ben", "bo:bod", "br:bre", "bs:bos", "ca:cat", "ce:che", "co:cos", "cs:ces", "cv:chv", "cy:cym",
    "da:dan", "de:deu", "dv:div", "dz:dzo", "el:ell", "en:eng", "eo:epo", "es:spa", "et:est", "eu:eus",
    "fa:fas", "fi:fin", "fo:fao", "fr:fra", "fy:fry", "ga:gle", "gd:gla", "gl:glg", "gn:grn", "gu:guj",
    "gv:glv", "ha:hau", "he:heb", "hi:hin", "hr:hrv", "ht:hat", "hu:hun", "hy:hye", "ia:ina", "id:ind",
    "ie:ile", "ig:ibo", "io:ido", "is:isl", "it:ita", "ja:jpn", "jv:jav", "ka:kat", "kk:kaz", "km:khm",
    "kn:kan", "ko:kor", "ku:kur", "kv:kom", "kw:cor", "ky:kir", "la:lat", "lb:ltz", "lg:lug", "li:lim",
    "ln:lin", "lo:lao", "lt:lit", "lv:lav", "mg:mlg", "mk:mkd", "ml:mal", "mn:mon", "mr:mar", "ms:msa",
    "mt:mlt", "my:mya", "ne:nep", "nl:nld", "nn:nno", "no:nor", "oc:oci", "om:orm", "or:ori", "os:oss",
    "pa:pan", "pl:pol", "ps:pus", "pt:por", "qu:que", "rm:roh", "ro:ron", "ru:rus", "rw:kin", "sa:san",
    "sc:srd", "sd:snd", "se:sme", "si:sin", "sk:slk", "sl:slv", "sn:sna", "so:som", "sq:sqi", "sr:srp",
    "st:sot", "su:sun", "sv:swe", "sw:swa", "ta:tam", "te:tel", "tg:tgk", "th:tha", "tk:tuk", "tl:tgl",
    "tr:tur", "tt:tat", "ug:uig", "uk:ukr", "ur:urd", "uz:uzb", "vi:vie", "vo:vol", "wa:wln", "xh:xho",
    "yi:yid", "yo:yor", "zh:zho", "zu:zul"
])


def guess_of(code: str, probability: float) -> Guess:
    """A Guess of one py3langid code and its probability (clipped to [0, 1])."""
    return Guess(code, ISO639_3.get(code, code), min(1.0, max(0.0, float(probability))))


class LangId:
    """py3langid's model in memory: languages of a text, best first."""

    def __init__(self) -> None:
        """Load the model shipped in the wheel (normalized probabilities)."""
        from py3langid import langid

        self.model: Any = langid.LanguageIdentifier.from_modelpath(langid.MODEL_DIR / langid.MODEL_FILE,
                                                                   norm_probs=True)

    def guesses(self, text: str, k: int = 1 + TOP_ALTERNATIVES) -> list[Guess]:
        """The k likeliest languages of the text, best first."""
        return [guess_of(code, p) for code, p in self.model.rank(text)[:k]]

    def best(self, text: str) -> Guess:
        """The likeliest language of the text."""
        code, probability = self.model.classify(text)
        return guess_of(code, probability)

    def languages(self) -> list[Guess]:
        """Every language the model knows (confidence 1)."""
        return [guess_of(code, 1.0) for code in sorted(set(self.model.nb_classes) - {NO_LANGUAGE})]


_lock = threading.Lock()
_loaded: LangId | None = None


def detector() -> LangId:
    """The process's detector, loaded on first use (thread-safe)."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = LangId()
        return _loaded


def guesses(text: str, k: int = 1 + TOP_ALTERNATIVES) -> list[Guess]:
    """The k likeliest languages of a text through the process's detector, best first."""
    return detector().guesses(text, k)
