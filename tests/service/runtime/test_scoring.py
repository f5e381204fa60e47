"""Scoring by forced decoding (service/runtime/scoring.py): the score of a greedy output is the log-prob the
search reported, in both cache layouts and both backends; one decoder run per chunk agrees with one run
per position; bad pairs are refused with a message naming the problem. (The PyTorch / transformers
oracles are in tests/export/test_scoring_oracles.py.)"""

from __future__ import annotations

import math

import pytest

from service.domain.errors import InvalidInput
from service.domain.types import ScoreOptions


def greedy(runner, texts):
    """Best greedy hypothesis of each text."""
    return [h[0] for h in runner.translate(texts)]


def test_the_score_of_a_greedy_output_is_the_log_prob_the_search_reported(layout_runner, texts):
    hyps = greedy(layout_runner, texts)
    scored = layout_runner.score(texts, [h.text for h in hyps])
    for hyp, s in zip(hyps, scored, strict=True):
        assert s.target_ids[:-1] == hyp.tokens  # the text tokenizes back to what was generated
        assert s.target_ids[-1] == layout_runner.special.eos and hyp.finish_reason == "eos"
        assert len(s.log_probs) == len(s.target_ids)
        assert s.log_prob == pytest.approx(hyp.log_prob, abs=1e-5)
        assert s.log_prob == pytest.approx(sum(s.log_probs))
        assert s.score == pytest.approx(s.log_prob / len(s.target_ids))
        assert s.alignment is None


def test_alignment_rows_are_the_greedy_searchs(layout_runner, texts):
    hyps = [h[0] for h in layout_runner.translate(texts[:3], _aligned())]
    scored = layout_runner.score(texts[:3], [h.text for h in hyps], ScoreOptions(with_alignment=True))
    for hyp, s in zip(hyps, scored, strict=True):
        assert len(s.alignment) == len(s.target_ids) and {len(r) for r in s.alignment} == {len(s.source_ids)}
        assert len(hyp.alignment) in (len(s.alignment), len(s.alignment) - 1)  # the search's: eos row or not
        for got, want in zip(s.alignment, hyp.alignment, strict=False):
            assert got == pytest.approx(want, abs=1e-5)
            assert sum(got) == pytest.approx(1.0, abs=1e-4)


def _aligned():
    from service.domain.types import DecodeOptions

    return DecodeOptions(with_alignment=True)


def test_every_scoring_mode_gives_the_same_numbers(layout_runner, texts):
    targets = [h.text for h in greedy(layout_runner, texts)]
    targets[0] = targets[-1]  # a target that is not the greedy output scores too
    requests = layout_runner.score_requests(texts, targets, ScoreOptions(with_alignment=True))
    auto = layout_runner.new_scorer(4).score(requests)
    for mode in ("steps", *(["whole"] if layout_runner.kv_cache == "concat" else [])):
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
    with pytest.raises(InvalidInput, match=f"target 0 is .* tokens long .*; the model scores at most "
                                           f"{runner.max_len - 1}"):
        runner.score(texts[:1], [" ".join([word] * runner.max_len)])


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
    if g.target_ids[:-1] == hyp.tokens[1:] and hyp.finish_reason == "eos":  # the text tokenizes back
        assert g.log_prob == pytest.approx(hyp.log_prob, abs=1e-5)
