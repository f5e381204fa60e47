"""Translate a split with greedy or beam search and report exact match, BLEU and chrF.

    python -m model.evaluate --checkpoint artifacts/default/model.pt --split data/corpus/test.tsv
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

import sacrebleu
import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from model.checkpoint import load_checkpoint, tokenizer_path
from model.data import pad, read_tsv
from model.decoding import beam_search, greedy_decode
from model.tokenizer import load_tokenizer
from model.transformer import Transformer


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
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--split", required=True, help="TSV file: source<TAB>target")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="evaluate only the first N pairs")
    ap.add_argument("--errors", type=int, default=5, help="print up to N wrong outputs")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    model, state = load_checkpoint(a.checkpoint, a.device)
    tok = load_tokenizer(tokenizer_path(a.checkpoint, state))
    pairs = read_tsv(a.split)[: a.limit or None]
    scores, hyps = evaluate(model, tok, pairs, a.beam, progress=True)
    wrong = [(s, t, h) for (s, t), h in zip(pairs, hyps, strict=True) if h != t]
    for s, t, h in wrong[: a.errors]:
        print(f"SRC {s}\nREF {t}\nHYP {h}\n")
    print(json.dumps(scores.as_dict()))


if __name__ == "__main__":
    main()
