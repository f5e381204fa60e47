"""Training CLI: the schedule formula, resume, checkpoints and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from model.checkpoint import load_checkpoint
from model.train import noam_lr, parse_args, train
from tests.support import tiny
from tests.support.corpus import TINY_MODEL_ARGS


def test_noam_schedule_matches_paper():
    d, w = 512, 4000
    for step in (1, 100, 3999, 4000, 4001, 20000):
        assert noam_lr(step, d, w) == pytest.approx(d**-0.5 * min(step**-0.5, step * w**-1.5))
    assert all(noam_lr(w, d, w) >= noam_lr(s, d, w) for s in range(1, 3 * w, 7))  # peak at warmup
    assert noam_lr(10, 64, 50, scale=2.0) == pytest.approx(2 * noam_lr(10, 64, 50))


def test_checkpoint_holds_config_and_loads_weights_only(tiny_checkpoint):
    state = torch.load(tiny_checkpoint, weights_only=True)
    assert {"model", "config", "tokenizer", "step", "optimizer"} <= set(state)
    assert state["config"]["d_model"] == int(TINY_MODEL_ARGS[TINY_MODEL_ARGS.index("--d-model") + 1])
    assert tiny.FIRST_STEPS <= state["step"] <= tiny.MAX_STEPS  # trained until it solved its task
    model, _ = load_checkpoint(tiny_checkpoint)
    assert not model.training
    assert torch.equal(model.state_dict()["src_embed.lut.weight"], state["model"]["src_embed.lut.weight"])


def test_resume_continues_from_last_step(tiny_corpus, tmp_path):
    common = ["--train", str(tiny_corpus["train"]), "--valid", str(tiny_corpus["valid"]), "--out",
              str(tmp_path), "--eval-every", "20", *TINY_MODEL_ARGS]
    train(parse_args([*common, "--max-steps", "20"]))
    first = torch.load(tmp_path / "last.pt", weights_only=True)
    train(parse_args([*common, "--max-steps", "40"]))
    second = torch.load(tmp_path / "last.pt", weights_only=True)
    assert (first["step"], second["step"]) == (20, 40)
    log = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in log] == [20, 40]
    assert second["elapsed"] > first["elapsed"]
    assert not torch.equal(first["model"]["encoder.layers.0.ffn.w_1.weight"],
                           second["model"]["encoder.layers.0.ffn.w_1.weight"])


def test_validation_loss_is_logged_and_the_curve_drawn_with_earlier_stages(tiny_corpus, tmp_path):
    earlier = tmp_path / "stage1.jsonl"
    earlier.write_text(json.dumps({"step": 100, "loss": 3.0, "exact_match": 5.0}) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    train(parse_args(["--train", str(tiny_corpus["train"]), "--valid", str(tiny_corpus["valid"]), "--out",
                      str(out), "--eval-every", "10", "--max-steps", "20", *TINY_MODEL_ARGS,
                      "--earlier-metrics", str(earlier)]))
    log = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in log] == [10, 20]
    assert all(0 < m["valid_loss"] < 20 for m in log) and log[1]["valid_loss"] < log[0]["valid_loss"]
    svg = (out / "learning-curve.svg").read_text(encoding="utf-8")
    assert 'id="valid-loss"' in svg and 'id="stage-2"' in svg  # this run drawn after the earlier stage


def test_init_fine_tunes_from_a_checkpoint(tiny_checkpoint, tiny_corpus, tmp_path):
    """--init takes the checkpoint's config, tokenizer and weights (the model options are ignored) and
    starts a fresh schedule at step 0; a resume then continues the fine-tuning run, not the init."""
    init = torch.load(tiny_checkpoint, weights_only=True)
    common = ["--train", str(tiny_corpus["train"]), "--valid", str(tiny_corpus["valid"]), "--out",
              str(tmp_path), "--eval-every", "5", "--init", str(tiny_checkpoint), "--d-model", "64"]
    train(parse_args([*common, "--max-steps", "0"]))
    given = tiny_checkpoint.parent / "tokenizer.json"
    assert (tmp_path / "tokenizer.json").read_bytes() == given.read_bytes()
    train(parse_args([*common, "--max-steps", "5"]))
    tuned = torch.load(tmp_path / "last.pt", weights_only=True)
    assert tuned["config"] == init["config"] and tuned["step"] == 5
    name = "src_embed.lut.weight"
    moved = (tuned["model"][name] - init["model"][name]).abs().max().item()
    assert 0 < moved < 0.1  # started from the init's weights: five small steps away from them


def test_cli_reports_malformed_corpus(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("one\ttwo\nno tab here\n", encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "model.train", "--train", str(bad), "--valid", str(bad),
                          "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "bad.tsv:2" in run.stderr and "source<TAB>target" in run.stderr
    missing = subprocess.run([sys.executable, "-m", "model.train", "--train", str(tmp_path / "nope.tsv"),
                              "--valid", str(bad), "--out", str(tmp_path / "o")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and "corpus file not found" in missing.stderr
