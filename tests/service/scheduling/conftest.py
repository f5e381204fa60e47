"""The texts of the scheduler tests."""

from __future__ import annotations

import pytest

from tests.support.corpus import tiny_pairs


@pytest.fixture(scope="module")
def sched_texts() -> list[str]:
    """Sources of the tiny task of clearly different lengths; the first is long (many output tokens)."""
    pairs = tiny_pairs(16, 7)
    return [f"{pairs[1][0]} {pairs[2][0]} {pairs[3][0]}", "we 5", *(p[0] for p in pairs[4:14])]
