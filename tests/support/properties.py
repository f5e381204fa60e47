"""Settings of the property-based tests (hypothesis) and the limits they check against.

Strategies and oracles are in tests/support/hostile.py (shared with the fuzz driver tests/support/fuzz.py);
every run draws the same examples (derandomize), so a failure reproduces in CI."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from service.domain.types import DEFAULT_MAX_BEAM

MAX_LEN = 96  # the tiny bundle's (tests/support/corpus.py TINY_MODEL_ARGS --max-len)
MAX_BEAM = DEFAULT_MAX_BEAM  # the tests' runner's and servers'
FAST = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
END_TO_END = settings(FAST, max_examples=150)
