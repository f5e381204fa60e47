"""Constrained beam search (service/runtime/decoding/constrained_beam.py) against an independent oracle: on a
purpose-made model of a tiny vocabulary, exhaustive branch-and-bound search over log-probs finds the best
sequence that holds every required phrase; a beam wide enough to keep every candidate must return it, a
narrower one must still hold every phrase. The phrase automata (constraints.py) against plain suffix
matching."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from service.domain.constraints import ConstraintSet
from service.domain.types import DecodeOptions
from service.runtime.decoding.constrained_beam import ConstrainedBeamSearch
from service.runtime.decoding.constraints import Tracker
from service.runtime.decoding.search import length_penalty
from tests.support.phrase_model import EOS, PAD, WORDS, V, holds, model_logp

TIE = 1e-4  # scores closer than this are a tie (float32 sums against float64 ones)


def oracle(seed: int, phrases: list[list[tuple[int, ...]]], max_tokens: int, alpha: float
           ) -> list[tuple[float, tuple[int, ...]]]:
    """Exhaustive branch and bound: every sequence (ended by eos, or max_tokens long) that holds every
    phrase, with its score (the float64 sum of log-probs over GNMT's length penalty), best first; a prefix
    is cut when even the best score it could reach (its sum over the largest penalty: log-probs only
    lower it) is below the second best found."""
    found: list[tuple[float, tuple[int, ...]]] = []
    floor = length_penalty(max_tokens, alpha)

    def bound() -> float:
        return sorted(s for s, _ in found)[-2] if len(found) >= 2 else -math.inf

    def walk(prefix: tuple[int, ...], total: float) -> None:
        if total / floor < bound():
            return
        logp = model_logp(seed, prefix).astype(np.float64)
        for token in (EOS, *WORDS):
            seq, s = (*prefix, token), total + logp[token]
            body = seq[:-1] if token == EOS else seq
            if token == EOS or len(seq) == max_tokens:
                if all(holds(body, forms) for forms in phrases):
                    found.append((s / length_penalty(len(seq), alpha), body))
            else:
                walk(seq, s)

    walk((), 0.0)
    return sorted(found, reverse=True)


def decode(seed: int, phrases: list[list[tuple[int, ...]]], max_tokens: int, beam: int, alpha: float,
           n_best: int = 1) -> list:
    """Constrained beam search over the purpose-made model (each row's log-probs from its own tokens)."""
    options = DecodeOptions(beam_size=beam, n_best=n_best, max_output_tokens=max_tokens, length_penalty=alpha,
                            required_phrases=[[list(f) for f in forms] for forms in phrases]
                            ).resolved(max_tokens + 1, beam, vocab_size=V)
    search = ConstrainedBeamSearch(options, 1, EOS, PAD)
    while not search.done:
        rows = [tuple(search.tokens[j, : search.steps]) for j in range(beam)]
        logp = np.stack([model_logp(seed, tuple(t for t in r if t != PAD)) if search.scores[j] > -np.inf
                         else np.zeros(V, np.float32) for j, r in enumerate(rows)])
        search.advance(logp, None)
    return search.results()


CASES = {  # phrases (each a list of forms, tokens of distinct phrases distinct), max tokens
    "one phrase": ([[(2, 3)]], 5),
    "two phrases": ([[(2,)], [(4, 5)]], 5),
    "disjunction": ([[(3,), (4, 5)]], 4),
    "tight": ([[(2, 3)], [(4, 5)]], 4),
}


@pytest.mark.parametrize("alpha", [0.0, 0.8])
@pytest.mark.parametrize("case", list(CASES))
def test_a_wide_beam_finds_the_exhaustive_best(case: str, alpha: float) -> None:
    phrases, max_tokens = CASES[case]
    for seed in range(4):
        want = oracle(seed, phrases, max_tokens, alpha)
        got = decode(seed, phrases, max_tokens, len(WORDS) ** max_tokens + 8, alpha)[0]
        assert got.unmet == ()
        near = [seq for s, seq in want if s >= want[0][0] - TIE]  # the best, and any tie with it
        assert tuple(got.tokens) in near, (seed, got.tokens, want[:2])
        assert abs(got.score - want[0][0]) < TIE


@pytest.mark.parametrize("beam", [1, 2, 4])
@pytest.mark.parametrize("case", list(CASES))
def test_narrow_beams_hold_every_phrase(case: str, beam: int) -> None:
    phrases, max_tokens = CASES[case]
    for seed in range(4):
        for h in decode(seed, phrases, max_tokens, beam, 0.6, n_best=beam):
            assert h.unmet == () and all(holds(tuple(h.tokens), forms) for forms in phrases)


def test_phrases_too_long_for_the_length_are_reported() -> None:
    phrases = [[(2, 3)], [(4, 5)], [(2, 5)]]  # 6 tokens in 4
    for seed in range(3):
        (best,) = decode(seed, phrases, 4, 4, 0.0)
        lacking = tuple(i for i, forms in enumerate(phrases) if not holds(tuple(best.tokens), forms))
        assert best.unmet == lacking and 1 <= len(lacking) < len(phrases)


def test_the_automata_meet_a_phrase_exactly_when_the_tokens_hold_it() -> None:
    """Every form's state and every met flag against suffix matching, on random sequences of few tokens
    (so that forms overlap, repeat and restart)."""
    rng = np.random.default_rng(3)
    phrases = [[(2, 2, 3)], [(3, 2, 3, 2), (4,)], [(2, 3, 2, 2)]]
    tracker = Tracker(ConstraintSet.of(phrases))
    for _ in range(200):
        rows = rng.integers(2, 5, (8, 12))  # 8 rows advanced together
        states, met = tracker.start(len(rows))
        for step in range(rows.shape[1]):
            states, met = tracker.advance(states, met, rows[:, step])
            for row, row_states, row_met in zip(rows[:, : step + 1].tolist(), states, met, strict=True):
                seq = tuple(row)
                for form, s in zip(tracker.forms, row_states.tolist(), strict=True):
                    assert s == max(n for n in range(len(form) + 1) if seq[len(seq) - n :] == form[:n]
                                    or n == 0)
                assert row_met.tolist() == [holds(seq, forms) for forms in phrases]


def test_needed_is_the_fewest_tokens_for_distinct_phrases() -> None:
    """`needed` against brute force: the shortest continuation that makes the tokens hold every phrase."""
    phrases = [[(2, 3)], [(4,), (5, 5, 5)]]
    tracker = Tracker(ConstraintSet.of(phrases))
    for seq in itertools.product((0, 2, 3, 4, 5), repeat=3):  # 0: a token outside every phrase
        states, met = tracker.walk(seq)
        fewest = next(n for n in range(6) for tail in itertools.product((2, 3, 4, 5), repeat=n)
                      if all(holds(seq + tail, forms) for forms in phrases))
        assert tracker.needed(states, met).tolist() == [fewest], seq
