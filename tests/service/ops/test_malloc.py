"""glibc malloc settings of the server process (service/ops/malloc.py)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from service.ops.malloc import ARENA_MAX, MMAP_THRESHOLD, tune_malloc

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")


@glibc
def test_applies_both_settings_when_the_environment_chooses_none(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert tune_malloc() == {"MALLOC_ARENA_MAX": ARENA_MAX, "MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD}


@glibc
def test_the_operators_environment_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert tune_malloc() == {"MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD}


@glibc
def test_large_freed_arrays_go_back_to_the_system():
    """With the fixed threshold, freed 8 MiB arrays go back to the system even after a first larger
    free (with glibc's dynamic threshold that free moves later ones onto the heap, where a block
    still in use above them keeps all 64 MiB resident)."""
    code = """
import numpy as np
from service.ops.malloc import tune_malloc
tune_malloc()
def rss():
    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1])
a = np.ones(2 << 20); del a          # the first large free (16 MiB)
base = rss()
held = [np.ones(1 << 20) for _ in range(8)]   # 8 x 8 MiB
pin = np.ones(1000)                           # a small block above them
last = held[-1]; del held                     # 7 of them freed
print(rss() - base)
"""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "."}
    grown_kib = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                   check=True, timeout=60).stdout)
    assert grown_kib < 16 * 1024  # the one array still held, not the 64 MiB (65,340 KiB untuned)
