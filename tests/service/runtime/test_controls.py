"""The batch's controls (service/runtime/decoding/controls.py) and sampling warpers (sampling.py) against
transformers' own logits processors on random scores and histories: the same tokens removed, the same values
changed.

Greedy rows see raw logits in transformers; the decoder gives log-probs and their normalizer c
(logits = logp + c), so a processed greedy row must equal log_softmax(processor(logits))."""

from __future__ import annotations

import numpy as np
import pytest

from service.domain.types import DecodeOptions
from service.runtime.decoding import controls, sampling
from service.runtime.decoding.controls import RowGroup, TokenHistory

torch = pytest.importorskip("torch")
generation = pytest.importorskip("transformers.generation.logits_process")

V, MAX_LEN, START = 40, 32, 0


def warp(logp: np.ndarray, options) -> np.ndarray:
    """A row's (V,) scores after our warpers, as transformers' warpers leave them: logp / temperature where
    kept (sampling.candidates), -inf where removed (float32)."""
    scores = np.divide(logp, np.float32(options.temperature or 1.0), dtype=np.float32)
    ids, _ = sampling.candidates(logp, options)
    if ids is None:
        return scores
    out = np.full_like(scores, -np.inf)
    out[ids] = scores[ids]
    return out


def histories(rng: np.random.Generator, rows: int, lengths: list[int]
              ) -> tuple[TokenHistory, list[list[int]]]:
    """A TokenHistory of `rows` rows with random tokens drawn from a few ids (so that tokens and n-grams
    repeat), and the same as lists (decoder start first, as transformers' input_ids)."""
    history = TokenHistory(MAX_LEN)
    history.grow(rows)
    history.start(np.arange(rows), START)
    lists = []
    for r, n in enumerate(lengths):
        tokens = rng.integers(1, 6, n).tolist()
        for t in tokens:
            history.append(np.array([r]), np.array([t]))
        lists.append([START, *tokens])
    return history, lists


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64."""
    x = x.astype(np.float64)
    return x - np.logaddexp.reduce(x, axis=-1, keepdims=True)


def hf(processor, ids: list[int], scores: np.ndarray) -> np.ndarray:
    """A transformers processor on one row."""
    out = processor(torch.tensor([ids]), torch.tensor(scores[None].astype(np.float32)).clone())
    return out[0].double().numpy()


def resolved(**options) -> object:
    """Options as the batch sees them."""
    return DecodeOptions(**options).resolved(MAX_LEN, 8, vocab_size=V)


@pytest.mark.parametrize("penalty", [1.3, 0.6, 2.0])
def test_repetition_penalty_on_logits_and_on_log_probs(penalty):
    rng = np.random.default_rng(1)
    history, ids = histories(rng, 4, [3, 7, 1, 12])
    logits = rng.normal(0, 3, (4, V)) + np.array([4.0, -2.0, 0.5, 8.0])[:, None]  # signs of both kinds
    logp = log_softmax(logits)
    c = np.logaddexp.reduce(logits, axis=-1)
    ours = logp.astype(np.float32)
    on_logits = np.array([True, True, False, False])
    controls.repetition_penalty(ours, c.astype(np.float32), np.arange(4), np.full(4, penalty), on_logits,
                                history)
    proc = generation.RepetitionPenaltyLogitsProcessor(penalty)
    for r in range(4):
        if on_logits[r]:  # greedy: transformers penalizes the logits; the row is log-probs again after
            want = log_softmax(hf(proc, ids[r], logits[r].astype(np.float32)))
        else:  # beam: transformers penalizes the log-probs, not normalized again
            want = hf(proc, ids[r], logp[r].astype(np.float32))
        np.testing.assert_allclose(ours[r], want, rtol=1e-5, atol=2e-5)
        assert not np.allclose(ours[r], logp[r], atol=1e-3)  # something was penalized


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_no_repeat_ngram_bans_what_transformers_bans(n):
    rng = np.random.default_rng(n)
    lengths = [0, 1, 4, 9, 15, 2, 25, 30]
    history, ids = histories(rng, len(lengths), lengths)
    logp = log_softmax(rng.normal(size=(len(lengths), V))).astype(np.float32)
    ours = logp.copy()
    controls.no_repeat_ngrams(ours, np.arange(len(lengths)), np.full(len(lengths), n), history)
    proc = generation.NoRepeatNGramLogitsProcessor(n)
    banned = 0
    for r in range(len(lengths)):
        want = hf(proc, ids[r], logp[r])
        np.testing.assert_array_equal(np.isneginf(ours[r]), np.isneginf(want))
        banned += int(np.isneginf(want).sum())
    assert banned > 0


def test_suppressed_sequences_and_min_length_and_unk_as_transformers():
    rng = np.random.default_rng(5)
    lengths = [2, 6, 10]
    history, ids = histories(rng, 3, lengths)
    bad = [(7,), (ids[1][-1], 9), (ids[2][-2], ids[2][-1], 11), (30, 31)]
    opts = [resolved(suppress_sequences=[list(b) for b in bad], min_output_tokens=m, disable_unk=True)
            for m in (1, 3, 12)]
    logp = log_softmax(rng.normal(size=(3, V))).astype(np.float32)
    ours = logp.copy()
    eos, unk = 2, 3
    controls.apply(ours, None, RowGroup(np.arange(3), opts, np.ones(3, bool)), history, eos, unk)
    for r in range(3):
        no_bad = generation.NoBadWordsLogitsProcessor([list(b) for b in bad], eos_token_id=eos)
        want = hf(no_bad, ids[r], logp[r])
        # transformers' min_length counts the decoder start: ours + 1
        want = hf(generation.MinLengthLogitsProcessor(opts[r].min_output_tokens + 1, eos), ids[r], want)
        want[unk] = -np.inf
        np.testing.assert_array_equal(np.isneginf(ours[r]), np.isneginf(want))
    assert np.isneginf(ours[:, 7]).all() and np.isneginf(ours[1, 9]) and np.isneginf(ours[2, 11])
    assert not np.isneginf(ours[0, 9]) and not np.isneginf(ours[:, 31]).any()
    assert [bool(np.isneginf(ours[r, eos])) for r in range(3)] == [False, False, True]


def test_begin_suppression_at_the_first_free_position():
    logp = np.zeros((3, V), np.float32)
    controls.suppress_at_begin(logp, np.array([0, 2]), [4, 5])
    assert np.isneginf(logp[[0, 2]][:, [4, 5]]).all() and not np.isneginf(logp[1]).any()
    assert np.isneginf(logp).sum() == 4


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(0.7, 0, 1.0), (1.0, 5, 1.0), (1.3, 0, 0.8),
                                                             (0.5, 7, 0.6), (1.0, 1, 1.0)])
def test_warpers_keep_what_transformers_keeps(temperature, top_k, top_p):
    rng = np.random.default_rng(int(top_k * 10 + top_p * 10))
    logp = log_softmax(rng.normal(0, 2, V)).astype(np.float32)
    ours = warp(logp, resolved(temperature=temperature, top_k=top_k, top_p=top_p))
    want = torch.tensor(logp[None])
    for warper in (generation.TemperatureLogitsWarper(temperature),
                   *( [generation.TopKLogitsWarper(top_k)] if top_k else []),
                   *( [generation.TopPLogitsWarper(top_p)] if top_p < 1 else [])):
        want = warper(torch.zeros(1, 1, dtype=torch.long), want)
    want = want[0].double().numpy()
    np.testing.assert_array_equal(np.isneginf(ours), np.isneginf(want))
    kept = ~np.isneginf(want)
    np.testing.assert_allclose(ours[kept], want[kept], rtol=1e-5, atol=1e-5)


def test_draws_follow_the_warped_softmax():
    """Chi-square goodness of fit of 20000 seeded draws against softmax of the warped scores, at the 0.1%
    significance level (the test fails by chance once in a thousand seeds; this seed is fixed)."""
    rng = np.random.default_rng(11)
    logp = log_softmax(rng.normal(0, 1.5, V)).astype(np.float32)
    options = resolved(temperature=0.8, top_k=12, seed=3)
    scores = warp(logp, options).astype(np.float64)
    probs = np.exp(scores - np.logaddexp.reduce(scores))
    draws, kept = sampling.generator(options), sampling.candidates(logp, options)
    counts = np.bincount([sampling.draw(*kept, draws) for _ in range(20_000)], minlength=V)
    kept = probs > 0
    assert counts[~kept].sum() == 0  # never a removed token
    expected = probs[kept] * counts.sum()
    statistic = float(((counts[kept] - expected) ** 2 / expected).sum())
    dof = int(kept.sum()) - 1  # p-value: the regularized upper incomplete gamma Q(dof / 2, statistic / 2)
    p_value = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                            torch.tensor(statistic / 2, dtype=torch.float64)))
    assert p_value > 1e-3, (statistic, dof)


def test_a_seed_draws_the_same_tokens():
    options = resolved(temperature=1.0, seed=42)
    kept = sampling.candidates(log_softmax(np.linspace(0, 3, V)).astype(np.float32), options)
    first, second = sampling.generator(options), sampling.generator(options)
    drawn = [sampling.draw(*kept, first) for _ in range(50)]
    assert drawn == [sampling.draw(*kept, second) for _ in range(50)] and len(set(drawn)) > 1
