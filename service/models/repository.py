"""The models of this process and their lifecycle: one component owns it, the protocols ask it.

Each served model version is a `ServedModel` (its runner and its own scheduler and worker). How models come in
is the control mode (`ControlMode`, as Triton's `--model-control-mode`):

- none: every model of the repository loads at start; loads and unloads through the API are refused;
- explicit: the models named at start (`*`: all), then what the API loads and unloads;
- on-demand: besides, a request for a model that is not loaded loads it. Concurrent first requests
  wait for one load, which leases each the version it brought (waiting.py); a failed load is tried
  again for requests only after its backoff (failures.py). Under a memory budget (bytes), a load that
  would exceed it first unloads the least recently used models with no request in flight (never one in
  use); each model is charged what it holds serving, and the growth it causes (budget.py).

A load of a loaded model loads the new version(s) beside the old and switches with no gap; a failed load keeps
the old serving. An unload takes the model out at once (new requests: NotReady) and lets its in-flight
requests complete. Requests hold a lease (`use`) for as long as they run.

Each model version has one lifecycle record (`VersionState`: state and reason, in `states`; version "" for a
model with no version served), which the index reports. Lookups by (name, version) go through one resolver
(`find`, lookups.py): aliases (ModelMesh's ids) apply there only, never to a name of a repository model, and
it labels the request metrics with what it resolved: only names the repository has become
label values. A load's settings stay within the server's limits (`Ceilings`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from enum import StrEnum

from service.domain.errors import (
    MemoryBudgetExceeded,
    NotReady,
    RepositoryRefused,
    ServiceError,
    ShuttingDown,
    UnknownModel,
)
from service.domain.text import shown
from service.models.budget import Growth, Sizes, make_room
from service.models.failures import Clock, LoadBackoff, client_reason
from service.models.layout import Ceilings, ModelSettings, RepositoryLayout
from service.models.lookups import Lookups
from service.models.naming import check_name
from service.models.served import IndexEntry, Loader, ModelState, Resolved, ServedModel, VersionState
from service.models.waiting import Waiters
from service.ops import metrics
from service.ops.malloc import release_freed_memory

log = logging.getLogger("service.models")
UNLOAD_GRACE_S = 30.0  # how long an unloaded model's in-flight requests may still run


class ControlMode(StrEnum):
    """How models are loaded and unloaded (module docstring)."""

    NONE = "none"
    EXPLICIT = "explicit"
    ON_DEMAND = "on-demand"


class ModelRepository(Lookups):
    """The served models: load, unload, index, lookups, and leases for requests (module docstring)."""

    def __init__(self, layout: RepositoryLayout, loader: Loader, mode: ControlMode = ControlMode.NONE,
                 memory_budget: int | None = None, unload_grace_s: float = UNLOAD_GRACE_S,
                 ceilings: Ceilings | None = None, clock: Clock = time.monotonic) -> None:
        """Nothing loaded yet: `start` loads what the mode says; a model's settings stay within `ceilings`
        (the server's limits; None: none); `clock` times the backoff of failed loads."""
        self.layout, self.loader, self.mode = layout, loader, mode
        self.ceilings = ceilings or Ceilings()
        self.memory_budget, self.unload_grace_s = memory_budget, unload_grace_s
        self.models: dict[str, dict[int, ServedModel]] = {}  # name -> version -> the served model
        # name -> version -> lifecycle record (a served version's: its `status`; none: UNAVAILABLE)
        self.states: dict[str, dict[str, VersionState]] = {}
        self._loading: dict[str, asyncio.Future[None]] = {}  # name -> the load in progress
        self.failures = LoadBackoff(clock)  # failed loads: requests wait for their backoff
        self._waiters = Waiters(self.failures)  # requests waiting for a load, leased what it brings
        self._lock = asyncio.Lock()  # one load or unload at a time: memory is measured per load
        self._closing: set[asyncio.Task] = set()
        self.closing = False  # the server is stopping: no new request gets a model
        self.aliases: dict[str, str] = {}  # another name a model answers to -> the model (ModelMesh's ids)
        self.sizes, self.growth = Sizes(), Growth()  # (name, version) -> last charge; uncharged growth

    async def start(self, names: list[str] | None = None) -> None:
        """Load every model (mode none), or `names` (`*`: every model) in the other modes."""
        wanted = self.layout.names() if self.mode is ControlMode.NONE or names == ["*"] else (names or [])
        self.growth.restart()  # the process's base: before any model loads
        for name in wanted:
            await self._load(name, None)

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        """Every model of the repository (and every served version) with its lifecycle record."""
        out = []
        for name in sorted(set(self.layout.names()) | set(self.models)):
            records = self.states.get(name) or {"": VersionState()}
            out += [IndexEntry(name, version, s.state, s.reason) for version, s in records.items()]
        return [e for e in out if not ready_only or e.state is ModelState.READY]

    @contextlib.asynccontextmanager
    async def use(self, name: str, version: str = "", deadline: float | None = None
                  ) -> AsyncIterator[ServedModel]:
        """A lease on the loaded version a request addresses, loading the model first in on-demand mode
        (NotReady when it is not loaded, UnknownModel when that version is not). A request that waited for
        a load gets the version that load brought: its lease is taken before anything can evict it."""
        if self.closing:
            raise ShuttingDown("the server is shutting down; retry on another replica")
        found = self.find(name, version, on_disk=False)
        model = None
        if found.name not in self.models and self.mode is ControlMode.ON_DEMAND:
            load = self._load(found.name, None)
            if (model := await self._waiters.wait(found.name, found.version, load, deadline)) is None:
                found = self.find(name, version, on_disk=False)
            else:
                metrics.served_by(found.name, str(model.version))
        if model is None:
            if (model := found.model) is None:
                raise self._refusal(found)
            model.acquire()
        try:
            yield model
        finally:
            model.release()
            self._charge_growth(model)

    async def load(self, name: str, settings: ModelSettings | None = None) -> None:
        """The repository API's load: (re)load the model, switching with no gap."""
        if self.mode is ControlMode.NONE:
            raise RepositoryRefused("model control mode is 'none': models cannot be loaded through the API "
                                    "(start the server with --model-control-mode explicit or on-demand)")
        metrics.served_by(*self.label(name))
        check_name(name)
        await self._load(name, settings, reload=True)
        metrics.served_by(*self.label(name))

    async def unload(self, name: str) -> None:
        """The repository API's unload: new requests are refused, in-flight ones complete."""
        if self.mode is ControlMode.NONE:
            raise RepositoryRefused("model control mode is 'none': models cannot be unloaded through the API")
        metrics.served_by(*self.label(name))
        check_name(name)
        async with self._lock:
            if name not in self.models:
                self.layout.entry(name)  # UnknownModel for a model the repository lacks
                return
            self._retire(name, "unloaded through the API", "api")

    async def close(self, grace_s: float = 0.0) -> None:
        """Unload everything (server shutdown): new requests are refused, in-flight ones get grace_s."""
        self.closing = True
        for name in list(self.models):
            self._retire(name, "server stopping", "shutdown", grace_s)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def estimate(self, name: str) -> int:
        """Bytes a load of `name` will be charged under the memory budget (budget.py Sizes)."""
        entry = self.layout.entry(name)
        return sum(self.sizes.expected((name, v), entry.versions[v]) for v in entry.served())

    def resident_bytes(self) -> int:
        """The sum of every loaded model's charge: what it holds while it serves (budget.py)."""
        return sum(m.resident_bytes for m in self.loaded())

    # -- lifecycle ----------------------------------------------------------------------------------

    def _why(self, name: str) -> str:
        """Why no version of `name` is served ("" when it is, or when nothing says why)."""
        return self.states.get(name, {}).get("", VersionState()).reason

    def _refusal(self, found: Resolved) -> ServiceError:
        """Why a request gets no model: UnknownModel for a version not loaded, else NotReady."""
        if versions := self.models.get(found.name):
            return UnknownModel(f"model {shown(found.name)} has no loaded version '{found.version}'; "
                                f"loaded: {sorted(versions)}")
        reason = self._why(found.name)
        hint = "" if self.mode is ControlMode.ON_DEMAND else "; load it through the repository API"
        why = f" ({reason})" if reason else ""
        return NotReady(f"model {shown(found.name)} is not loaded{why}{hint}")

    def _unserved(self, name: str, state: ModelState, reason: str | None = None) -> None:
        """Record that no version of `name` is served, in `state` for `reason` (None: the one it had); a
        served model keeps its records, and the default one (UNAVAILABLE, no reason) is not kept."""
        if name in self.models:
            return
        reason = self._why(name) if reason is None else reason
        if state is ModelState.UNAVAILABLE and not reason:
            self.states.pop(name, None)
        else:
            self.states[name] = {"": VersionState(state, reason)}

    async def _load(self, name: str, settings: ModelSettings | None, reload: bool = False) -> None:
        """Load `name` once however many callers ask at the same time (reload: even when loaded, and
        even within the backoff of a failed load, which refuses the others)."""
        if (running := self._loading.get(name)) is not None:
            return await asyncio.shield(running)
        if name in self.models and not reload:
            return None
        if not reload and (refused := self.failures.refusal(name)) is not None:
            raise refused
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._loading[name] = future
        self._unserved(name, ModelState.LOADING)
        try:
            async with self._lock:
                await self._load_locked(name, settings)
            future.set_result(None)
        except BaseException as exc:
            self._unserved(name, ModelState.UNAVAILABLE)
            future.set_exception(exc)
            future.exception()  # retrieved: callers that did not wait leave no warning
            raise
        finally:
            del self._loading[name]
        return None

    async def _load_locked(self, name: str, settings: ModelSettings | None) -> None:
        """Read the model's entry, make room, load its served versions, then switch to them."""
        entry = self.layout.entry(name)
        merged = self.ceilings.bound(entry, settings)  # InvalidInput beyond the server's limits
        versions = merged.policy.select(list(entry.versions))
        if not versions:
            raise UnknownModel(f"model {shown(name)} has no version to serve (folders 1, 2, ... holding a "
                               f"bundle.json; its policy selects from {sorted(entry.versions)})")
        if self.memory_budget is not None:  # room for what the load is expected to add
            closing = set(self._closing)
            self._make_room(name, sum(self.sizes.expected((name, v), entry.versions[v]) for v in versions))
            if evicted := self._closing - closing:  # their memory goes before this load is measured
                await asyncio.wait(evicted)
        new: dict[int, ServedModel] = {}
        started = time.perf_counter()
        try:
            for version in versions:
                start = time.perf_counter()
                known = (None if self.memory_budget is None
                         else self.sizes.known((name, version), entry.versions[version], merged))
                new[version] = await self.loader(name, version, entry.versions[version], merged, known)
                log.info("model %s version %d loaded in %.2f s (%.1f MiB)", name, version,
                         time.perf_counter() - start, new[version].resident_bytes / 2**20)
        except BaseException as exc:
            for model in new.values():
                self._schedule_close(model, 0.0)
            reason = f"load failed: {client_reason(exc, name)}"
            self._unserved(name, ModelState.UNAVAILABLE, reason)
            if isinstance(exc, Exception):  # not a cancelled load
                self.failures.failed(name, reason)
            self._count(name, "load_failed")
            raise
        for version, model in new.items():
            self.sizes.charged((name, version), model.resident_bytes, entry.versions[version], merged)
        if self.memory_budget is not None:  # what it really added: others make room, or it goes
            try:
                self._make_room(name, sum(m.resident_bytes for m in new.values()))
            except MemoryBudgetExceeded:
                for model in new.values():
                    self._schedule_close(model, 0.0)
                self._unserved(name, ModelState.UNAVAILABLE,
                               "unloaded after its load: it does not fit the memory budget")
                self._count(name, "unload", "budget")
                raise
        self._switch(name, new)
        metrics.MODEL_LOAD_SECONDS.labels(model=name).observe(time.perf_counter() - started)

    def _switch(self, name: str, new: dict[int, ServedModel]) -> None:
        """Serve `new` versions of `name` from now on, leasing them to the requests that wait for them in
        this same step; the old ones finish their requests and close."""
        old = self.models.get(name, {})
        self.models[name] = new
        self._waiters.grant(name, new)
        self.states[name] = {str(v): m.status for v, m in sorted(new.items())}
        self.failures.succeeded(name)
        self._count(name, "load")
        for version, model in new.items():
            metrics.set_model_series(name, str(version), model.resident_bytes, model.info)
        if old:
            self._count(name, "unload", "reload")
        for model in old.values():
            self._schedule_close(model, self.unload_grace_s, "replaced by a reload")

    def _make_room(self, name: str, needed: int) -> None:
        """Unload least recently used idle models until `needed` more bytes fit the budget (budget.py)."""
        assert self.memory_budget is not None
        make_room(self.models, name, needed, self.memory_budget, self._retire)

    def _charge_growth(self, model: ServedModel) -> None:
        """After a request: charge `model` the growth no charge covers, evicting for it (budget.py Growth)."""
        if self.memory_budget is not None and not (self.closing or self._loading or self._closing):
            self.growth.charge(self.models, model, self.memory_budget, self.sizes, self._retire)

    def _count(self, name: str, event: str, cause: str = "") -> None:
        """Count a lifecycle event in the metrics: load, load_failed, unload (cause: why it unloaded)."""
        if event == "unload":
            metrics.MODEL_UNLOADS.labels(model=name, reason=cause).inc()
        else:
            metrics.MODEL_LOADS.labels(model=name, result="ok" if event == "load" else "failed").inc()
        metrics.MODELS_LOADED.set(len(self.loaded()))

    def _retire(self, name: str, reason: str, cause: str, grace_s: float | None = None) -> None:
        """Take `name` out of service now; its versions finish their requests in the background."""
        versions = self.models.pop(name, {})
        self._unserved(name, ModelState.UNAVAILABLE, reason)
        self._count(name, "unload", cause)
        log.info("model %s: %s", name, reason)
        for model in versions.values():
            grace_s = self.unload_grace_s if grace_s is None else grace_s
            self._schedule_close(model, grace_s, None if cause == "shutdown" else reason)

    def _schedule_close(self, model: ServedModel, grace_s: float, reason: str | None = None) -> None:
        """Close a retired model version in the background once its requests are done; those it fails
        then hear that it stopped serving for `reason` (None: the server shut down)."""
        model.state = ModelState.UNLOADING

        async def close() -> None:
            """Close it, drop its series from the metrics (unless a served copy has them) and its memory
            from the process."""
            await model.close(grace_s, reason)
            if model.version not in self.models.get(model.name, {}):
                metrics.remove_model_series(model.name, str(model.version))
            if (recorder := getattr(model.scheduler, "recorder", None)) is not None:
                recorder.remove()
            model.runner = model.scheduler = None  # the sessions' last references
            await asyncio.to_thread(release_freed_memory)

        task = asyncio.get_running_loop().create_task(close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
