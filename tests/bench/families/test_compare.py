"""The per-family benchmark's Marian entry at its quick shape, end to end: built offline, imported by our CLI
(fp32 and int8) and converted by CTranslate2's (float32 and int8), every engine and both servers measured,
fp32 tokens identical, bytes, memory and the batch-1 floor in the JSON (no timing claims)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from bench.families.compare import QUICK_PLAN, run, table
from bench.families.engines import CT2, CT2_INT8, ORT, ORT_INT8, same, steps
from bench.families.marian import QUICK, joint_vocab
from bench.families.registry import family_dir
from bench.families.servers import CT2_TEXT, CT2_TEXT_INT8, SERVER, SERVER_INT8


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One quick run, one repeat per point, and its output directory."""
    out = tmp_path_factory.mktemp("marian")
    plan = replace(QUICK_PLAN, repeats=1)
    return plan, out, run(plan, out, log=lambda _: None)


def test_every_engine_is_measured_on_identical_tokens(quick_run):
    plan, _, result = quick_run
    engines = (ORT, CT2, ORT_INT8, CT2_INT8, SERVER, CT2_TEXT, SERVER_INT8, CT2_TEXT_INT8)
    assert {(p.engine, p.batch) for p in result.points} == {(e, b) for e in engines for b in (1, plan.batch)}
    assert result.compared == plan.single + plan.sentences
    assert result.identical == result.compared  # fp32: our engine and CTranslate2 agree on every decode
    # int8 decodes the same model: most decodes keep fp32's tokens (random weights have near-ties)
    assert result.compared / 2 < result.int8_identical <= result.compared
    assert result.compared / 2 < result.ct2_int8_identical <= result.compared
    assert result.server_identical == result.server_compared == plan.sentences
    assert result.checked == len(result.logprob_diffs) == plan.sentences  # same tokens, same log-probs
    # but for pad's share of the softmax (about 1 / vocabulary: random logits near 0): CTranslate2's
    # converter drops pad from the vocabulary, ours gives it -inf after the softmax (bad_words_ids)
    assert max(result.logprob_diffs) < 2 / plan.shape.vocab_size
    for p in result.points:
        assert p.sentences == (plan.single if p.batch == 1 else plan.sentences) and p.seconds > 0
        assert 0 < p.tokens <= p.sentences * plan.new_tokens
    ratios = result.ratios(plan.batch)
    keys = ("ort_vs_ct2_marian_b1", "ort_vs_ct2_marian_b32", "server_vs_ct2_marian_c1",
            "server_vs_ct2_marian_c32", "ort_int8_vs_ct2_int8_marian_b1", "ort_int8_vs_ct2_int8_marian_b32",
            "ort_int8_vs_ort_b1",
            "server_int8_vs_ct2_int8_marian_c1", "server_int8_vs_ct2_int8_marian_c32",
            "disk_vs_ct2", "disk_int8_vs_ct2_int8", "memory_vs_ct2", "memory_int8_vs_ct2_int8")
    for key in keys:
        assert math.isfinite(ratios[key]) and ratios[key] > 0, key
    assert ratios["identical_tokens"] == result.identical and json.loads(json.dumps(ratios)) == ratios
    assert set(ratios["sentences_per_s"]) == {f"{e} {b}" for e in engines for b in (1, plan.batch)}
    disk = ratios["disk_bytes"]
    assert disk[ORT_INT8] < disk[ORT] / 2 and disk[CT2_INT8] < disk[CT2] / 2 and ratios["shared_bytes"] > 0
    assert set(ratios["memory_mib"]) == {ORT, ORT_INT8, CT2, CT2_INT8}
    for memory in ratios["memory_mib"].values():
        assert set(memory) == {"load", "warm", "batch"}
        assert all(memory[k]["rss_mib"] > 0 and memory[k]["pss_mib"] > 0 for k in memory)
    floor = ratios["batch1_floor"]
    assert floor[ORT_INT8]["step_bytes"] < floor[ORT]["step_bytes"] / 2 and ratios["read_bandwidth_gb_s"] > 0
    assert all(f["fraction"] > 0 and f["step_ms"] > 0 for f in floor.values())
    assert table(result, plan.batch).count("\n") == 9  # header, rule, eight engines
    for key, (low, high) in result.ranges.items():
        assert low <= next(p for p in result.points if (p.engine, p.batch) == key).sentences_per_s <= high
    assert set(result.phases) >= {"build", "import", "ct2_convert_float32", "ct2_convert_int8", "engines",
                                  "server", "check", "footprint"}


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
    assert family_dir(hf, "marian", QUICK, log=built.append) == hf and not built  # the stamp matches


def test_joint_vocab_is_laid_out_as_opus_mt():
    vocab = joint_vocab(["<unk>", "<s>", "</s>", "\u2581a", "b", "\u2581a"], ["\u2581word"], 8)
    assert list(vocab.items())[:4] == [("</s>", 0), ("<unk>", 1), ("\u2581a", 2), ("b", 3)]
    assert vocab["<pad>"] == 7 and sorted(vocab.values()) == list(range(8)) and "\u2581word" in vocab


def test_tokens_count_decoder_steps_and_compare_on_free_tokens():
    assert steps([5] * 32, 32) == 32 and steps([5] * 9, 32) == 10  # eos after 9 tokens: 10 steps
    assert same([1, 2], [1, 2], 32) and same([1, 2], [1, 2, 3], 2) and not same([1, 2], [1, 2, 3], 3)


@pytest.mark.parametrize("repeats", ["0", "-2"])
def test_repeats_below_one_are_refused(repeats, capsys):
    from bench.families.__main__ import main

    with pytest.raises(SystemExit) as e:
        main(["--family", "t5", "--repeats", repeats])
    assert e.value.code == 2 and f"--repeats must be >= 1, not {repeats}" in capsys.readouterr().err
