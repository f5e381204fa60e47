"""Records to charts: the kinds, `python -m bench.charts`, and the docs' charts as their records draw them."""

from __future__ import annotations

import json

import pytest

from bench.charts.__main__ import DOCS
from bench.charts.__main__ import main as charts_main
from bench.charts.draw import CHARTS, draw
from tests.support import REPO_ROOT
from tests.support.svg import read_svg


def test_each_kind_draws_its_charts_beside_the_stem(server_record, engines_record, rss_record, tmp_path):
    assert draw(server_record, tmp_path / "server") == [tmp_path / "server-latency-throughput.svg",
                                                        tmp_path / "server-ttft.svg"]
    assert draw(engines_record, tmp_path / "e") == [tmp_path / "e.svg"]
    assert draw(rss_record, tmp_path / "r") == [tmp_path / "r.svg"]
    with pytest.raises(ValueError, match="no chart for a record of kind 'nope'"):
        draw({"kind": "nope"}, tmp_path / "x")


def test_a_redraw_writes_the_same_bytes(server_record, tmp_path):
    first = [p.read_bytes() for p in draw(server_record, tmp_path / "a")]
    second = [p.read_bytes() for p in draw(server_record, tmp_path / "b")]
    assert first == second
    assert b"<dc:date>" not in first[0]  # no date in the metadata


def test_the_command_redraws_given_records_beside_them(rss_record, tmp_path, capsys):
    path = tmp_path / "soak-rss.json"
    path.write_text(json.dumps(rss_record), encoding="utf-8")
    assert charts_main([str(path)]) == 0
    assert "rss" in read_svg(tmp_path / "soak-rss.svg").ids
    assert "soak-rss.svg" in capsys.readouterr().out


def test_the_docs_charts_are_what_their_records_draw(tmp_path):
    """docs/charts/*.svg are up to date with docs/charts/records (`make charts` after a record changes),
    each small, with its caption's command, machine and date."""
    records = sorted((REPO_ROOT / DOCS / "records").glob("*.json"))
    kinds = {json.loads(p.read_text(encoding="utf-8"))["kind"] for p in records}
    assert kinds == set(CHARTS)  # every kind of chart is in the docs
    for path in records:
        record = json.loads(path.read_text(encoding="utf-8"))
        assert {"command", "machine", "date"} <= set(record["source"]), path
        for drawn in draw(record, tmp_path / path.stem):
            shipped = REPO_ROOT / DOCS / drawn.name
            assert shipped.read_bytes() == drawn.read_bytes(), f"{shipped} is stale: run `make charts`"
            assert shipped.stat().st_size < 100_000
            assert read_svg(shipped).has_text(record["source"]["command"])
