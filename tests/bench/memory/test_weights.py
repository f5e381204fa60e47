"""bench/memory/weights.py on the tiny bundle: every configuration measured in its own process, and the
ratios are those of the figures it printed."""

from __future__ import annotations

import pytest

from bench.memory.weights import CONFIGS, run


def test_every_configuration_is_measured_and_the_ratios_follow_from_it(tiny_bundle):
    result = run(tiny_bundle)
    for config in CONFIGS:
        figures = result[config]
        assert set(figures) == {"rss", "pss", "anonymous", "file"}
        assert figures["rss"] > 0 and figures["file"] == pytest.approx(figures["rss"] - figures["anonymous"],
                                                                       abs=0.15)
    assert result["weights_file_mib"] == pytest.approx((tiny_bundle / "weights.data").stat().st_size / 2**20,
                                                       abs=0.05)
    assert result["multistep_vs_one_step"] == pytest.approx(
        result["multistep"]["pss"] / result["one_step"]["pss"], abs=1e-3)
    assert result["shared_vs_one_step"] == pytest.approx(
        result["multistep_shared"]["pss"] / result["one_step"]["pss"], abs=1e-3)
