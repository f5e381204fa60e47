"""The model repository's lifecycle (service/models/repository.py) with a stand-in loader: one load for
concurrent first requests, LRU eviction under the budget with the in-flight guard, a failed reload
keeping the old model, unloads that let leases finish, and the control modes' refusals."""

from __future__ import annotations

import asyncio
import re

import pytest

from service.domain.errors import (
    InvalidInput,
    MemoryBudgetExceeded,
    NotReady,
    RepositoryRefused,
    ShuttingDown,
    UnknownModel,
)
from service.models.layout import ModelSettings
from service.models.repository import ControlMode, IndexEntry, ModelRepository, Resolved
from service.models.served import ModelState
from service.ops import metrics
from tests.support.repository import MIB, make


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


def test_names_that_leave_the_repository_are_refused(tmp_path):
    async def main():
        repo, _ = make(tmp_path, {"a": [1]}, ControlMode.ON_DEMAND)
        (tmp_path / "outside").mkdir()
        (tmp_path / "outside" / "1").mkdir()
        (tmp_path / "outside" / "1" / "bundle.json").write_text("{}")
        for name in ("..", "../outside", "/etc", "a/../../outside", "a\\b", ".", "", "a\0b"):
            with pytest.raises((InvalidInput, UnknownModel)):
                await repo.load(name) if name else repo.known(name)
        (repository_dir_root := tmp_path / "repo" / "link").symlink_to(tmp_path / "outside")
        with pytest.raises(InvalidInput, match="outside the model repository"):
            await repo.load(repository_dir_root.name)
        with pytest.raises(InvalidInput, match="versions are positive integers"):
            repo.find("a", "../1")
        with pytest.raises(UnknownModel, match="unknown model 'nope'"):
            await repo.load("nope")
    asyncio.run(main())


def test_the_empty_name_is_the_one_loaded_model(tmp_path):
    async def main():
        repo, _ = make(tmp_path, {"a": [1], "b": [1]}, ControlMode.EXPLICIT)
        await repo.start(["a"])
        async with repo.use("") as model:
            assert model.name == "a"
        await repo.load("b")
        with pytest.raises(InvalidInput, match=r"name a model: this server has 2 loaded \(\['a', 'b'\]\)"):
            repo.find("")
        await repo.close()
        with pytest.raises(ShuttingDown):
            async with repo.use("a"):
                pass
    asyncio.run(main())


def test_one_resolver_answers_every_lookup(tmp_path):
    """find / label / known / ready / use agree on names, versions and aliases; catalog lookups need a
    version the repository has, requests a loaded one, each with its own message."""
    async def main():
        repo, _ = make(tmp_path, {"a": [1, 2], "b": [1]}, ControlMode.EXPLICIT)
        await repo.start(["a"])  # the default policy serves a's latest version, 2
        repo.aliases["mesh-id"] = "a"
        (served,) = repo.loaded()
        assert repo.find("a") == repo.find("mesh-id") == repo.find("") == Resolved("a", None, served)
        assert repo.find("a", "1") == Resolved("a", 1, None) and repo.known("b") == ("b", None)
        assert [repo.label(*q) for q in (("a",), ("mesh-id", "2"), ("",), ("a", "1"), ("a", "x"))] == [
            ("a", "2"), ("a", "2"), ("a", "2"), ("a", ""), ("a", "")]
        assert repo.label("nope") == repo.label("../a") == (metrics.UNKNOWN_MODEL, "")
        assert repo.ready("a") and repo.ready("mesh-id", "2") and not repo.ready("a", "1")
        assert not repo.ready("b")
        with pytest.raises(UnknownModel, match=r"^model 'a' has no version '3'; the repository has \[1, 2]$"):
            repo.ready("a", "3")
        with pytest.raises(UnknownModel, match=r"^unknown model 'nope'; the repository has \['a', 'b'\]$"):
            repo.known("nope")
        for version in ("1", "3"):
            with pytest.raises(UnknownModel, match=rf"^model 'a' has no loaded version '{version}'; "
                                                   r"loaded: \[2\]$"):
                async with repo.use("a", version):
                    pass
        with pytest.raises(NotReady, match="^model 'b' is not loaded; load it through the repository API$"):
            async with repo.use("b"):
                pass
        with pytest.raises(UnknownModel, match=r"^unknown model 'nope'; the repository has \['a', 'b'\]$"):
            async with repo.use("nope"):
                pass
        async with repo.use("mesh-id") as model:
            assert model is served and model.in_flight == 1
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
