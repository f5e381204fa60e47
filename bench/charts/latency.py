"""Throughput against p50 and p99 latency as concurrency grows, one curve per batching mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.charts.modes import WORKLOADS, color, curves, workloads


def figure(data: dict[str, Any]) -> Any:
    """One panel per workload: sentences/s on x, latency (ms, log) on y; p50 solid, p99 dashed."""
    from model.plotting import caption, pyplot

    plt = pyplot()
    names = workloads(data["points"])
    fig, axes = plt.subplots(1, len(names), figsize=(5.0 * len(names), 4.0), squeeze=False,
                             layout="constrained")
    for ax, workload in zip(axes[0], names, strict=True):
        for mode, points in curves(data["points"], workload).items():
            x = [p["throughput"] for p in points]
            for q, style in (("p50", "-"), ("p99", "--")):
                ax.plot(x, [p[f"{q}_ms"] for p in points], style, marker="o", markersize=3, color=color(mode),
                        label=f"{mode} {q}", gid=f"{workload}-{mode}-{q}")
            for p in points:
                ax.annotate(f"c{p['concurrency']}", (p["throughput"], p["p99_ms"]), xytext=(3, 3),
                            textcoords="offset points", fontsize=6, color=color(mode))
        ax.set_yscale("log")
        ax.set_xlabel("throughput (sentences/s)")
        ax.set_ylabel("latency (ms, client side)")
        ax.set_title(WORKLOADS.get(workload, workload))
        ax.legend(fontsize=7, ncols=2, loc="best")
    fig.suptitle("Server: throughput against p50 / p99 latency, closed loop (cN: concurrency N)")
    caption(fig, data.get("source"))
    return fig


def draw(data: dict[str, Any], out: Path) -> Path:
    """Write the chart to out (SVG)."""
    from model.plotting import save_svg

    return save_svg(figure(data), out)
