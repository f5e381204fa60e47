"""matplotlib on the Agg backend with reproducible SVG output (imported only where a chart is drawn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Text stays text (small files, searchable), ids do not depend on a random salt, no date: a redraw
# of the same data writes the same bytes.
RC = {"svg.fonttype": "none", "svg.hashsalt": "transformer-serving", "font.size": 9,
      "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False,
      "legend.frameon": False, "figure.dpi": 100}


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend with the project's settings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(RC)
    return plt


def save_svg(fig: Any, path: Path) -> Path:
    """Write fig as an SVG without a date, then close it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
    pyplot().close(fig)
    return path


def caption(fig: Any, source: dict[str, str] | None) -> None:
    """The data's command, machine and date under the figure."""
    if source:
        text = " · ".join(source[k] for k in ("command", "machine", "date") if source.get(k))
        fig.text(0.01, -0.02, text, fontsize=7, color="0.35", ha="left", va="top", gid="source")
