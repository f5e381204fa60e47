"""The server benchmark's closed-loop points by workload and batching mode, in a fixed order and color."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ORDER = ("none", "dynamic", "continuous")  # batching modes, least to most batching
COLORS = {"none": "C3", "dynamic": "C1", "continuous": "C0"}
WORKLOADS = {"sentences": "sentences (one held-out sentence each)", "mix": "mix (1-8 sentences joined)"}


def workloads(points: Sequence[dict[str, Any]]) -> list[str]:
    """The workloads present, known ones first."""
    present = {p["workload"] for p in points}
    return [w for w in WORKLOADS if w in present] + sorted(present - set(WORKLOADS))


def curves(points: Sequence[dict[str, Any]], workload: str) -> dict[str, list[dict[str, Any]]]:
    """Points of one workload by mode, each mode's sorted by concurrency; modes of a single point
    (variants measured at one concurrency only) are left out."""
    by: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        if p["workload"] == workload:
            by.setdefault(p["mode"], []).append(p)
    order = [m for m in ORDER if m in by] + sorted(set(by) - set(ORDER))
    return {m: sorted(by[m], key=lambda p: p["concurrency"]) for m in order if len(by[m]) > 1}


def color(mode: str) -> str:
    """A mode's color (others in the order matplotlib gives them)."""
    return COLORS.get(mode, f"C{4 + sum(map(ord, mode)) % 5}")
