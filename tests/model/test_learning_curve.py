"""The learning curve: train and validation loss and exact match against steps, stages one after another."""

from __future__ import annotations

import json

from model.learning_curve import draw, draw_run, figure, series, stages_of
from model.plotting import pyplot
from tests.support.svg import in_view, read_svg


def _write(path, rows):
    """A metrics.jsonl file."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _rows(steps, em, valid_loss=True):
    """metrics.jsonl rows at these steps with these exact matches."""
    rows = [{"step": s, "loss": 2.0 / (i + 1), "exact_match": e}
            for i, (s, e) in enumerate(zip(steps, em, strict=True))]
    for i, row in enumerate(rows):
        if valid_loss:
            row["valid_loss"] = 2.5 / (i + 1)
    return rows


def test_stages_follow_one_another(tmp_path):
    first = _write(tmp_path / "a.jsonl", _rows([100, 200], [10.0, 40.0], valid_loss=False))
    second = _write(tmp_path / "b.jsonl", _rows([50, 100], [60.0, 97.5]))
    stages = stages_of([first, second])
    assert [name for name, _ in stages] == ["stage 1", "stage 2"]
    assert series(stages, "exact_match") == ([100, 200, 250, 300], [10.0, 40.0, 60.0, 97.5])
    assert series(stages, "valid_loss") == ([250, 300], [2.5, 1.25])  # only where it was recorded


def test_the_chart_has_its_series_labels_and_stages(tmp_path):
    first = _write(tmp_path / "a.jsonl", _rows([100, 200], [10.0, 40.0]))
    second = _write(tmp_path / "b.jsonl", _rows([50, 100], [60.0, 97.5]))
    source = {"command": "python -m model.train", "machine": "2 CPU cores", "date": "2026-01-02"}
    chart = read_svg(draw(stages_of([first, second]), tmp_path / "curve.svg", "Test curve", source))
    assert {"loss", "valid-loss", "exact-match", "stage-1", "stage-2", "best-exact-match"} <= chart.ids
    for text in ("train loss", "validation loss", "validation exact match", "exact match %",
                 "step (stages one after another)", "stage 2", "Test curve", "python -m model.train"):
        assert chart.has_text(text), text


def test_the_best_exact_match_is_shown(tmp_path):
    stages = stages_of([_write(tmp_path / "a.jsonl", _rows([100, 200, 300], [50.0, 99.8, 99.2]))])
    fig = figure(stages)
    em = fig.axes[1]
    (line,) = [li for li in em.get_lines() if li.get_gid() == "exact-match"]
    assert max(line.get_ydata()) == 99.8 and in_view(em, 200, 99.8)
    assert [t.get_text() for t in em.texts] == ["99.8%"]
    pyplot().close(fig)


def test_a_run_draws_beside_its_metrics(tmp_path):
    earlier = _write(tmp_path / "stage1.jsonl", _rows([100], [10.0]))
    metrics = _write(tmp_path / "metrics.jsonl", _rows([100, 200], [50.0, 90.0]))
    out = draw_run(metrics, [earlier])
    assert out == tmp_path / "learning-curve.svg"
    assert {"stage-1", "stage-2"} <= read_svg(out).ids
