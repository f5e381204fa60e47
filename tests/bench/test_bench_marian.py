"""The imported-Marian benchmark at its quick shape, end to end: built offline, imported by our CLI and
converted by CTranslate2's, every engine and the server measured, tokens identical (no timing claims)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from bench.marian import CT2, CT2_TEXT, ORT, QUICK_PLAN, SERVER, run, same, steps, table
from bench.marian_build import QUICK, joint_vocab, marian_dir


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One quick run, one repeat per point, and its output directory."""
    out = tmp_path_factory.mktemp("marian")
    plan = replace(QUICK_PLAN, repeats=1)
    return plan, out, run(plan, out, log=lambda _: None)


def test_every_engine_is_measured_on_identical_tokens(quick_run):
    plan, _, result = quick_run
    assert {(p.engine, p.batch) for p in result.points} == {
        (e, b) for e in (ORT, CT2, SERVER, CT2_TEXT) for b in (1, plan.batch)}
    assert result.compared == plan.single + plan.sentences
    assert result.identical == result.compared  # fp32: our engine and CTranslate2 agree on every decode
    assert result.server_identical == result.server_compared == plan.sentences
    assert result.checked == len(result.logprob_diffs) == plan.sentences  # same tokens, same log-probs
    # but for pad's share of the softmax (about 1 / vocabulary: random logits near 0): CTranslate2's
    # converter drops pad from the vocabulary, ours gives it -inf after the softmax (bad_words_ids)
    assert max(result.logprob_diffs) < 2 / plan.shape.vocab_size
    for p in result.points:
        assert p.sentences == (plan.single if p.batch == 1 else plan.sentences) and p.seconds > 0
        assert 0 < p.tokens <= p.sentences * plan.new_tokens
    ratios = result.ratios(plan.batch)
    for key in ("ort_vs_ct2_marian_b1", "ort_vs_ct2_marian_b32", "server_vs_ct2_marian_c1",
                "server_vs_ct2_marian_c32"):
        assert math.isfinite(ratios[key]) and ratios[key] > 0
    assert ratios["identical_tokens"] == result.identical and json.dumps(ratios)
    assert table(result, plan.batch).count("\n") == 5  # header, rule, four engines
    for key, (low, high) in result.ranges.items():
        assert low <= next(p for p in result.points if (p.engine, p.batch) == key).sentences_per_s <= high
    assert set(result.phases) >= {"build", "import", "ct2_convert", "engines", "server", "check"}


def test_the_built_model_directory_is_reused(quick_run):
    _, out, _ = quick_run
    hf = out / "hf"
    assert {"config.json", "model.safetensors", "source.spm", "target.spm", "vocab.json"} <= {
        f.name for f in hf.iterdir()}
    config = json.loads((hf / "config.json").read_text())
    keys = ("d_model", "vocab_size", "pad_token_id", "decoder_start_token_id")
    pad = QUICK.vocab_size - 1
    assert [config[k] for k in keys] == [QUICK.d_model, QUICK.vocab_size, pad, pad]
    built = []
    assert marian_dir(hf, QUICK, log=built.append) == hf and not built  # the stamp matches: not rebuilt


def test_joint_vocab_is_laid_out_as_opus_mt():
    vocab = joint_vocab(["<unk>", "<s>", "</s>", "\u2581a", "b", "\u2581a"], ["\u2581word"], 8)
    assert list(vocab.items())[:4] == [("</s>", 0), ("<unk>", 1), ("\u2581a", 2), ("b", 3)]
    assert vocab["<pad>"] == 7 and sorted(vocab.values()) == list(range(8)) and "\u2581word" in vocab


def test_tokens_count_decoder_steps_and_compare_on_free_tokens():
    assert steps([5] * 32, 32) == 32 and steps([5] * 9, 32) == 10  # eos after 9 tokens: 10 steps
    assert same([1, 2], [1, 2], 32) and same([1, 2], [1, 2, 3], 2) and not same([1, 2], [1, 2, 3], 3)
