"""The runtime tests run every test in both KV-cache layouts of the tiny bundle."""

from __future__ import annotations

import pytest

from service.runtime.runner import Runner


@pytest.fixture(scope="module")
def runner(layout_runner: Runner) -> Runner:
    """The tiny bundle's runner, once per KV-cache layout (tests/conftest.py `layout_runner`)."""
    return layout_runner
