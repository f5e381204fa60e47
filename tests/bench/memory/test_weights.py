"""bench/memory/weights.py on the tiny bundle: the runner measured in its own process, the weights file's
size beside it."""

from __future__ import annotations

import pytest

from bench.memory.weights import run


def test_the_runner_is_measured_in_a_fresh_process(tiny_bundle):
    result = run(tiny_bundle)
    figures = result["runner"]
    assert set(figures) == {"rss", "pss", "anonymous", "file"}
    assert figures["rss"] > 0
    assert figures["file"] == pytest.approx(figures["rss"] - figures["anonymous"], abs=0.15)
    assert result["weights_file_mib"] == pytest.approx((tiny_bundle / "weights.data").stat().st_size / 2**20,
                                                       abs=0.05)
