"""The learning curve of a model trained in stages, from the metrics.jsonl files a chart record names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from model.learning_curve import draw as draw_curve
from model.learning_curve import read_metrics

REPO_ROOT = Path(__file__).resolve().parents[2]


def draw(data: dict[str, Any], out: Path) -> Path:
    """Write the curve of data["stages"] ({"name", "metrics": a path from the repository root}) to out."""
    stages = [(s["name"], read_metrics(REPO_ROOT / s["metrics"])) for s in data["stages"]]
    return draw_curve(stages, out, data.get("title", "Learning curve"), data.get("source"))
