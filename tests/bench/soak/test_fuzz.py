"""The fuzz command (bench/soak/fuzz.py) and its driver (tests/support/fuzz.py), short: both targets run,
the JSON line counts them, and a buggy decoder is caught (exit code 1, the shrunk example printed)."""

from __future__ import annotations

import json

import pytest

from bench.soak import fuzz
from service.dataplane.kserve import deserialize_bytes
from tests.support import hostile


def test_fuzz_smoke(capsys) -> None:
    """A few hundred examples of each target, no failure, exit code 0."""
    assert fuzz.main(["--examples", "400", "--seconds", "120", "--seed", "3"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["examples"] == 400 and summary["failures"] == 0 and summary["seed"] == 3
    targets = summary["targets"]
    examples = {name: stats["examples"] for name, stats in targets.items()}
    assert examples == {"deserialize_bytes": 200, "decode_request": 200}
    for stats in targets.values():  # both paths of each decoder were reached
        assert 0 < stats["accepted"] < stats["examples"]


def _ignores_trailing_bytes(raw: bytes, count: int, field: str = "raw_input_contents") -> list[bytes]:
    """A decoder with a planted bug: zero elements are accepted whatever follows."""
    return [] if count == 0 else deserialize_bytes(raw, count, field)


def test_fuzz_finds_a_planted_bug(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The oracle catches a decoder that accepts bytes it should refuse; the run exits 1."""
    monkeypatch.setattr(hostile, "deserialize_bytes", _ignores_trailing_bytes)
    assert fuzz.main(["--examples", "400", "--seed", "3"]) == 1
    out = capsys.readouterr().out
    assert "FAILURE deserialize_bytes" in out and "accepted 0 elements for 0" in out
    assert json.loads(out.splitlines()[-1])["failures"] >= 1
