"""Smoke run of the provider A/B (bench/engines/providers.py): both arms decode, the ratio line is printed."""

from __future__ import annotations

import json

from bench.engines import providers
from service.runtime.model.cuda import cuda_unavailable


def test_providers_ab_prints_the_ratio_of_each_batch(capsys):
    assert providers.main(["--pairs", "1", "--batches", "1", "4"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("batch 1: default ") and lines[1].startswith("batch 4: default ")
    result = json.loads(lines[-1])
    assert set(result) == {"providers", "default_vs_cpu_b1", "default_vs_cpu_b4"}
    assert all(result[k] > 0 for k in ("default_vs_cpu_b1", "default_vs_cpu_b4"))
    if cuda_unavailable() is not None:  # the default request ran on the CPU, as the A/B assumes here
        assert result["providers"] == ["CPUExecutionProvider"]
