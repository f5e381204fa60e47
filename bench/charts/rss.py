"""A server's resident memory over a long run of requests, with the warm-up marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def figure(data: dict[str, Any]) -> Any:
    """RSS (MiB) against requests sent, the warm-up shaded before the measured requests."""
    from model.plotting import caption, pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.6), layout="constrained")
    warm = int(data.get("warmup_requests", 0))
    if warm:
        ax.axvspan(0, warm, color="0.9", gid="warmup", label=f"warm-up ({warm:,} requests)")
    if data.get("started_mib") is not None:
        ax.plot([0], [data["started_mib"]], "s", color="0.4", label="after start-up", gid="started")
    if data.get("warm_mib") is not None:
        ax.plot([warm], [data["warm_mib"]], "D", color="C1", label="after the warm-up", gid="after-warmup")
    x = [warm + int(r) for r, _ in data["samples"]]
    y = [float(v) for _, v in data["samples"]]
    ax.plot(x, y, "-", marker="o", markersize=3, color="C0", label=data.get("label", "server RSS"), gid="rss")
    if y:
        top = max(range(len(y)), key=y.__getitem__)
        ax.annotate(f"highest {y[top]:g} MiB", (x[top], y[top]), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=7, gid="peak")
    ax.set_xlabel("requests sent (warm-up included)")
    ax.set_ylabel("server RSS (MiB)")
    ax.set_xlim(0, max([warm, *x]) * 1.02 or 1)
    ax.set_ylim(0, max([*y, data.get("warm_mib") or 0, data.get("started_mib") or 0]) * 1.15 or 1)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(data.get("title", "Server memory over the run"))
    caption(fig, data.get("source"))
    return fig


def draw(data: dict[str, Any], out: Path) -> Path:
    """Write the chart to out (SVG)."""
    from model.plotting import save_svg

    return save_svg(figure(data), out)
