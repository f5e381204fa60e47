"""The learning curve of a training run, from its metrics.jsonl (one or several stages), as an SVG."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Stage = tuple[str, list[dict[str, Any]]]  # (name, the metrics.jsonl rows of one model.train run)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl file."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def stages_of(paths: Sequence[Path]) -> list[Stage]:
    """One stage per metrics file, named by its position."""
    return [(f"stage {i}", read_metrics(p)) for i, p in enumerate(paths, 1)]


def series(stages: Sequence[Stage], key: str) -> tuple[list[int], list[float]]:
    """(steps counted across the stages, values) of one metric; rows without it are skipped."""
    steps, values, offset = [], [], 0
    for _, rows in stages:
        for row in rows:
            if row.get(key) is not None:
                steps.append(offset + int(row["step"]))
                values.append(float(row[key]))
        offset += max((int(r["step"]) for r in rows), default=0)
    return steps, values


def figure(stages: Sequence[Stage], title: str = "Learning curve",
           source: dict[str, str] | None = None) -> Any:
    """Train and validation loss above, validation exact match below, against steps; stages marked."""
    from model.plotting import caption, pyplot

    plt = pyplot()
    fig, (loss_ax, em_ax) = plt.subplots(2, 1, figsize=(7.5, 5.0), sharex=True,
                                       layout="constrained")
    for key, label, style in (("loss", "train loss", "-"), ("valid_loss", "validation loss", "--")):
        x, y = series(stages, key)
        if x:
            loss_ax.plot(x, y, style, marker=".", markersize=3, label=label, gid=key.replace("_", "-"))
    x, y = series(stages, "exact_match")
    em_ax.plot(x, y, "-", marker=".", markersize=3, color="C2", label="validation exact match",
               gid="exact-match")
    if y:
        best = max(range(len(y)), key=y.__getitem__)
        em_ax.annotate(f"{y[best]:g}%", (x[best], y[best]), textcoords="offset points", xytext=(0, 6),
                       ha="center", fontsize=7, gid="best-exact-match")
        em_ax.set_ylim(min(y) - 2, 100.5)
    loss_ax.set_ylabel("loss (label smoothing 0.1)")
    em_ax.set_ylabel("exact match %")
    em_ax.set_xlabel("step (stages one after another)" if len(stages) > 1 else "step")
    offset = 0
    for i, (name, rows) in enumerate(stages):
        if len(stages) > 1:
            for ax in (loss_ax, em_ax):
                ax.axvline(offset, color="0.6", linewidth=0.8, linestyle=":", gid=f"stage-{i + 1}")
            loss_ax.text(offset, 1.0, f" {name}", transform=loss_ax.get_xaxis_transform(), fontsize=7,
                         va="top", color="0.35")
        offset += max((int(r["step"]) for r in rows), default=0)
    loss_ax.legend(loc="upper right")
    em_ax.legend(loc="lower right")
    loss_ax.set_title(title)
    caption(fig, source)
    return fig


def draw(stages: Sequence[Stage], out: Path, title: str = "Learning curve",
         source: dict[str, str] | None = None) -> Path:
    """Write the learning curve of `stages` to out (SVG)."""
    from model.plotting import save_svg

    return save_svg(figure(stages, title, source), out)


def draw_run(metrics: Path, earlier: Sequence[Path] = (), out: Path | None = None) -> Path | None:
    """model.train's chart: earlier stages' metrics then this run's, beside metrics.jsonl; None (and
    nothing drawn) without matplotlib, which only the `train` extra brings."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return None
    stages = stages_of([*earlier, metrics])
    return draw(stages, out or metrics.with_name("learning-curve.svg"))
