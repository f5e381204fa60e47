"""The memory budget: which loaded models make room for a load (least recently used first, never one in
use), and what a load is expected to add before it is measured."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol


class Loaded(Protocol):
    """What the budget reads of a loaded model version."""

    resident_bytes: int
    in_flight: int
    last_used: float


def files_bytes(folder: Path) -> int:
    """Bytes of the files of a bundle folder: what a first load is expected to add (0 if unreadable)."""
    try:
        return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    except OSError:
        return 0  # the load itself says what is wrong with the folder


def victims(loaded: Mapping[str, Mapping[int, Loaded]], name: str, needed: int, budget: int
            ) -> tuple[list[str], int]:
    """The models to unload, least recently used first and idle only, so that `needed` more bytes fit
    `budget` beside the others (`name` itself excluded); and the bytes the others hold after that."""
    def last_used(model: str) -> float:
        """When any version of `model` was last used."""
        return max(m.last_used for m in loaded[model].values())

    others = sorted((n for n in loaded if n != name), key=last_used)
    used = sum(m.resident_bytes for n in others for m in loaded[n].values())
    chosen = []
    for other in others:
        if used + needed <= budget:
            break
        versions = loaded[other].values()
        if all(v.in_flight == 0 for v in versions):  # a model in use is never evicted
            used -= sum(v.resident_bytes for v in versions)
            chosen.append(other)
    return chosen, used
