"""bench.gpu's CPU path (`--device cpu --quick`) on the default model: every part runs and reports (the
folder is not named gpu: pytest would take that for the `gpu` mark). About 4 minutes on 2 cores: slow."""

from __future__ import annotations

import json

import pytest

from bench.gpu.__main__ import main

pytestmark = pytest.mark.slow


def test_cpu_quick_run_reports_engine_server_floor_and_memory(capsys, tmp_path):
    assert main(["--device", "cpu", "--quick", "--model", "default", "--work", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    engine = report["engine"]
    assert engine["provider"] == "CPUExecutionProvider"
    assert set(engine["sentences_per_s"]["ort_fp32"]) == {"b1", "b32", "b128"}
    if "ct2_float32" in engine["sentences_per_s"]:  # CTranslate2 converted from the checkpoint (torch)
        for agreed in engine["same_tokens"]["ct2_float32"].values():
            same, total = map(int, agreed.split("/"))
            assert same >= 0.9 * total
    assert set(report["server"]) >= {"c1", "c32", "c128"}
    assert all(report["server"][c]["throughput"] > 0 for c in ("c1", "c32", "c128"))
    assert report["floor"]["copy_gbps"] > 0
    assert report["memory"]["ort_fp32"]["batch"]["rss_added_mib"] > 0
