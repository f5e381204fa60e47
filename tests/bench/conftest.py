"""Fixtures of the benchmark tests: the tiny task's source sentences."""

from __future__ import annotations

import pytest

from tests.support.corpus import tiny_pairs


@pytest.fixture(scope="module")
def sources() -> list[str]:
    """Source sentences of the tiny task."""
    return [s for s, _ in tiny_pairs(60, 11)]
