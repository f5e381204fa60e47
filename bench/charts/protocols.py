"""Throughput against p50 and p99 latency as concurrency grows on one server, one curve per protocol."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

ORDER = ("grpc", "kserve-grpc", "http-infer", "http-generate")  # the known protocols, in legend order
COLORS = {"grpc": "C0", "kserve-grpc": "C2", "http-infer": "C1", "http-generate": "C3"}
STYLES = {"grpc": "-", "kserve-grpc": "--", "http-infer": "-", "http-generate": "--"}


def curves(points: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Points by protocol (known ones first), each protocol's sorted by concurrency."""
    by: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        by.setdefault(p["protocol"], []).append(p)
    order = [k for k in ORDER if k in by] + sorted(set(by) - set(ORDER))
    return {k: sorted(by[k], key=lambda p: p["concurrency"]) for k in order}


def _sizes(data: dict[str, Any]) -> str:
    """How many requests each point pooled, and over how many rounds."""
    n = sorted({int(p["requests"]) for p in data["points"]})
    counts = f"{n[0]:,}" if n[0] == n[-1] else f"{n[0]:,} to {n[-1]:,}"
    rounds = int(data.get("rounds", 1))
    return f"{counts} requests a point" + (f", pooled over {rounds} interleaved rounds" if rounds > 1 else "")


def figure(data: dict[str, Any]) -> Any:
    """Two panels, p50 and p99: sentences/s on x, latency (ms, log) on y; cN beside each point."""
    from model.plotting import caption, pyplot

    plt = pyplot()
    names = data.get("protocols", {})
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 4.2), sharex=True, layout="constrained")
    for ax, q in zip(axes, ("p50", "p99"), strict=True):
        for i, (protocol, points) in enumerate(curves(data["points"]).items()):
            color = COLORS.get(protocol, f"C{4 + i}")
            x, y = [p["throughput"] for p in points], [p[f"{q}_ms"] for p in points]
            ax.plot(x, y, STYLES.get(protocol, ":"), marker="o", markersize=3, color=color,
                    label=names.get(protocol, protocol), gid=f"{protocol}-{q}")
            for p in points:
                ax.annotate(f"c{p['concurrency']}", (p["throughput"], p[f"{q}_ms"]), xytext=(3, 3),
                            textcoords="offset points", fontsize=6, color=color)
        ax.set_yscale("log")
        ax.set_xlabel("throughput (sentences/s)")
        ax.set_ylabel(f"{q} latency (ms, client side)")
        ax.set_title(f"{q} latency")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right center", fontsize=7)
    fig.suptitle(f"{data.get('title', 'One server per protocol')}: throughput against latency, closed loop "
                 f"(cN: concurrency N)\n{_sizes(data)}", fontsize=10)
    caption(fig, data.get("source"))
    return fig


def draw(data: dict[str, Any], out: Path) -> Path:
    """Write the chart to out (SVG)."""
    from model.plotting import save_svg

    return save_svg(figure(data), out)
