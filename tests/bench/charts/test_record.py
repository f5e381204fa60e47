"""A chart record's source: the command that ran, the machine, the date."""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace

from bench.charts.record import machine, source


def test_the_command_is_the_module_run_with_its_arguments(monkeypatch):
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", SimpleNamespace(name="bench.__main__"))
    monkeypatch.setattr(sys, "argv", ["/somewhere/bench/__main__.py", "--quick", "--out", "a b"])
    found = source()
    assert found["command"] == "python -m bench --quick --out 'a b'"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", found["date"])
    assert found["machine"] == machine() and re.match(r"\d+ CPU cores \(", found["machine"])
    assert source("make soak")["command"] == "make soak"
