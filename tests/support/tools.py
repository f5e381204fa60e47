"""External tools that `make test` installs (Debian's prometheus, Triton's perf_analyzer)."""

from __future__ import annotations

import os

import pytest


def require(available: bool, what: str, install: str) -> None:
    """Go on when the tool is there; otherwise skip the test, or fail it under CI (`CI` set), where
    `make test` has installed it."""
    if available:
        return
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"{what} is missing: {install}")
    pytest.skip(f"{what} is not installed: {install}")
