"""The texts of the scheduler tests."""

from __future__ import annotations

import pytest

from tests.support import tiny


@pytest.fixture(scope="module")
def sched_texts() -> list[str]:
    """Validation sources of the tiny task (decoded with a margin: tests/support/tiny.py) of clearly
    different lengths: the longest first (many output tokens), the shortest second, then ten more."""
    sources = sorted({s for s, _ in tiny.valid_pairs()}, key=lambda s: (len(s), s))
    return [sources[-1], sources[0], *sources[1:-1:3][:10]]
