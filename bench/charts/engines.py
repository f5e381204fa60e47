"""Ours against the engine a user would pick instead: sentences/s and memory, as bars."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

PANELS = (("engine", "engines: ids in, static batches", "batch"),
          ("server", "text in and out: our server (gRPC),\nCTranslate2 in process", "concurrency"))
MEMORY = (("warm", "after a warm-up"), ("batch", "after a batch too"))


def slug(text: str) -> str:
    """An SVG id from a name."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _bars(ax: Any, groups: list[str], engines: list[dict[str, Any]], value: Any, prefix: str) -> None:
    """Grouped bars: one group per entry of `groups`, one bar per engine, labelled with its value."""
    width = 0.8 / len(engines)
    for i, e in enumerate(engines):
        heights = [value(e, g) for g in groups]
        x = [k + (i - (len(engines) - 1) / 2) * width for k in range(len(groups))]
        bars = ax.bar(x, heights, width, label=e["name"], color=f"C{i}", gid=f"{prefix}-{slug(e['name'])}")
        ax.bar_label(bars, fmt="%.3g", fontsize=6, padding=1)
    ax.set_xticks(range(len(groups)), groups)


def figure(data: dict[str, Any]) -> Any:
    """Three panels: engines' and servers' sentences/s at 1 and `batch`, and the memory each adds."""
    from model.plotting import caption, pyplot

    plt = pyplot()
    engines = data["engines"]
    fig, axes = plt.subplots(1, 3, figsize=(13.0, 4.2), layout="constrained")
    for ax, (key, title, unit) in zip(axes, PANELS, strict=False):
        sizes = sorted({s for e in engines for s in e.get(key, {})}, key=int)
        _bars(ax, sizes, engines, lambda e, s, key=key: e.get(key, {}).get(s, 0.0), key)
        ax.set_xticklabels([f"{unit} {s}" for s in sizes])
        ax.set_ylabel("sentences/s (higher is better)")
        ax.set_title(title, fontsize=9)
    ax, keys = axes[2], {label: key for key, label in MEMORY}
    _bars(ax, list(keys), engines, lambda e, label: e["memory_mib"].get(keys[label], 0.0), "memory")
    ax.set_ylabel("MiB added to a fresh process (Rss)")
    disk = ", ".join(f"{e['disk_mb']:.0f}" for e in engines if "disk_mb" in e)
    ax.set_title(f"memory added (lower is better)\nMB on disk, same order: {disk}" if disk
                 else "memory added (lower is better)", fontsize=9)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(data.get("title", "Ours against CTranslate2"))
    caption(fig, data.get("source"))
    return fig


def draw(data: dict[str, Any], out: Path) -> Path:
    """Write the chart to out (SVG)."""
    from model.plotting import save_svg

    return save_svg(figure(data), out)
