"""bench.gpu's CPU path (`--device cpu --quick`, batch sizes and concurrencies 1 and 4) on the default model:
every part runs and reports (not in a folder named gpu: pytest would take that for the `gpu` mark)."""

from __future__ import annotations

import json

import pytest

from bench.gpu.__main__ import main

pytestmark = pytest.mark.slow  # minutes: the engines, the server and fresh processes for memory


def test_cpu_quick_run_reports_engine_server_floor_and_memory(capsys, tmp_path):
    assert main(["--device", "cpu", "--quick", "--model", "default", "--work", str(tmp_path),
                 "--sizes", "1,4"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    engine = report["engine"]
    assert engine["provider"] == "CPUExecutionProvider"
    assert set(engine["sentences_per_s"]["ort_fp32"]) == {"b1", "b4"}
    if "ct2_float32" in engine["sentences_per_s"]:  # CTranslate2 converted from the checkpoint (torch)
        for agreed in engine["same_tokens"]["ct2_float32"].values():
            same, total = map(int, agreed.split("/"))
            assert same >= 0.9 * total
    assert set(report["server"]) >= {"c1", "c4"}
    assert all(report["server"][c]["throughput"] > 0 for c in ("c1", "c4"))
    assert report["floor"]["copy_gbps"] > 0
    assert report["memory"]["ort_fp32"]["batch"]["rss_added_mib"] > 0
