"""The repository's lookups (service/models/lookups.py) with a stand-in loader: names that leave the
repository are refused, the empty name is the one loaded model, and one resolver answers find, label,
known, ready and use alike, each refusal with its own message."""

from __future__ import annotations

import asyncio

import pytest

from service.domain.errors import InvalidInput, NotReady, ShuttingDown, UnknownModel
from service.models.repository import ControlMode, Resolved
from service.ops import metrics
from tests.support.repository import make


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
