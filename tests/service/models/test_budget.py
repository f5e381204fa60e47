"""The memory budget's charging rules (service/models/budget.py) with stand-in models: which models make room,
what a load is expected to be charged, and the process's growth charged to the model that served, evicting
least recently used idle models (never one in use) when the charges no longer fit. Every figure below is
worked out by hand from the inputs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from service.domain.errors import MemoryBudgetExceeded
from service.models.budget import Growth, Sizes, charge_growth, make_room, victims
from service.models.repository import ControlMode
from tests.support.metrics import sample
from tests.support.repository import MIB, make


@dataclass
class Fake:
    """A loaded model version as the budget reads it."""

    name: str
    version: int
    resident_bytes: int
    in_flight: int = 0
    last_used: float = 0.0


def loaded(*models: Fake) -> dict[str, dict[int, Fake]]:
    """{name: {version: model}} of the models."""
    out: dict[str, dict[int, Fake]] = {}
    for m in models:
        out.setdefault(m.name, {})[m.version] = m
    return out


def test_victims_are_the_least_recently_used_idle_models_until_the_load_fits():
    # others by last use: b (in use), a, c: 60 held; 60 + 25 > 70, b is skipped, a goes (50 + 25 > 70), c goes
    models = loaded(Fake("a", 1, 10, last_used=1), Fake("b", 1, 20, in_flight=1, last_used=0),
                    Fake("c", 1, 30, last_used=2))
    assert victims(models, "d", 25, 70) == (["a", "c"], 20)
    assert victims(models, "d", 10, 70) == ([], 60)  # 60 + 10 fits as it is
    assert victims(models, "c", 45, 70) == (["a"], 20)  # 30 + 45 > 70; c itself is never among the others


def test_make_room_retires_victims_and_refuses_what_the_models_in_use_leave_no_room_for():
    retired: list[tuple[str, str, str]] = []
    models = loaded(Fake("a", 1, 10 * MIB, last_used=1), Fake("b", 1, 20 * MIB, in_flight=1))

    def retire(name: str, reason: str, cause: str) -> None:
        """Take the model out, as the repository does."""
        retired.append((name, reason, cause))
        del models[name]

    make_room(models, "c", 10 * MIB, 30 * MIB, retire)  # 30 + 10 > 30: a goes, b is in use
    assert retired == [("a", "evicted: least recently used under the memory budget, for c", "evicted")]
    with pytest.raises(MemoryBudgetExceeded) as error:
        make_room(models, "c", 15 * MIB, 30 * MIB, retire)  # 20 (b, in use) + 15 > 30
    assert str(error.value) == ("loading 'c' needs about 15 MiB, and the models in use hold 20 MiB of the "
                                "30 MiB memory budget")
    assert len(retired) == 1


def test_a_version_never_loaded_is_expected_to_cost_as_much_per_file_byte_as_the_costliest_so_far(tmp_path):
    def folder(name: str, size: int) -> Path:
        (path := tmp_path / name).mkdir()
        (path / "weights.data").write_bytes(b"\0" * size)
        return path

    sizes = Sizes()
    assert sizes.expected(("x", 1), folder("x", 300)) == 300  # nothing charged yet: its files' bytes
    sizes.charged(("a", 1), 5000, folder("a", 1000))  # 5 per file byte
    sizes.charged(("b", 1), 4000, folder("b", 2000))  # 2 per file byte
    assert sizes.expected(("x", 1), tmp_path / "x") == 1500  # 300 * 5
    assert sizes.expected(("a", 1), tmp_path / "a") == 5000  # its own last charge
    sizes.charged(("a", 1), 7000)  # growth: the files stay those of its load
    assert (sizes[("a", 1)], sizes.files[("a", 1)]) == (7000, 1000)
    assert sizes.expected(("x", 1), tmp_path / "x") == 2100  # 300 * 7


def test_growth_is_what_the_charges_leave_uncovered_above_the_base():
    readings = iter([100, 180, 140])
    growth = Growth(lambda: next(readings))
    assert growth.base == 100
    assert growth.uncharged(50) == 30  # 180 - 100 - 50
    assert growth.uncharged(50) == 0  # 140 - 100 < 50


def test_growth_charged_to_the_model_that_served_evicts_the_least_recently_used_idle_one():
    a, b, c = Fake("a", 1, 10, last_used=1), Fake("b", 1, 20, last_used=2), Fake("c", 1, 30, last_used=3)
    models = loaded(a, b, c)
    # c: 30 + 15 = 45; with a and b 75 > 70: a goes (65 fits)
    assert charge_growth(models, "c", 1, 15, 70) == ["a"]
    assert (a.resident_bytes, b.resident_bytes, c.resident_bytes) == (10, 20, 45)
    a.in_flight = 1  # a model in use stays whatever its age: b goes, and even then 75 does not fit
    assert charge_growth(models, "c", 1, 10, 60) == ["b"] and c.resident_bytes == 55


def gauge(name: str) -> float:
    """The resident-bytes gauge of version 1 of `name`."""
    return sample("translator_model_resident_bytes", model=name, version="1")


def test_a_request_charges_its_model_the_growth_and_evicts_for_it_once_closes_are_done(tmp_path):
    rss = [0]

    async def main() -> None:
        repo, _ = make(tmp_path, {"a": [1], "b": [1], "c": [1]}, ControlMode.ON_DEMAND, budget=40 * MIB,
                       rss=lambda: rss[0])
        for name, held in (("a", 10), ("b", 20), ("c", 30)):  # 10 MiB each, all covered by the charges
            async with repo.use(name):
                rss[0] = held * MIB
        async with repo.use("c"):
            rss[0] = 45 * MIB  # 15 MiB that no charge covers
        # c: 10 + 15 = 25; with a and b 45 > 40: a, the least recently used, goes
        assert sorted(repo.models) == ["b", "c"] and repo.models["c"][1].resident_bytes == 25 * MIB
        assert repo.sizes[("c", 1)] == 25 * MIB and gauge("c") == 25 * MIB
        assert repo.index()[0].reason == "evicted: least recently used under the memory budget, as c grew"
        async with repo.use("b"):
            rss[0] = 60 * MIB  # a is still closing: its memory may still be in the process
        assert repo.models["b"][1].resident_bytes == 10 * MIB
        await asyncio.gather(*repo._closing)
        async with repo.use("b"):
            rss[0] = 38 * MIB  # 3 MiB over b's 10 and c's 25
        assert repo.models["b"][1].resident_bytes == 13 * MIB and sorted(repo.models) == ["b", "c"]
        assert repo.resident_bytes() == 38 * MIB and gauge("b") == 13 * MIB

    asyncio.run(main())


def test_growth_never_evicts_a_model_in_use(tmp_path):
    rss = [0]

    async def main() -> None:
        repo, _ = make(tmp_path, {"a": [1], "b": [1], "c": [1]}, ControlMode.ON_DEMAND, budget=30 * MIB,
                       rss=lambda: rss[0])
        async with repo.use("a"):  # a, the least recently used from here on, is in use throughout
            rss[0] = 10 * MIB
            async with repo.use("b"):
                rss[0] = 20 * MIB
            async with repo.use("c"):
                rss[0] = 38 * MIB  # 8 MiB that no charge covers
            # c: 18; 10 + 10 + 18 > 30: b goes (28 fits), a stays
            assert sorted(repo.models) == ["a", "c"] and repo.models["c"][1].resident_bytes == 18 * MIB
    asyncio.run(main())


def test_a_first_load_is_expected_to_cost_what_loads_of_files_as_large_cost(tmp_path):
    """c, never loaded, is expected to be charged as a and b were (10 MiB for files as large as theirs):
    the room is made before it loads, not after."""
    async def main() -> None:
        repo, loader = make(tmp_path, {"a": [1], "b": [1], "c": [1]}, ControlMode.ON_DEMAND, budget=25 * MIB)
        for name in ("a", "b"):
            async with repo.use(name):
                pass
        assert repo.estimate("c") == 10 * MIB
        loader.gate = asyncio.Event()
        loader.started.clear()

        async def request() -> None:
            async with repo.use("c"):
                pass

        task = asyncio.create_task(request())
        await loader.started.wait()
        assert sorted(repo.models) == ["b"]  # a went before c's load began
        loader.gate.set()
        await task
        assert sorted(repo.models) == ["b", "c"]
    asyncio.run(main())


def test_a_reload_of_the_same_files_and_settings_is_charged_its_last_charge_not_measured_again(tmp_path):
    async def main() -> None:
        repo, loader = make(tmp_path, {"a": [1], "b": [1]}, ControlMode.ON_DEMAND, budget=15 * MIB,
                            sizes={"a": 10 * MIB, "b": 10 * MIB})
        for name in ("a", "b", "a"):  # each load evicts the other
            async with repo.use(name):
                pass
        assert loader.loads == [("a", 1), ("b", 1), ("a", 1)]
        assert loader.charges == [None, None, 10 * MIB]  # the reload of a: its last charge
        repo.sizes.charged(("b", 1), 12 * MIB)  # growth charged to b before it went
        async with repo.use("b"):
            pass
        assert loader.charges[-1] == 12 * MIB and repo.models["b"][1].resident_bytes == 12 * MIB
        weights = tmp_path / "repo" / "a" / "1" / "weights.data"
        weights.write_bytes(b"\1" * 2000)  # new files: measured again
        async with repo.use("a"):
            pass
        assert loader.charges[-1] is None

    asyncio.run(main())


def test_a_known_charge_holds_only_for_the_files_and_settings_it_was_measured_on(tmp_path):
    (folder := tmp_path / "v1").mkdir()
    (weights := folder / "weights.data").write_bytes(b"\0" * 100)
    sizes = Sizes()
    assert sizes.known(("a", 1), folder, "settings") is None  # never loaded
    sizes.charged(("a", 1), 5000, folder, "settings")
    assert sizes.known(("a", 1), folder, "settings") == 5000
    assert sizes.known(("a", 1), folder, "other settings") is None
    assert sizes.known(("b", 1), folder, "settings") is None  # another model's
    weights.write_bytes(b"\0" * 101)
    assert sizes.known(("a", 1), folder, "settings") is None
