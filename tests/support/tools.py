"""External tools that `make test` installs (Debian's prometheus, Triton's perf_analyzer)."""

from __future__ import annotations

import functools
import os
import subprocess

import pytest

from tests.support import perf_analyzer


def require(available: bool, what: str, install: str) -> None:
    """Go on when the tool is there; otherwise skip the test, or fail it under CI (`CI` set), where
    `make test` has installed it."""
    if available:
        return
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"{what} is missing: {install}")
    pytest.skip(f"{what} is not installed: {install}")


@functools.cache
def perf_analyzer_starts() -> bool:
    """perf_analyzer is installed and starts (its shared libraries load)."""
    if not perf_analyzer.binary().exists():
        return False
    done = subprocess.run([str(perf_analyzer.binary()), "--version"], env=perf_analyzer.environment(),
                          capture_output=True, text=True, timeout=60, check=False)
    return done.returncode == 0 and "Perf Analyzer Version" in done.stdout + done.stderr
