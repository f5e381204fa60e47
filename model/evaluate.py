"""Translate a split with greedy or beam search and report exact match, BLEU and chrF, per class too.

    python -m model.evaluate --checkpoint artifacts/default/model.pt --split data/corpus/test.tsv
    python -m model.evaluate --hypotheses outputs.txt --split data/corpus/test.tsv   # no decoding

Besides the overall scores it prints a table of exact match by class (textnorm/verbalize.py tells the
classes of a source sentence from its written forms; a sentence counts toward every class it
contains, "plain" when it contains none) and the wrong outputs by class, each flagged when it
stutters (repeats a word twice in a row where the reference does not), and the share of sentences
whose text outside the classes comes back unchanged (`outside_unchanged`: every character between
the written forms copied, whatever the forms were read as; the measure of the near-miss split).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import sacrebleu
import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from model.checkpoint import load_checkpoint, tokenizer_path
from model.data import pad, read_tsv
from model.decoding import beam_search, greedy_decode
from model.tokenizer import load_tokenizer
from model.transformer import Transformer
from textnorm.verbalize import CLASSES, PATTERN, classes


@dataclass
class Scores:
    """Corpus-level metrics; exact match in percent."""

    exact_match: float
    bleu: float
    chrf: float
    n: int

    def as_dict(self) -> dict[str, float]:
        """Rounded plain dict."""
        return {"exact_match": round(self.exact_match, 2), "bleu": round(self.bleu, 2),
                "chrf": round(self.chrf, 2), "n": self.n}


def score(hyps: list[str], refs: list[str]) -> Scores:
    """Exact match, sacrebleu BLEU and chrF."""
    em = 100.0 * sum(h == r for h, r in zip(hyps, refs, strict=True)) / max(1, len(refs))
    bleu = sacrebleu.corpus_bleu(hyps, [refs]).score
    chrf = sacrebleu.corpus_chrf(hyps, [refs]).score
    return Scores(em, bleu, chrf, len(refs))


@dataclass
class ClassScore:
    """Exact match over the sentences that contain one class."""

    name: str
    n: int = 0
    correct: int = 0

    @property
    def exact_match(self) -> float:
        """Exact match in percent."""
        return 100.0 * self.correct / max(1, self.n)


@dataclass
class Error:
    """One wrong output, with the words it stutters."""

    source: str
    reference: str
    hypothesis: str
    stutters: list[str] = field(default_factory=list)


def sentence_classes(source: str) -> list[str]:
    """The classes of a source sentence in table order, ['plain'] when it has none."""
    found = classes(source)
    return [c for c in CLASSES if c in found] or ["plain"]


def class_scores(sources: list[str], hyps: list[str], refs: list[str]) -> list[ClassScore]:
    """Exact match by class, in table order; classes that never occur are left out."""
    rows = {name: ClassScore(name) for name in (*CLASSES, "plain")}
    for src, hyp, ref in zip(sources, hyps, refs, strict=True):
        for name in sentence_classes(src):
            rows[name].n += 1
            rows[name].correct += hyp == ref
    return [row for row in rows.values() if row.n]


def format_table(rows: list[ClassScore], overall: Scores | None = None) -> str:
    """A plain-text table: class, count, exact match."""
    lines = [f"{'class':<12}{'count':>8}{'EM %':>9}"]
    lines += [f"{r.name:<12}{r.n:>8}{r.exact_match:>9.2f}" for r in rows]
    if overall:
        lines.append(f"{'all':<12}{overall.n:>8}{overall.exact_match:>9.2f}")
    return "\n".join(lines)


def outside_unchanged(source: str, hypothesis: str) -> bool:
    """Whether the hypothesis holds the source's text outside its written forms unchanged, in order,
    with some text in place of each written form."""
    pieces, last = [], 0
    for m in PATTERN.finditer(source):
        pieces.append(re.escape(source[last : m.start()]))
        last = m.end()
    pieces.append(re.escape(source[last:]))
    return re.fullmatch(".+?".join(pieces), hypothesis, re.DOTALL) is not None


def outside_rate(sources: list[str], hyps: list[str]) -> float:
    """Percent of sentences whose text outside the written forms comes back unchanged."""
    kept = sum(outside_unchanged(s, h) for s, h in zip(sources, hyps, strict=True))
    return 100.0 * kept / max(1, len(sources))


def stutters(hyp: str, ref: str) -> list[str]:
    """Words the output repeats twice in a row more often than the reference does ('counted counted')."""
    def doubled(text: str) -> Counter[str]:
        words = [w.strip(".,!?;:") for w in text.split()]
        return Counter(a for a, b in pairwise(words) if a == b and a)

    extra = doubled(hyp) - doubled(ref)
    return sorted(extra)


def errors_by_class(sources: list[str], hyps: list[str], refs: list[str]) -> dict[str, list[Error]]:
    """The wrong outputs under each class their source contains, stutters flagged."""
    out: dict[str, list[Error]] = {name: [] for name in (*CLASSES, "plain")}
    for src, hyp, ref in zip(sources, hyps, refs, strict=True):
        if hyp != ref:
            error = Error(src, ref, hyp, stutters(hyp, ref))
            for name in sentence_classes(src):
                out[name].append(error)
    return {name: errs for name, errs in out.items() if errs}


def format_errors(errors: dict[str, list[Error]], per_class: int = 5) -> str:
    """Up to `per_class` wrong outputs under each class heading, stutters flagged."""
    lines = []
    for name, errs in errors.items():
        n_stutter = sum(bool(e.stutters) for e in errs)
        lines.append(f"== {name}: {len(errs)} wrong, {n_stutter} stuttering")
        for e in errs[:per_class]:
            flag = f"  [stutter: {' '.join(e.stutters)}]" if e.stutters else ""
            lines += [f"SRC {e.source}", f"REF {e.reference}", f"HYP {e.hypothesis}{flag}", ""]
    return "\n".join(lines)


def translate(
    model: Transformer,
    tok: Tokenizer,
    texts: list[str],
    beam_size: int = 1,
    batch_size: int = 64,
    progress: bool = False,
) -> list[str]:
    """Translate texts in length-sorted batches; keeps input order."""
    cfg = model.cfg
    device = next(model.parameters()).device
    ids = [e.ids[: cfg.max_len - 1] + [cfg.eos_id] for e in tok.encode_batch(texts, add_special_tokens=False)]
    order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
    out: list[str] = [""] * len(texts)
    for start in tqdm(range(0, len(order), batch_size), disable=not progress, desc="translate"):
        chunk = order[start : start + batch_size]
        src = pad([ids[i] for i in chunk], cfg.pad_id).to(device)
        budget = min(cfg.max_len - 1, 3 * src.size(1) + 10)
        if beam_size == 1:
            best = greedy_decode(model, src, budget)
        else:
            best = [h[0] for h in beam_search(model, src, budget, beam_size=beam_size)]
        for i, h in zip(chunk, best, strict=True):
            out[i] = tok.decode(h.tokens, skip_special_tokens=False)
    return out


def evaluate(model: Transformer, tok: Tokenizer, pairs: list[tuple[str, str]], beam_size: int = 1,
             progress: bool = False) -> tuple[Scores, list[str]]:
    """Translate the sources of pairs and score against the targets."""
    hyps = translate(model, tok, [s for s, _ in pairs], beam_size, progress=progress)
    return score(hyps, [t for _, t in pairs]), hyps


def main() -> None:
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="checkpoint to decode with")
    ap.add_argument("--hypotheses", type=Path,
                    help="score these outputs instead (one a line, in the split's order; no decoding)")
    ap.add_argument("--split", required=True, help="TSV file: source<TAB>target")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="evaluate only the first N pairs")
    ap.add_argument("--errors", type=int, default=5, help="print up to N wrong outputs per class")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    if bool(a.checkpoint) == bool(a.hypotheses):
        ap.error("give exactly one of --checkpoint and --hypotheses")
    pairs = read_tsv(a.split)[: a.limit or None]
    if a.hypotheses:
        hyps = a.hypotheses.read_text(encoding="utf-8").split("\n")[: len(pairs)]
        if len(hyps) < len(pairs):
            ap.error(f"{a.hypotheses} has {len(hyps)} lines for {len(pairs)} pairs")
        scores = score(hyps, [t for _, t in pairs])
    else:
        model, state = load_checkpoint(a.checkpoint, a.device)
        tok = load_tokenizer(tokenizer_path(a.checkpoint, state))
        scores, hyps = evaluate(model, tok, pairs, a.beam, progress=True)
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    if a.errors:
        print(format_errors(errors_by_class(sources, hyps, refs), a.errors))
    print(format_table(class_scores(sources, hyps, refs), scores))
    print(json.dumps({**scores.as_dict(), "outside_unchanged": round(outside_rate(sources, hyps), 2)}))


if __name__ == "__main__":
    main()
