"""The per-family benchmark's other entries (BART, mBART-50, T5, Pegasus) at their quick shape, end to end
through the command line: built offline, imported by our CLI and converted by CTranslate2's, ours =
CTranslate2 on every fp32 decode and served text, the ratio keys named by the family, the goal checks and the
chart record (no timing claims). Minutes each (two models built, imported, converted and served): `slow`."""

from __future__ import annotations

import json
import math

import pytest

from bench.families.__main__ import main
from bench.families.registry import FAMILIES, STAMP

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("family", ["bart", "mbart50", "t5", "pegasus"])
def test_the_quick_form_runs_with_identical_tokens(family, tmp_path, capsys):
    assert main(["--family", family, "--quick", "--out", str(tmp_path), "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    ratios = json.loads(lines[-1])  # the JSON is printed last
    assert ratios["identical_tokens"] == ratios["compared"] == 8 + 32  # batch 1 on 8 texts, batch 32 on 32
    assert ratios["server_identical_tokens"] == ratios["server_compared"] == 32
    assert ratios["logprob_checked"] == 32 and ratios["logprob_diff_max"] < 0.01  # per token
    # int8 decodes the same model, but random weights have near-ties: BART keeps about half the decodes
    assert 0 < ratios["int8_identical_tokens"] <= ratios["compared"]
    for kind in ("ort_vs_ct2", "ort_int8_vs_ct2_int8"):
        for b in (1, 32):
            assert math.isfinite(ratios[f"{kind}_{family}_b{b}"]) and ratios[f"{kind}_{family}_b{b}"] > 0
    for kind in ("server_vs_ct2", "server_int8_vs_ct2_int8"):
        assert all(ratios[f"{kind}_{family}_c{c}"] > 0 for c in (1, 32))
    assert ratios["memory_vs_ct2"] > 0 and ratios["memory_int8_vs_ct2_int8"] > 0 and ratios["disk_vs_ct2"] > 0
    engines = {f"{kind}_{family}_b{b}" for kind in ("ort_vs_ct2", "ort_int8_vs_ct2_int8") for b in (1, 32)}
    assert set(ratios["goals_met"]) == engines | {"memory_vs_ct2", "memory_int8_vs_ct2_int8"}
    assert sum(line.startswith("goal ") for line in lines) == 6
    out = tmp_path / "quick"
    record = json.loads((out / f"{family}-engines.json").read_text())
    assert len(json.dumps(record)) > 0 and (out / f"{family}-engines.svg").is_file()
    stamp = json.loads((out / "hf" / STAMP).read_text())
    assert stamp["family"] == family and stamp["shape"]["vocab_size"] == FAMILIES[family].quick.vocab_size
