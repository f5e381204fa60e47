"""Time to the first streamed token against concurrency, one curve per batching mode."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.charts.modes import WORKLOADS, color, curves, workloads


def figure(data: dict[str, Any]) -> Any:
    """One panel per workload: concurrency on x (log 2), TTFT (ms, log) on y; p50 solid, p99 dashed."""
    from model.plotting import caption, pyplot

    plt = pyplot()
    names = workloads(data["points"])
    fig, axes = plt.subplots(1, len(names), figsize=(5.0 * len(names), 4.0), squeeze=False,
                             layout="constrained")
    for ax, workload in zip(axes[0], names, strict=True):
        for mode, points in curves(data["points"], workload).items():
            points = [p for p in points if math.isfinite(p.get("ttft_p50_ms", math.nan))]
            if not points:
                continue
            x = [p["concurrency"] for p in points]
            for q, style in (("p50", "-"), ("p99", "--")):
                ax.plot(x, [p[f"ttft_{q}_ms"] for p in points], style, marker="o", markersize=3,
                        color=color(mode), label=f"{mode} {q}", gid=f"{workload}-{mode}-ttft-{q}")
        if not ax.get_lines():
            ax.text(0.5, 0.5, "no streamed requests", transform=ax.transAxes, ha="center")
            continue
        ax.set_xscale("log", base=2)
        concurrencies = sorted({int(x) for line in ax.get_lines() for x in line.get_xdata()})
        ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
        ax.minorticks_off()
        ax.set_yscale("log")
        ax.set_xlabel("concurrency (closed-loop users)")
        ax.set_ylabel("time to first token (ms)")
        ax.set_title(WORKLOADS.get(workload, workload))
        ax.legend(fontsize=7, ncols=2, loc="best")
    fig.suptitle("Server: time to the first streamed piece against concurrency")
    caption(fig, data.get("source"))
    return fig


def draw(data: dict[str, Any], out: Path) -> Path:
    """Write the chart to out (SVG)."""
    from model.plotting import save_svg

    return save_svg(figure(data), out)
