"""Scoring by forced decoding (service/runtime/decoding/scoring.py): the score of a greedy output is the
log-prob the search reported, in both cache layouts and both backends; one decoder run per chunk agrees with
one run per position; the end token is scored unless the target is as long as a translation cut at the model's
maximum length (then PyTorch's teacher-forced log-probs of exactly its tokens), and a longer one is refused;
bad pairs are refused with a message naming the problem. (The PyTorch / transformers oracles of ordinary
targets are in tests/export/test_scoring_oracles.py.)"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from interface.names import INPUT_IDS
from service.domain.errors import InvalidInput
from service.domain.types import DecodeOptions, ScoreOptions
from service.runtime.decoding.scoring import ENCODE_FACTOR, score_requests
from tests.support.scoring import cut_translation


def greedy(runner, texts):
    """Best greedy hypothesis of each text."""
    return [h[0] for h in runner.translate(texts)]


def score_ids(runner, sources: list[str], targets: Sequence[Sequence[int]],
              options: ScoreOptions | None = None):
    """Score of targets given as token ids (the target tokenizer's ids, taken as they are): Runner.score's
    path after tokenization, so that a generated sequence is scored whatever its text re-tokenizes to."""
    requests = score_requests(sources, [""] * len(targets), options or ScoreOptions(), runner.spec,
                              runner.languages, runner.tasks, runner.encode_texts,
                              lambda _: [list(t) for t in targets],
                              runner.vocab_size)
    return runner.new_scorer().score(requests)


def teacher_forced(model, source: list[int], target: list[int]) -> np.ndarray:
    """PyTorch's log P(target[j] | source, target[:j]) of the tiny model (decoder start bos), float64."""
    import torch

    from model.transformer import padding_mask

    with torch.inference_mode():
        src = torch.tensor([source])
        mask = padding_mask(src, model.cfg.pad_id)
        ids = torch.tensor([[model.cfg.bos_id, *target[:-1]]])
        logp = model.decode(ids, model.cross_kv(model.encode(src, mask)), mask)[0][0].double().numpy()
    return logp[np.arange(len(target)), target]


def test_the_score_of_a_greedy_output_is_the_log_prob_the_search_reported(layout_runner, texts):
    hyps = greedy(layout_runner, texts)
    scored = layout_runner.score(texts, [h.text for h in hyps])
    for hyp, s in zip(hyps, scored, strict=True):
        assert s.end_token_scored == (hyp.finish_reason == "eos")  # a cut one: no eos, scored without
        body = s.target_ids[:-1] if s.end_token_scored else s.target_ids
        assert body == hyp.tokens  # the text tokenizes back to what was generated
        if s.end_token_scored:
            assert s.target_ids[-1] == layout_runner.special.eos
        assert len(s.log_probs) == len(s.target_ids)
        assert s.log_prob == pytest.approx(hyp.log_prob, abs=1e-5)
        assert s.log_prob == pytest.approx(sum(s.log_probs))
        assert s.score == pytest.approx(s.log_prob / len(s.target_ids))
        assert s.alignment is None


def test_alignment_rows_are_the_greedy_searchs(layout_runner, texts):
    hyps = [h[0] for h in layout_runner.translate(texts[:3], _aligned())]
    scored = layout_runner.score(texts[:3], [h.text for h in hyps], ScoreOptions(return_alignment=True))
    for hyp, s in zip(hyps, scored, strict=True):
        assert len(s.alignment) == len(s.target_ids) and {len(r) for r in s.alignment} == {len(s.source_ids)}
        assert len(hyp.alignment) == len(s.alignment) - s.end_token_scored  # the search's: no eos row
        for got, want in zip(s.alignment, hyp.alignment, strict=False):
            assert got == pytest.approx(want, abs=1e-5)
            assert sum(got) == pytest.approx(1.0, abs=1e-4)


def _aligned():
    from service.domain.types import DecodeOptions

    return DecodeOptions(return_alignment=True)


def test_every_scoring_mode_gives_the_same_numbers(layout_runner, texts):
    targets = [h.text for h in greedy(layout_runner, texts)]
    targets[0] = targets[-1]  # a target that is not the greedy output scores too
    requests = layout_runner.score_requests(texts, targets, ScoreOptions(return_alignment=True))
    auto = layout_runner.new_scorer(4).score(requests)
    for mode in ("steps", *(["windows"] if layout_runner.kv_cache == "concat" else [])):
        other = layout_runner.new_scorer(4, mode).score(requests)
        for a, b in zip(auto, other, strict=True):
            assert a.log_probs == pytest.approx(b.log_probs, abs=1e-5)
            for row_a, row_b in zip(a.alignment, b.alignment, strict=True):
                assert row_a == pytest.approx(row_b, abs=1e-5)


def test_chunks_and_their_order_do_not_change_a_score(runner, texts):
    targets = [h.text for h in greedy(runner, texts)][::-1]  # mismatched pairs: low scores, still finite
    one = runner.score(texts, targets, max_rows=64)
    many = runner.score(texts, targets, max_rows=2)
    alone = [runner.score([s], [t])[0] for s, t in zip(texts, targets, strict=True)]
    for a, b, c in zip(one, many, alone, strict=True):
        assert math.isfinite(a.log_prob)
        assert a.log_probs == pytest.approx(b.log_probs, abs=1e-5) == c.log_probs


def test_an_empty_target_scores_eos_alone(runner, texts):
    (s,) = runner.score(texts[:1], [""])
    assert s.target_ids == [runner.special.eos] and len(s.log_probs) == 1 and s.score == s.log_prob < 0
    assert s.end_token_scored


@pytest.mark.parametrize(("sources", "targets", "message"), [
    ([], [], "no (source, target) pair"),
    (["a b"], [], "1 source(s) but 0 target(s)"),
    (["a b", "c"], ["x"], "2 source(s) but 1 target(s)"),
    ("a b", "x", "sources must be a list of strings"),
    ([""], ["x"], "text 0 is empty"),
    (["a"], [3], "target text 0 must be a string"),
])
def test_bad_pairs_are_refused_saying_what_is_wrong(runner, sources, targets, message):
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(").replace(")", r"\)")):
        runner.score(sources, targets)


def test_a_target_longer_than_the_model_takes_is_refused(runner, texts):
    word = texts[0].split()[0]
    with pytest.raises(InvalidInput, match=f"target 0 is .* tokens long; the model scores at most "
                                           f"{runner.max_len - 1}: "):
        runner.score(texts[:1], [" ".join([word] * runner.max_len)])


@pytest.mark.parametrize("prefix", [None, "the"], ids=["free", "target-prefix"])
def test_a_translation_cut_at_the_maximum_length_is_scored_without_the_end_token(runner, tiny_model, texts,
                                                                                   prefix):
    limit = runner.max_len - 1  # a translation generates at most max_len - 1 tokens, eos and prefix included
    hyp = cut_translation(runner, texts[0], DecodeOptions(target_prefix=prefix))
    forced = runner.encode_target([prefix])[0] if prefix else []
    assert hyp.tokens[: len(forced)] == forced
    (s,) = score_ids(runner, texts[:1], [hyp.tokens])
    assert not s.end_token_scored and s.target_ids == hyp.tokens and len(s.log_probs) == limit
    source = runner.encode_texts(texts[:1])[0]
    assert s.source_ids == source
    np.testing.assert_allclose(s.log_probs, teacher_forced(tiny_model, source, hyp.tokens), atol=1e-4)
    assert s.log_prob == pytest.approx(sum(s.log_probs)) and s.score == pytest.approx(s.log_prob / limit)
    if prefix is None:  # nothing forced: the search summed the same log-probs (a forced prefix adds 0 there)
        assert s.log_prob == pytest.approx(hyp.log_prob, rel=1e-5, abs=1e-4)
    (text,) = runner.score(texts[:1], [hyp.text])  # as a text: the same, when it tokenizes back
    if runner.encode_target([hyp.text])[0] == hyp.tokens:
        assert not text.end_token_scored and text.log_probs == pytest.approx(s.log_probs, abs=1e-6)
    refused = f"target 0 is {limit + 1} tokens long; the model scores at most {limit}: .*end token"
    with pytest.raises(InvalidInput, match=f"{refused}.*appended, one of exactly {limit} .*without it"):
        score_ids(runner, texts[:1], [[*hyp.tokens, hyp.tokens[-1]]])


def test_a_target_shorter_than_a_cut_translation_is_scored_with_the_end_token(runner, tiny_model, texts):
    eos, limit = runner.special.eos, runner.max_len - 1
    ended = [(t, h) for t, h in zip(texts, greedy(runner, texts), strict=True) if h.finish_reason == "eos"]
    assert ended, "no greedy translation of the test texts ended with eos"
    cut = cut_translation(runner, texts[0]).tokens
    pairs = [(ended[0][0], ended[0][1].tokens), (texts[0], cut[:-1])]  # a finished one; one token short
    scored = score_ids(runner, [t for t, _ in pairs], [ids for _, ids in pairs])
    for (text, ids), s in zip(pairs, scored, strict=True):
        assert s.end_token_scored and s.target_ids == [*ids, eos] and len(s.target_ids) <= limit
        want = teacher_forced(tiny_model, runner.encode_texts([text])[0], [*ids, eos])
        np.testing.assert_allclose(s.log_probs, want, atol=1e-4)
        assert s.score == pytest.approx(float(want.sum()) / (len(ids) + 1), abs=1e-4)
    assert scored[0].log_prob == pytest.approx(ended[0][1].log_prob, abs=1e-4)  # eos scored as generated


def test_a_many_to_many_models_cut_translation_is_scored_without_its_end_token(m2m_runner):
    limit = m2m_runner.max_len - 1
    asked = DecodeOptions(source_language="en", target_language="de")
    hyp = cut_translation(m2m_runner, "hello world", asked)
    de = m2m_runner.languages.codes["de"]
    assert hyp.tokens[0] == de  # the forced language token counts in the limit: limit - 1 target tokens
    options = ScoreOptions(source_language="en", target_language="de")
    (s,) = score_ids(m2m_runner, ["hello world"], [hyp.tokens[1:]], options)
    assert not s.end_token_scored and s.target_ids == hyp.tokens[1:] and len(s.log_probs) == limit - 1
    assert s.log_prob == pytest.approx(hyp.log_prob, rel=1e-5, abs=1e-4)  # the forced token adds 0 there
    (short,) = score_ids(m2m_runner, ["hello world"], [hyp.tokens[1:-1]], options)
    assert short.end_token_scored and short.target_ids == [*hyp.tokens[1:-1], m2m_runner.special.eos]
    with pytest.raises(InvalidInput, match=f"target 0 is {limit} tokens long; the model scores at most "
                                           f"{limit - 1}: "):
        score_ids(m2m_runner, ["hello world"], [[*hyp.tokens[1:], hyp.tokens[-1]]], options)


def test_a_many_to_many_model_needs_its_languages_and_does_not_count_the_forced_token(m2m_runner):
    with pytest.raises(InvalidInput, match="target_language"):
        m2m_runner.score(["hello world"], ["hallo welt"], ScoreOptions(source_language="en"))
    options = ScoreOptions(source_language="en", target_language="de")
    (s,) = m2m_runner.score(["hello world"], ["hallo welt"], options)
    de = m2m_runner.languages.codes["de"]
    assert de not in s.target_ids and len(s.log_probs) == len(s.target_ids)
    assert s.source_ids[0] == m2m_runner.languages.codes["en"]
    from service.domain.types import DecodeOptions

    asked = DecodeOptions(source_language="en", target_language="de")
    hyp = m2m_runner.translate(["hello world"], asked)[0][0]
    assert hyp.tokens[0] == de
    (g,) = m2m_runner.score(["hello world"], [hyp.text], options)
    if (g.target_ids[:-1] if g.end_token_scored else g.target_ids) == hyp.tokens[1:]:  # it tokenizes back
        assert g.end_token_scored == (hyp.finish_reason == "eos")
        assert g.log_prob == pytest.approx(hyp.log_prob, abs=1e-5)


@pytest.mark.parametrize("run_tokens", [1, 3, 7, 10_000])
def test_windows_of_any_size_give_the_numbers_of_one_position_per_run(layout_runner, texts, run_tokens):
    if layout_runner.kv_cache != "concat":
        pytest.skip("windows of several positions need a concatenated cache")
    targets = [h.text for h in greedy(layout_runner, texts)]
    requests = layout_runner.score_requests(texts, targets, ScoreOptions(return_alignment=True))
    steps = layout_runner.new_scorer(4, "steps").score(requests)
    windows = layout_runner.new_scorer(4, "windows", run_tokens).score(requests)
    for a, b in zip(steps, windows, strict=True):
        assert a.log_probs == pytest.approx(b.log_probs, abs=1e-5)
        for row_a, row_b in zip(a.alignment, b.alignment, strict=True):
            assert row_a == pytest.approx(row_b, abs=1e-5)


def test_every_run_stays_within_its_token_bounds(layout_runner, texts, monkeypatch):
    runner = layout_runner
    targets = [h.text for h in greedy(runner, texts)][::-1]
    requests = runner.score_requests(texts, targets)
    scorer = runner.new_scorer(8, run_tokens=6)
    decoded, encoded = [], []
    decode, encode = scorer.backend.decode, scorer.backend.encode
    monkeypatch.setattr(scorer.backend, "decode", lambda feeds, past, **kw: decoded.append(
        feeds[INPUT_IDS].shape) or decode(feeds, past, **kw))
    monkeypatch.setattr(scorer.backend, "encode", lambda feeds: encoded.append(feeds[INPUT_IDS].shape)
                        or encode(feeds))
    work = scorer.work(requests)
    answered = []
    while not work.done:
        runs = len(decoded) + len(encoded)
        answered += work.advance()
        assert len(decoded) + len(encoded) == runs + 1  # one model run per advance
    assert sorted(i for i, _ in answered) == list(range(len(requests)))
    assert max(rows * new for rows, new in decoded) <= 6
    assert all(rows == 1 or rows * src <= ENCODE_FACTOR * 6 for rows, src in encoded)
    want = runner.new_scorer(64, "steps").score(requests)
    for i, got in answered:
        assert got.log_probs == pytest.approx(want[i].log_probs, abs=1e-5)


def test_a_withdrawn_chunk_is_not_run(runner, texts):
    requests = runner.score_requests(texts[:4], [h.text for h in greedy(runner, texts[:4])])
    work = runner.new_scorer(2, "steps").work(requests)  # two chunks of two
    first = sorted(range(4), key=lambda i: len(requests[i].target))[:2]
    for i in range(4):
        if i not in first:
            work.withdraw(i)
    answered = []
    while not work.done:
        answered += work.advance()
    assert sorted(i for i, _ in answered) == sorted(first)
