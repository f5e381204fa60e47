"""Reference decoders: greedy, beam search, and a tiny model that learns its corpus."""

from __future__ import annotations

import pytest
import torch

from model.checkpoint import load_checkpoint, tokenizer_path
from model.data import pad, read_tsv
from model.decoding import beam_search, greedy_decode, length_penalty
from model.evaluate import evaluate
from model.tokenizer import load_tokenizer
from model.train import parse_args, train
from tests.support.corpus import TINY_MODEL_ARGS, tiny_pairs, write_tsv
from tests.support.model import tiny


def sources() -> torch.Tensor:
    """Three sources of different lengths, right-padded, each ending in eos."""
    torch.manual_seed(5)
    rows = [torch.randint(4, 40, (n,)).tolist() + [2] for n in (6, 3, 9)]
    return pad(rows, 0)


@torch.no_grad()
def teacher_forced_log_prob(m, src_row: torch.Tensor, tokens: list[int], finished: bool) -> float:
    """Sum of log p(y_t | y_<t, x) for the hypothesis (+ eos if finished)."""
    ys = tokens + ([2] if finished else [])
    tgt = torch.tensor([[1] + ys[:-1]])
    lp = m(src_row.unsqueeze(0), tgt)[0]
    return float(sum(lp[t, y] for t, y in enumerate(ys)))


def test_greedy_equals_beam_of_one():
    m = tiny(norm_first=True)
    src = sources()
    g = greedy_decode(m, src, 12)
    b = beam_search(m, src, 12, beam_size=1)
    assert [h.tokens for h in g] == [hs[0].tokens for hs in b]
    assert [round(h.log_prob, 4) for h in g] == [round(hs[0].log_prob, 4) for hs in b]


def test_greedy_is_batch_independent():
    m = tiny()
    src = sources()
    batched = greedy_decode(m, src, 10)
    for i in range(3):
        row = src[i : i + 1, : int((src[i] != 0).sum())]
        assert greedy_decode(m, row, 10)[0].tokens == batched[i].tokens


def test_beam_scores_are_sums_of_log_probs_and_sorted():
    m = tiny(norm_first=True)
    src = sources()
    for alpha in (0.0, 0.6):
        results = beam_search(m, src, 10, beam_size=4, n_best=3, alpha=alpha)
        for i, hyps in enumerate(results):
            assert len(hyps) == 3
            assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
            for h in hyps:
                ref = teacher_forced_log_prob(m, src[i], h.tokens, h.finished)
                assert abs(h.log_prob - ref) < 1e-3
                n = len(h.tokens) + int(h.finished)
                assert abs(h.score - h.log_prob / length_penalty(n, alpha)) < 1e-5


def test_beam_finds_at_least_greedy_score():
    m = tiny(norm_first=True)
    src = sources()
    greedy = greedy_decode(m, src, 10)
    beams = beam_search(m, src, 10, beam_size=5)
    for g, hs in zip(greedy, beams, strict=True):
        assert hs[0].log_prob >= g.log_prob - 1e-4


def test_alignment_rows_are_distributions_over_source():
    m = tiny()
    src = sources()
    hyps = beam_search(m, src, 6, beam_size=2, with_alignment=True)
    for hs in hyps:
        h = hs[0]
        assert len(h.alignment) == len(h.tokens)
        for row in h.alignment:
            assert len(row) == src.size(1)
            assert abs(sum(row) - 1) < 1e-4


@pytest.mark.kernels
def test_tiny_model_overfits_tiny_corpus(tmp_path):
    """20 sentences of the tiny task learned to 100% exact match within a bounded budget."""
    pairs = tiny_pairs(20, seed=7)
    data = write_tsv(tmp_path / "train.tsv", pairs)
    args = parse_args(["--train", str(data), "--valid", str(data), "--out", str(tmp_path / "run"),
                       *TINY_MODEL_ARGS,
                       "--label-smoothing", "0",
                       "--max-steps", "1000", "--eval-every", "50", "--target-em", "100"])
    best = train(args)
    assert best["exact_match"] == 100.0
    model, state = load_checkpoint(tmp_path / "run" / "best.pt")
    tok = load_tokenizer(tokenizer_path(tmp_path / "run" / "best.pt", state))
    scores, hyps = evaluate(model, tok, read_tsv(data))
    assert scores.exact_match == 100.0
    assert hyps == [t for _, t in pairs]
