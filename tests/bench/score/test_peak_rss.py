"""The Score benchmark's peak-memory reading (bench/score/__main__.py `PeakRss`): a block that touches
64 MiB and frees it reads a peak of at least that much above its start."""

from __future__ import annotations

import os

import numpy as np

from bench.score.__main__ import PeakRss


def test_a_transient_allocation_shows_in_the_peak():
    with PeakRss(os.getpid()) as peak:
        block = np.ones(64 * 2**20, np.uint8)  # written, so resident
        assert int(block[::4096].sum()) == block.size // 4096
        del block
    assert peak.growth_mib >= 60
