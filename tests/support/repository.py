"""Model repositories for tests: Triton's layout DIR/<model>/<version>/, each version a link to a bundle; and
repositories of stub models (a loader that opens nothing) for the models layer's own tests."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from service.models.budget import Growth
from service.models.layout import Ceilings, ModelSettings, RepositoryLayout
from service.models.repository import ControlMode, ModelRepository
from service.models.served import ServedModel

MIB = 2**20
STUB_INFO = {"provider": "CPUExecutionProvider", "batching": "continuous", "variant": "default"}


def link_repository(root: Path, bundle: Path, versions: Iterable[tuple[str, int]],
                    settings: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
    """root/<name>/<version> -> bundle for each (name, version), and each model's model.json from
    `settings` ({name: settings}); root."""
    for name, version in versions:
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / str(version)).symlink_to(bundle, target_is_directory=True)
    for name, values in (settings or {}).items():
        (root / name / "model.json").write_text(json.dumps(dict(values)))
    return root


# ----- stub models ----------------------------------------------------------------------------------
class StubScheduler:
    """What the repository asks of a scheduler: health, and a drain that records its grace and message."""

    def __init__(self) -> None:
        """Healthy, not drained."""
        self.healthy, self.drained, self.why = True, None, None

    async def drain(self, grace_s: float, why: str = "") -> None:
        """Record that the worker was stopped, and what the requests it failed would hear."""
        self.drained, self.why = grace_s, why


class StubLoader:
    """Counts loads per model; each load waits for `gate` (when set) and may be told to fail."""

    def __init__(self, sizes: dict[str, int] | None = None) -> None:
        """Each model's resident bytes (default 10 MiB)."""
        self.sizes = sizes or {}
        self.loads: list[tuple[str, int]] = []
        self.charges: list[int | None] = []  # the known charge each load was given
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()  # set by the first load
        self.fail: set[str] = set()

    async def __call__(self, name: str, version: int, path: Path, settings: ModelSettings,
                       charge: int | None = None) -> ServedModel:
        """A ServedModel with a stub scheduler, after the gate opens (charged `charge` when known)."""
        self.loads.append((name, version))
        self.charges.append(charge)
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if name in self.fail:
            raise RuntimeError(f"{name}: broken bundle")
        return ServedModel(name, version, runner=None, scheduler=StubScheduler(),
                           resident_bytes=self.sizes.get(name, 10 * MIB) if charge is None else charge,
                           info=dict(STUB_INFO))


def repository_dir(tmp_path: Path, models: dict[str, list[int]]) -> Path:
    """DIR/<model>/<version>/bundle.json for each model and version (the stub loader reads nothing)."""
    for name, versions in models.items():
        for version in versions:
            folder = tmp_path / "repo" / name / str(version)
            folder.mkdir(parents=True)
            (folder / "bundle.json").write_text("{}")
            (folder / "weights.data").write_bytes(b"\0" * 1000)
    return tmp_path / "repo"


def make(tmp_path: Path, models: dict[str, list[int]], mode: ControlMode, budget: int | None = None,
         sizes: dict[str, int] | None = None, ceilings: Ceilings | None = None,
         clock: Callable[[], float] = time.monotonic, rss: Callable[[], int] = lambda: 0
         ) -> tuple[ModelRepository, StubLoader]:
    """A repository of stub models (within `ceilings`, the server's limits, when given; `clock` times the
    backoff of failed loads; its memory budget reads the process's resident bytes from `rss`, by default
    a process that never grows)."""
    loader = StubLoader(sizes)
    layout = RepositoryLayout(root=repository_dir(tmp_path, models))
    repo = ModelRepository(layout, loader, mode, budget, unload_grace_s=5.0, ceilings=ceilings, clock=clock)
    repo.growth = Growth(rss)
    return repo, loader
