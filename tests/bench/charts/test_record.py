"""A chart record's source: the command that ran, the machine, the date."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.charts.record import machine, source, vector_extensions
from interface.sessions import cpu_flags


def test_the_command_is_the_module_run_with_its_arguments(monkeypatch):
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", SimpleNamespace(name="bench.__main__"))
    monkeypatch.setattr(sys, "argv", ["/somewhere/bench/__main__.py", "--quick", "--out", "a b"])
    found = source()
    assert found["command"] == "python -m bench --quick --out 'a b'"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", found["date"])
    assert found["machine"] == machine() and re.match(r"\d+ CPU cores \(", found["machine"])
    assert source("make soak")["command"] == "make soak"


@pytest.mark.parametrize(("flags", "named"), [
    ({"sse4_2", "avx2", "fma"}, "AVX2 without VNNI"),
    ({"avx2", "avx_vnni"}, "AVX2 with VNNI"),  # Alder Lake and later: VNNI on 256-bit vectors only
    ({"avx2", "avx512f", "avx512bw"}, "AVX-512 without VNNI"),  # Skylake-SP
    ({"avx2", "avx512f", "avx512_vnni"}, "AVX-512 with VNNI"),  # Cascade Lake, Zen 4
    ({"sse4_2", "avx"}, ""),
    (set(), ""),
])
def test_the_vector_extensions_that_choose_the_kernels_are_named(flags, named):
    assert vector_extensions(frozenset(flags)) == named


def test_the_machine_names_this_cpus_vector_extensions():
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        pytest.skip("no /proc/cpuinfo here: the extensions cannot be read")
    flags = set(next(line for line in text.splitlines() if line.startswith("flags")).split(":", 1)[1].split())
    found = machine()
    assert ("AVX-512" in found) == ("avx512f" in flags)
    assert ("with VNNI" in found) == bool(flags & {"avx512_vnni", "avx_vnni"})
    assert cpu_flags() == frozenset(flags)
