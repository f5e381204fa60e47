"""The model repository's lifecycle (service/models/repository.py) with a stand-in loader: one load for
concurrent first requests, LRU eviction under the budget with the in-flight guard, a failed reload
keeping the old model, unloads that let leases finish, and the control modes' refusals."""

from __future__ import annotations

import asyncio
import re

import pytest
from prometheus_client import REGISTRY

from service.domain.errors import (
    MemoryBudgetExceeded,
    NotReady,
    RepositoryRefused,
    UnknownModel,
)
from service.models.layout import ModelSettings
from service.models.repository import ControlMode, IndexEntry, ModelRepository
from service.models.served import ModelState
from tests.support.polling import until
from tests.support.repository import MIB, STUB_INFO, make


def reasons(repo: ModelRepository) -> dict[str, str]:
    """Each model's reason in the repository index (of its last entry)."""
    return {e.name: e.reason for e in repo.index()}


def test_mode_none_loads_everything_and_refuses_the_api(tmp_path):
    async def main():
        repo, loader = make(tmp_path, {"a": [1], "b": [1, 2]}, ControlMode.NONE)
        await repo.start()
        assert sorted(loader.loads) == [("a", 1), ("b", 2)]  # latest version only (default policy)
        with pytest.raises(RepositoryRefused, match="control mode is 'none'"):
            await repo.load("a")
        with pytest.raises(RepositoryRefused):
            await repo.unload("a")
        assert [(e.name, e.version, e.state) for e in repo.index()] == [
            ("a", "1", ModelState.READY), ("b", "2", ModelState.READY)]
    asyncio.run(main())


def test_concurrent_first_requests_cause_exactly_one_load(tmp_path):
    async def main():
        repo, loader = make(tmp_path, {"a": [1], "b": [1]}, ControlMode.ON_DEMAND)
        await repo.start()
        assert loader.loads == []
        loader.gate = asyncio.Event()
        served: list[str] = []

        async def request() -> None:
            async with repo.use("a") as model:
                served.append(model.name)

        tasks = [asyncio.create_task(request()) for _ in range(8)]
        await asyncio.wait_for(loader.started.wait(), 10)  # the first request started the load
        assert [e.state for e in repo.index() if e.name == "a"] == [ModelState.LOADING]
        loader.gate.set()
        await asyncio.gather(*tasks)
        assert loader.loads == [("a", 1)] and served == ["a"] * 8
    asyncio.run(main())


def test_lru_eviction_under_the_budget_spares_models_in_use(tmp_path):
    async def main():
        repo, loader = make(tmp_path, {"a": [1], "b": [1], "c": [1], "d": [1]}, ControlMode.ON_DEMAND,
                            budget=25 * MIB)
        for name in ("a", "b"):
            async with repo.use(name):
                pass
        async with repo.use("a"):  # a is now more recently used than b
            pass
        async with repo.use("c"):  # 30 MiB would not fit: b, the least recently used, goes
            assert sorted(repo.models) == ["a", "c"]
            assert reasons(repo)["b"] == "evicted: least recently used under the memory budget, for c"
            async with repo.use("a"):
                # both loaded models hold a lease: d cannot be made room for
                with pytest.raises(MemoryBudgetExceeded, match="memory budget"):
                    async with repo.use("d"):
                        pass
        assert sorted(repo.models) == ["a", "c"]
        async with repo.use("d"):  # now idle: a (least recently used of the two) goes
            assert sorted(repo.models) == ["c", "d"]
        assert reasons(repo) == {"a": "evicted: least recently used under the memory budget, for d",
                                 "b": "evicted: least recently used under the memory budget, for c",
                                 "c": "", "d": ""}
    asyncio.run(main())


def test_a_failed_reload_keeps_the_old_model_serving(tmp_path):
    async def main():
        repo, loader = make(tmp_path, {"a": [1]}, ControlMode.EXPLICIT)
        await repo.start(["a"])
        old = repo.models["a"][1]
        old_scheduler = old.scheduler
        loader.fail.add("a")
        with pytest.raises(RuntimeError, match="broken bundle"):
            await repo.load("a")
        async with repo.use("a") as model:
            assert model is old and model.state is ModelState.READY
        loader.fail.clear()
        await repo.load("a")  # a good reload switches to the new model and retires the old one
        async with repo.use("a") as model:
            assert model is not old
        await asyncio.gather(*repo._closing)
        assert old.state is ModelState.UNAVAILABLE and old_scheduler.drained is not None
        assert old.runner is None and old.scheduler is None  # its memory goes with these references
        assert old_scheduler.why == "model 'a' version 1 stopped serving (replaced by a reload)"
    asyncio.run(main())


def test_what_the_requests_a_retired_version_fails_hear(tmp_path):
    async def main():
        repo, _ = make(tmp_path, {"a": [1], "b": [1]}, ControlMode.EXPLICIT)
        await repo.start(["a", "b"])
        schedulers = {name: repo.models[name][1].scheduler for name in ("a", "b")}
        await repo.unload("a")
        await repo.close()
        assert schedulers["a"].why == "model 'a' version 1 stopped serving (unloaded through the API)"
        assert schedulers["b"].why == "the server shut down"
    asyncio.run(main())


def test_unload_refuses_new_requests_and_lets_leases_finish(tmp_path):
    async def main():
        repo, loader = make(tmp_path, {"a": [1]}, ControlMode.EXPLICIT)
        await repo.start(["*"])
        release = asyncio.Event()
        inside = asyncio.Event()

        async def long_request() -> str:
            async with repo.use("a") as model:
                inside.set()
                await release.wait()
                return model.state.value

        task = asyncio.create_task(long_request())
        await inside.wait()
        await repo.unload("a")
        with pytest.raises(NotReady, match="not loaded.*unloaded through the API"):
            async with repo.use("a"):
                pass
        assert not task.done()  # the in-flight request still runs
        release.set()
        assert await task == "UNLOADING"
        await asyncio.gather(*repo._closing)
        assert [e.state for e in repo.index()] == [ModelState.UNAVAILABLE]
    asyncio.run(main())


def test_each_model_version_has_one_lifecycle_record(tmp_path):
    """The index reports the records: a failed first load says why, a load of a name the repository
    lacks leaves no record behind, a load replaces the model's record by its versions'."""
    async def main():
        repo, loader = make(tmp_path, {"a": [1, 2]}, ControlMode.EXPLICIT)
        loader.fail.add("a")
        with pytest.raises(RuntimeError, match="broken bundle"):
            await repo.load("a")
        ((entry),) = repo.index()  # a RuntimeError's text is the log's: the client reads an error id
        assert (entry.name, entry.state) == ("a", ModelState.UNAVAILABLE)
        assert "broken bundle" not in entry.reason
        hidden = r"load failed: internal error \(error id \w+; details in the server log\)"
        assert re.fullmatch(hidden, entry.reason), entry.reason
        with pytest.raises(NotReady, match=r"not loaded \(load failed: internal error \(error id"):
            async with repo.use("a"):
                pass
        with pytest.raises(UnknownModel):
            await repo.load("nope")
        assert set(repo.states) == {"a"}
        loader.fail.clear()
        await repo.load("a", ModelSettings.from_json({"version_policy": {"all": {}}}))
        assert repo.index() == [IndexEntry("a", v, ModelState.READY) for v in ("1", "2")]
        assert [m.status for m in repo.loaded("a")] == list(repo.states["a"].values())
        await repo.unload("a")
        assert repo.index() == [IndexEntry("a", "", ModelState.UNAVAILABLE, "unloaded through the API")]
    asyncio.run(main())


def test_a_request_that_waited_for_a_load_gets_the_model_before_another_load_can_evict_it(tmp_path):
    """Under a budget of one model: a's load ends while b's load waits for the repository; b's load runs
    before a's first request resumes, and would evict a (idle without a lease). The load leased a to its
    waiting request, so b is refused instead, and b loads once a's request is done."""
    async def main():
        repo, loader = make(tmp_path, {"a": [1], "b": [1]}, ControlMode.ON_DEMAND, budget=15 * MIB)
        loader.gate = gate = asyncio.Event()
        done = asyncio.Event()
        served: list[tuple[str, int]] = []

        async def request_a() -> None:
            async with repo.use("a") as model:
                served.append((model.name, model.in_flight))
                await done.wait()

        first = asyncio.create_task(request_a())
        await asyncio.wait_for(loader.started.wait(), 10)  # a's load waits for the gate
        second = asyncio.create_task(repo.use("b").__aenter__())
        await until(lambda: "b" in repo._loading, "b's load to wait for a's")
        loader.gate = None  # b's load runs at once: no await between its start and the eviction
        gate.set()
        with pytest.raises(MemoryBudgetExceeded, match="models in use hold 10 MiB"):
            await second
        await until(lambda: bool(served), "a's request to get its model")
        assert served == [("a", 1)] and sorted(repo.models) == ["a"]
        done.set()
        await first
        async with repo.use("b") as model:  # a is idle now: it makes room
            assert model.name == "b" and sorted(repo.models) == ["b"]
        assert loader.loads.count(("a", 1)) == 1 and loader.loads[-1] == ("b", 1)
        assert not repo._waiters.waiting
    asyncio.run(main())


class FakeClock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        """At 1000 s."""
        self.now = 1000.0

    def __call__(self) -> float:
        """The time now."""
        return self.now


async def refused(repo: ModelRepository, name: str) -> str:
    """The message of the NotReady a request for `name` gets (fails the test if it gets a model)."""
    with pytest.raises(NotReady) as err:
        async with repo.use(name):
            pass
    return str(err.value)


def test_a_failed_load_is_retried_only_after_its_backoff_or_an_explicit_load(tmp_path):
    """A failing model is loaded once, then requests are refused at once with the reason and when it is
    tried again, until the backoff (1 s, doubling, at most 60 s) passes or a load through the API; a
    success forgets the failures. The loader's exception text reaches no client."""
    async def main():
        clock = FakeClock()
        repo, loader = make(tmp_path, {"a": [1]}, ControlMode.ON_DEMAND, clock=clock)
        loader.fail.add("a")
        loader.gate = asyncio.Event()
        waiting = [asyncio.create_task(refused(repo, "a")) for _ in range(3)]
        await asyncio.wait_for(loader.started.wait(), 10)
        loader.gate.set()
        messages = await asyncio.gather(*waiting)  # every request that waited for the failed load
        assert loader.loads == [("a", 1)] and len(set(messages)) == 1
        (reason,) = [e.reason for e in repo.index()]
        assert re.fullmatch(r"load failed: internal error \(error id \w+; details in the server log\)",
                            reason)
        expected = (f"model 'a' is not loaded ({reason}); its load failed once: a request loads it again in "
                    "{} s, a load through the repository API at once")
        assert messages[0] == expected.format("1.0") and "broken bundle" not in messages[0]
        for _ in range(5):
            assert await refused(repo, "a") == expected.format("1.0")
        clock.now += 0.5
        assert await refused(repo, "a") == expected.format("0.5")
        assert loader.loads == [("a", 1)]
        clock.now += 0.5  # the backoff has passed: the next request loads again
        message = await refused(repo, "a")
        assert loader.loads == [("a", 1)] * 2
        assert "its load failed 2 times in a row: a request loads it again in 2.0 s" in message
        assert "in 2.0 s" in await refused(repo, "a") and len(loader.loads) == 2
        for attempt in range(3, 10):  # explicit loads try at once; the wait doubles up to 60 s
            with pytest.raises(RuntimeError):
                await repo.load("a")
            assert len(loader.loads) == attempt
            wait = min(60.0, 2.0 ** (attempt - 1))
            assert f"failed {attempt} times in a row" in (message := await refused(repo, "a"))
            assert f"in {wait:.1f} s" in message and len(loader.loads) == attempt
        loader.fail.clear()
        await repo.load("a")
        assert repo.failures.failures == {}
        await repo.unload("a")
        loader.fail.add("a")
        assert "its load failed once: a request loads it again in 1.0 s" in await refused(repo, "a")
        assert len(loader.loads) == 11
    asyncio.run(main())


def series(name: str, model: str) -> dict[str, float]:
    """The samples of metric `name` of `model`, by version label."""
    return {s.labels["version"]: s.value for family in REGISTRY.collect() for s in family.samples
            if s.name == name and s.labels.get("model") == model}


def test_a_model_versions_series_follow_it_through_reload_unload_and_eviction(tmp_path):
    """A reload of the same version keeps its series with the new copy's value (the old copy closing
    after it removes nothing); an unload and an eviction remove them once the copy has closed."""
    async def main():
        repo, loader = make(tmp_path, {"series-a": [1], "series-b": [1]}, ControlMode.EXPLICIT,
                            budget=25 * MIB, sizes={"series-a": 10 * MIB, "series-b": 20 * MIB})
        await repo.load("series-a")
        assert series("translator_model_resident_bytes", "series-a") == {"1": 10 * MIB}
        assert series("translator_model_info", "series-a") == {"1": 1.0}
        loader.sizes["series-a"] = 12 * MIB  # new files, so the reload is measured again
        (tmp_path / "repo" / "series-a" / "1" / "weights.data").write_bytes(b"\1" * 2000)
        await repo.load("series-a")
        await asyncio.gather(*repo._closing)  # the old copy has closed
        assert series("translator_model_resident_bytes", "series-a") == {"1": 12 * MIB}
        assert series("translator_model_info", "series-a") == {"1": 1.0}
        ((info),) = [s.labels for f in REGISTRY.collect() for s in f.samples
                     if s.name == "translator_model_info" and s.labels["model"] == "series-a"]
        assert {k: info[k] for k in STUB_INFO} == STUB_INFO
        await repo.unload("series-a")
        await asyncio.gather(*repo._closing)
        assert series("translator_model_resident_bytes", "series-a") == {}
        assert series("translator_model_info", "series-a") == {}
        await repo.load("series-a")
        await repo.load("series-b")  # 12 + 20 MiB exceed 25: series-a is evicted
        assert reasons(repo)["series-a"].startswith("evicted")
        await asyncio.gather(*repo._closing)
        assert series("translator_model_resident_bytes", "series-a") == {}
        assert series("translator_model_info", "series-a") == {}
        assert series("translator_model_resident_bytes", "series-b") == {"1": 20 * MIB}
        await repo.close()
        assert series("translator_model_info", "series-b") == {}
    asyncio.run(main())
