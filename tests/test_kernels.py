"""The kernels run (tests/support/kernels.py): the family it switches to, PyTorch running that family
when ATEN_CPU_CAPABILITY asks for it, and a run stopped when PyTorch reports another family than the
one it must have (so that it cannot pass without having switched)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import REPO_ROOT, kernels

torch = pytest.importorskip("torch")


def test_the_other_family_is_one_every_cpu_with_the_first_runs():
    assert kernels.other_family("avx512") == "avx2"
    assert kernels.other_family("avx2") == "default"
    assert kernels.other_family("default") == "default"


def run(code: str, **env: str) -> subprocess.CompletedProcess:
    """`python -c code` in the repository with env added."""
    return subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_pytorch_runs_the_family_asked_for():
    asked = kernels.other_family(kernels.capability())
    out = run("from tests.support.kernels import capability; print(capability())",
              **{kernels.ATEN_ENV: asked})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [asked]


def test_a_run_whose_kernels_are_not_the_expected_ones_stops():
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
            "tests/test_kernels.py"]
    out = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, kernels.EXPECT_ENV: "vsx"})
    assert out.returncode == 4, out.stdout + out.stderr
    assert f"{kernels.EXPECT_ENV}=vsx but PyTorch runs its {kernels.capability()} CPU kernels" in out.stderr
