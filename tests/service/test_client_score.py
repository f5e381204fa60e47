"""`python -m service.client --score TARGET` against a real in-process server: one line per pair with the
runner's score, log_prob, per-token log-probs and whether the end token was scored; alignment rows when
asked; bad flag use exits 2."""

from __future__ import annotations

import io

import pytest

from service import client
from service.domain.types import ScoreOptions
from service.server import BackgroundServer
from tests.support.server import TEXTS


def run(server: BackgroundServer, *args: str) -> tuple[int, str]:
    """Exit code and stdout of the client."""
    out = io.StringIO()
    code = client.main(["--address", server.address, "--timeout", "30", *args], out=out)
    return code, out.getvalue()


def test_score_prints_one_line_per_pair(server, runner):
    targets = [h[0].text for h in runner.translate(TEXTS[:2])]
    want = runner.score(TEXTS[:2], targets, ScoreOptions(return_alignment=True))
    code, text = run(server, *TEXTS[:2], "--score", targets[0], "--score", targets[1], "--alignment")
    assert code == 0
    lines = [line for line in text.splitlines() if not line.startswith("  ")]
    assert len(lines) == 2 and len(text.splitlines()) == 2 + sum(len(w.target_ids) for w in want)
    for line, w in zip(lines, want, strict=True):
        score, log_prob, pieces, ended = line.split("\t")
        assert ended == f"end_token_scored={'true' if w.end_token_scored else 'false'}"
        assert float(score) == pytest.approx(w.score, abs=1e-5)
        assert float(log_prob) == pytest.approx(w.log_prob, abs=1e-5)
        assert [float(p.rsplit(":", 1)[1]) for p in pieces.split(" ")] == pytest.approx(w.log_probs, abs=1e-4)


def test_score_needs_one_target_per_text():
    with pytest.raises(SystemExit) as info:
        client.main(["a", "b", "--score", "x"])
    assert info.value.code == 2
