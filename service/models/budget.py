"""The memory budget: what each loaded model is charged, which loaded models make room for a load (least
recently used first, never one in use), what a load is expected to be charged before it is measured, and the
growth of the process that no charge covers, charged to the model that served (docs/service.md, "The model
repository")."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from service.domain.errors import MemoryBudgetExceeded
from service.domain.text import shown
from service.ops import metrics
from service.ops.memory import resident_bytes

log = logging.getLogger("service.models")
Key = tuple[str, int]  # (model, version)
Retire = Callable[[str, str, str], None]  # (model, reason, cause): take a model out of service


class Loaded(Protocol):
    """What the budget reads of a loaded model version: its charge (`resident_bytes`), leases, last use."""

    name: str
    version: int
    resident_bytes: int
    in_flight: int
    last_used: float


def files_bytes(folder: Path) -> int:
    """Bytes of the files of a bundle folder (0 if unreadable)."""
    try:
        return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    except OSError:
        return 0  # the load itself says what is wrong with the folder


def files_signature(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """(name, bytes, modification time) of each file of a bundle folder: what a charge was measured on
    (empty if unreadable)."""
    try:
        return tuple(sorted((p.name, (st := p.stat()).st_size, st.st_mtime_ns)
                            for p in folder.iterdir() if p.is_file()))
    except OSError:
        return ()


class Sizes(dict[Key, int]):
    """(model, version) -> its charge at its last load, growth included; and the bytes of its bundle's files,
    by which a version never loaded is expected to be charged as much per file byte as any version so far."""

    def __init__(self) -> None:
        """Nothing charged yet."""
        super().__init__()
        self.files: dict[Key, int] = {}
        self.measured_on: dict[Key, tuple[object, ...]] = {}  # the files and settings a charge holds for

    def charged(self, key: Key, charge: int, folder: Path | None = None, settings: object = None) -> None:
        """Record the charge of a version (and once, the file bytes of its bundle folder; with `folder`, that
        it was measured on those files under `settings`)."""
        self[key] = charge
        if folder is not None:
            self.files.setdefault(key, files_bytes(folder))
            self.measured_on[key] = (files_signature(folder), settings)

    def known(self, key: Key, folder: Path, settings: object) -> int | None:
        """The charge of an earlier load of the same files under the same settings, growth included: a
        reload is charged that, not measured again; None when it must be measured."""
        if self.get(key) and self.measured_on.get(key) == (files_signature(folder), settings):
            return self[key]
        return None

    def expected(self, key: Key, folder: Path) -> int:
        """What a load of that version will be charged: its last charge, else its files' bytes times the
        highest charge per file byte recorded (its files' bytes alone before any)."""
        if self.get(key):
            return self[key]
        files = files_bytes(folder)
        ratios = [self[k] / size for k, size in self.files.items() if size and self.get(k)]
        return max(files, round(files * max(ratios))) if ratios else files


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


def evict(retire: Retire, names: list[str], why: str) -> None:
    """Retire each of `names`, evicted under the memory budget (`why`: for which model)."""
    for name in names:
        retire(name, f"evicted: least recently used under the memory budget, {why}", "evicted")


def make_room(loaded: Mapping[str, Mapping[int, Loaded]], name: str, needed: int, budget: int,
              retire: Retire) -> None:
    """Retire least recently used idle models (`victims`) until `needed` more bytes fit `budget`;
    MemoryBudgetExceeded, saying by how much, when the models in use leave no room."""
    chosen, used = victims(loaded, name, needed, budget)
    evict(retire, chosen, f"for {name}")
    if used + needed > budget:
        raise MemoryBudgetExceeded(
            f"loading {shown(name)} needs about {needed / 2**20:.0f} MiB, and the models in use hold "
            f"{used / 2**20:.0f} MiB of the {budget / 2**20:.0f} MiB memory budget")


class Growth:
    """The process's resident memory above its fixed base (its resident memory before any model loads)
    that the charges of the loaded models do not cover."""

    def __init__(self, rss: Callable[[], int] = resident_bytes) -> None:
        """The base is the resident memory now."""
        self.rss = rss
        self.base = rss()

    def restart(self) -> None:
        """Take the resident memory now as the base (when the repository starts, before any load)."""
        self.base = self.rss()

    def uncharged(self, charged: int) -> int:
        """Bytes above the base beyond `charged` (0 when the charges cover it)."""
        return max(0, self.rss() - self.base - charged)

    def charge(self, loaded: Mapping[str, Mapping[int, Loaded]], model: Loaded, budget: int, sizes: Sizes,
               retire: Retire) -> int:
        """After a request on `model`: if it is still served, charge it what no charge covers (recorded in
        `sizes` and the resident-bytes gauge), then evict others for it until the charges fit `budget`
        (`charge_growth`); the bytes charged."""
        if loaded.get(model.name, {}).get(model.version) is not model:
            return 0
        charged = sum(m.resident_bytes for versions in loaded.values() for m in versions.values())
        if not (uncharged := self.uncharged(charged)):
            return 0
        chosen = charge_growth(loaded, model.name, model.version, uncharged, budget)
        sizes.charged((model.name, model.version), model.resident_bytes)
        version = str(model.version)
        metrics.MODEL_RESIDENT_BYTES.labels(model=model.name, version=version).set(model.resident_bytes)
        log.info("model %s version %s: charged %.1f MiB of the process's growth (now %.1f MiB)", model.name,
                 version, uncharged / 2**20, model.resident_bytes / 2**20)
        evict(retire, chosen, f"as {model.name} grew")
        return uncharged


def charge_growth(loaded: Mapping[str, Mapping[int, Loaded]], name: str, version: int, uncharged: int,
                  budget: int) -> list[str]:
    """Add `uncharged` bytes to the charge of version `version` of `name` (the model that just served); the
    models to evict then (least recently used idle ones, never `name`) so that the charges fit `budget`."""
    loaded[name][version].resident_bytes += uncharged
    own = sum(v.resident_bytes for v in loaded[name].values())
    return victims(loaded, name, own, budget)[0]
