"""top(): the n largest scores, best first, ties by index, whether the sampled bound or the full partition
finds them; checked against a full stable sort."""

import numpy as np
import pytest

from service.runtime.decoding.topk import SAMPLED_FROM, STRIDE, top


def reference(values: np.ndarray, n: int) -> np.ndarray:
    """The first n of all indices sorted by value, best first, ties by index."""
    return np.lexsort((np.arange(len(values)), -values))[:n]


def log_probs(rng: np.random.Generator, rows: int, vocab: int) -> np.ndarray:
    """Beam candidates as a search sees them: per-row log-softmax plus each row's running score."""
    logits = rng.normal(size=(rows, vocab)) * 3
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return (logp + rng.normal(size=(rows, 1)) * 2).astype(np.float32).reshape(-1)


@pytest.mark.parametrize("n", [1, 4, 8, 16])
def test_beam_candidates_match_a_full_sort(n):
    """Log-probs of a 4-row beam over a vocabulary large enough for the sampled bound."""
    rng = np.random.default_rng(n)
    for _ in range(20):
        values = log_probs(rng, 4, 58_101)
        assert len(values) >= SAMPLED_FROM * n  # the sampled path is the one under test
        assert top(values, n).tolist() == reference(values, n).tolist()


def test_ties_at_the_bound_go_by_index():
    """Many equal values straddling the n-th place: the lowest indices win, as a stable sort says."""
    rng = np.random.default_rng(0)
    values = np.round(rng.normal(size=200_000), 1).astype(np.float32)  # ~40 distinct values, huge ties
    values[rng.choice(len(values), 5, replace=False)] = 9.0
    for n in (3, 5, 8, 12):
        assert top(values, n).tolist() == reference(values, n).tolist()


def test_the_sample_may_miss_the_best():
    """The best values all sit between sampled positions: the bound still keeps them."""
    values = np.full(100_000, -5.0, np.float32)
    values[np.arange(1, 100_000, STRIDE)[:40]] = np.linspace(0.0, 1.0, 40)
    values[::STRIDE] = -3.0  # every sampled position is worse than the best but better than the rest
    assert top(values, 8).tolist() == reference(values, 8).tolist()


@pytest.mark.parametrize("fill", [-np.inf, 0.0])
def test_flat_or_minus_inf_rows_fall_back_to_the_full_partition(fill):
    """Rows of one value (finished beams, -inf rows): the bound keeps everything; the answer is the same."""
    values = np.full(4 * 30_000, fill, np.float32)
    values[70_000:70_003] = [1.0, 2.0, 1.0]
    assert top(values, 8).tolist() == reference(values, 8).tolist()


def test_small_and_whole_inputs():
    """Fewer values than the sampled path needs, and n at least the length: a full stable sort."""
    rng = np.random.default_rng(3)
    values = rng.integers(0, 5, 50).astype(np.float32)
    assert top(values, 7).tolist() == reference(values, 7).tolist()
    assert top(values, 60).tolist() == reference(values, 60).tolist()
