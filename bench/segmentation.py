"""Sentence segmenters compared on the boundary cases: accuracy per set, and speed on one long document.

The cases are tests/service/documents/data/boundaries.json: pragmatic_segmenter's Golden Rules (English, and
the other languages it lists) and this project's own cases (German, French, Spanish, Portuguese, Chinese; the
default model's domain: numbers, money, dates, times, abbreviations, URLs, e-mail addresses). A case is right
when the segmenter's sentences equal the expected ones with all whitespace removed (the Golden Rules expect
some line breaks dropped: a segmenter that keeps them still passes).

Candidates: sentencex, pysbd, syntok, nupunkt (each skipped when not installed), and `service` — our
service.documents.segmentation.sentences, which is sentencex plus the line rules. Speed: every case is one
paragraph, segmented in its own language (pysbd: English where it has no rules; syntok and nupunkt take no
language), the whole set repeated --repeat times; the best of --rounds timings, the segmenters interleaved in
each round so that a busy machine slows all of them alike. Sentences/s counts the expected sentences; compare
the ratios, not the absolute figures. Prints a table and, last, one JSON line.

    python -m bench.segmentation [--repeat 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from service.documents import segmentation

REPO_ROOT = Path(__file__).resolve().parents[1]
CASES = REPO_ROOT / "tests" / "service" / "documents" / "data" / "boundaries.json"
SETS = ("golden-en", "golden-other", "languages", "domain")
Segment = Callable[[str, str], list[str]]  # (text, language) -> sentences


def load_cases(path: Path = CASES) -> list[dict[str, Any]]:
    """The boundary cases: id, set, language, text, sentences."""
    return json.loads(path.read_text(encoding="utf-8"))["cases"]


def squashed(sentences: list[str]) -> list[str]:
    """Sentences with all whitespace removed, empty ones dropped: what a case compares."""
    out = ["".join(s.split()) for s in sentences]
    return [s for s in out if s]


def is_right(segment: Segment, case: dict[str, Any]) -> bool:
    """Whether `segment` gives the case's sentences (whitespace aside)."""
    return squashed(segment(case["text"], case["language"])) == squashed(case["sentences"])


def _sentencex() -> Segment:
    import sentencex

    return lambda text, language: list(sentencex.segment(language, text))


def _pysbd() -> Segment:
    import pysbd
    from pysbd.languages import LANGUAGE_CODES

    @cache
    def segmenter(language: str) -> pysbd.Segmenter:
        return pysbd.Segmenter(language=language if language in LANGUAGE_CODES else "en", clean=False)

    return lambda text, language: list(segmenter(language).segment(text))


def _syntok() -> Segment:
    from syntok import segmenter

    def segment(text: str, language: str) -> list[str]:
        found = [s for paragraph in segmenter.analyze(text) for s in paragraph if s]
        return [text[s[0].offset:s[-1].offset + len(s[-1].value)] for s in found]

    return segment


def _nupunkt() -> Segment:
    import nupunkt

    return lambda text, language: [text[a:b] for a, b in nupunkt.sent_spans(text)]


def _service() -> Segment:
    return lambda text, language: [text[a:b] for a, b in segmentation.sentences(text, language)]


CANDIDATES: dict[str, tuple[str, Callable[[], Segment]]] = {  # name -> (distribution, factory)
    "sentencex": ("sentencex", _sentencex),
    "pysbd": ("pysbd", _pysbd),
    "syntok": ("syntok", _syntok),
    "nupunkt": ("nupunkt", _nupunkt),
    "service": ("sentencex", _service),
}


def available() -> dict[str, tuple[str, Segment]]:
    """name -> (version, segment) of the candidates that import."""
    out = {}
    for name, (dist, factory) in CANDIDATES.items():
        try:
            out[name] = (importlib.metadata.version(dist), factory())
        except ImportError:
            print(f"{name}: not installed, skipped", file=sys.stderr)
    return out


def accuracy(segment: Segment, cases: list[dict[str, Any]]) -> tuple[dict[str, list[int]], list[str]]:
    """set -> [right, total], and the ids of the cases missed."""
    per_set: dict[str, list[int]] = {s: [0, 0] for s in SETS}
    missed = []
    for case in cases:
        right = is_right(segment, case)
        per_set[case["set"]][0] += right
        per_set[case["set"]][1] += 1
        if not right:
            missed.append(case["id"])
    return per_set, missed


def timed(segment: Segment, document: list[tuple[str, str]]) -> float:
    """Seconds to segment every paragraph of `document` ((text, language) pairs)."""
    t0 = time.perf_counter()
    for text, language in document:
        segment(text, language)
    return time.perf_counter() - t0


def run(repeat: int, rounds: int) -> dict[str, Any]:
    """Accuracy and speed of every available candidate."""
    cases = load_cases()
    candidates = available()
    document = [(c["text"], c["language"]) for c in cases] * repeat
    n_sentences = sum(len(c["sentences"]) for c in cases) * repeat
    best = {name: float("inf") for name in candidates}
    for _ in range(rounds):
        for name, (_, segment) in candidates.items():
            best[name] = min(best[name], timed(segment, document))
    report: dict[str, Any] = {"cases": {s: sum(c["set"] == s for c in cases) for s in SETS},
                              "document": {"paragraphs": len(document), "sentences": n_sentences,
                                           "chars": sum(len(t) for t, _ in document)},
                              "libraries": {}}
    fastest = min(best.values())
    for name, (version, segment) in candidates.items():
        per_set, missed = accuracy(segment, cases)
        report["libraries"][name] = {
            "version": version, "right": {s: per_set[s][0] for s in SETS},
            "right_total": sum(r for r, _ in per_set.values()),
            "sentences_per_s": round(n_sentences / best[name]),
            "time_vs_fastest": round(best[name] / fastest, 2), "missed": missed}
    return report


def table(report: dict[str, Any]) -> str:
    """The report as a Markdown table."""
    cases = report["cases"]
    head = ["library"] + [f"{s} ({cases[s]})" for s in SETS] + [f"all ({sum(cases.values())})", "sentences/s",
                                                                 "time vs fastest"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in report["libraries"].items():
        row = [f"{name} {r['version']}"] + [str(r["right"][s]) for s in SETS] + [
            str(r["right_total"]), f"{r['sentences_per_s']:,}", f"{r['time_vs_fastest']:.2f}x"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI: the table, the misses per library, then the JSON line."""
    ap = argparse.ArgumentParser(prog="python -m bench.segmentation", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=20, help="copies of the cases in the timed document")
    ap.add_argument("--rounds", type=int, default=5, help="timings per segmenter; the best counts")
    args = ap.parse_args(argv)
    report = run(args.repeat, args.rounds)
    print(table(report))
    for name, r in report["libraries"].items():
        print(f"{name} misses: {' '.join(r['missed']) or '-'}")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
