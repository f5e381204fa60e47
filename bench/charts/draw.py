"""Which charts each kind of record draws, and drawing them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.charts import engines, latency, protocols, rss, training, ttft

Drawer = Callable[[dict[str, Any], Path], Path]
CHARTS: dict[str, tuple[tuple[str, Drawer], ...]] = {  # kind -> (file name suffix, drawer)
    "server": (("-latency-throughput", latency.draw), ("-ttft", ttft.draw)),
    "protocols": (("-latency-throughput", protocols.draw),),
    "engines": (("", engines.draw),),
    "rss": (("", rss.draw),),
    "training": (("", training.draw),),
}


def draw(record: dict[str, Any], stem: Path) -> list[Path]:
    """Draw every chart of a record to `<stem><suffix>.svg`."""
    if record.get("kind") not in CHARTS:
        raise ValueError(f"no chart for a record of kind {record.get('kind')!r}")
    charts = CHARTS[record["kind"]]
    return [drawer(record, stem.with_name(f"{stem.name}{suffix}.svg")) for suffix, drawer in charts]
