"""ModelMesh's models (service/models/mesh.py) over a repository of stub models: ids that cannot shadow a
repository model, a resolver where a repository name always means that model, and the purge that every
READY runtimeStatus does."""

from __future__ import annotations

import asyncio

import pytest

from service.domain.errors import InvalidInput
from service.models.mesh import MeshModels
from service.models.repository import ControlMode
from service.models.served import ModelState
from tests.support.repository import make


@pytest.mark.parametrize(("model_id", "message"), [
    ("b", "modelId 'b' is the name of a model of the repository"),
    ("", "modelId is empty"),
    ("a/b", "modelId 'a/b' is not a valid model name"),
    ("..", "modelId '..' is not a valid model name"),
    ("x" * 129, "is not a valid model name"),
    ("(unknown)", "is not a valid model name"),
])
def test_an_id_that_would_shadow_a_model_or_is_no_name_is_refused(tmp_path, model_id, message):
    """Refused as invalid input before anything changes: no alias, no id, no load."""
    async def main():
        repo, loader = make(tmp_path, {"a": [1], "b": [1]}, ControlMode.EXPLICIT)
        mesh = MeshModels(repo)
        with pytest.raises(InvalidInput, match=message.replace("(", r"\(").replace(")", r"\)")):
            await mesh.load(model_id, "a")
        assert (mesh.ids, repo.aliases, loader.loads) == ({}, {}, [])
        assert repo.find("b").name == "b"
    asyncio.run(main())


def test_an_id_may_be_its_own_models_name(tmp_path):
    async def main():
        repo, _ = make(tmp_path, {"a": [1], "b": [1]}, ControlMode.EXPLICIT)
        mesh = MeshModels(repo)
        await mesh.load("a", "a")
        assert repo.find("a").name == "a" and mesh.size("a") > 0
    asyncio.run(main())


def test_a_repository_name_resolves_to_its_model_whatever_the_aliases(tmp_path):
    """A model folder that appears after an id of the same name was loaded wins over the id: requests
    for that name reach the repository model; ModelMesh's own calls by the id still find their model."""
    async def main():
        repo, _ = make(tmp_path, {"a": [1], "b": [1]}, ControlMode.EXPLICIT)
        mesh = MeshModels(repo)
        await mesh.load("c", "a")
        assert repo.find("c").name == "a" and repo.label("c") == ("a", "1")
        (tmp_path / "repo" / "c" / "1").mkdir(parents=True)
        (tmp_path / "repo" / "c" / "1" / "bundle.json").write_text("{}")
        assert repo.find("c").name == "c" and repo.find("c").model is None
        assert repo.label("c") == ("c", "")
        assert mesh.size("c") > 0  # ModelMesh's id still names its model for ModelMesh
        repo.aliases["b"] = "a"  # however an alias came to shadow a loaded model, it does not
        await repo.load("b")
        assert repo.find("b").name == "b" and repo.find("b").model is repo.models["b"][1]
    asyncio.run(main())


def test_every_runtime_status_purges_what_modelmesh_loaded(tmp_path):
    """purge_shared unloads what ModelMesh loaded, closed before it returns, on every call (a repeat
    status means ModelMesh restarted); the repository's other models stay."""
    async def main():
        repo, _ = make(tmp_path, {"a": [1], "b": [1], "c": [1]}, ControlMode.EXPLICIT)
        await repo.load("c")
        mesh = MeshModels(repo)
        await mesh.load("before-status", "a")
        retired = repo.models["a"][1]
        await mesh.purge_shared()
        assert retired.state is ModelState.UNAVAILABLE and sorted(repo.models) == ["c"] and mesh.ids == {}
        await mesh.load("after-status", "b")
        await mesh.purge_shared()
        assert sorted(repo.models) == ["c"] and mesh.ids == {}
    asyncio.run(main())


def test_concurrent_statuses_both_wait_for_the_one_purge(tmp_path):
    """Two runtimeStatus calls at once: neither answers before the purge has closed the model."""
    async def main():
        repo, _ = make(tmp_path, {"a": [1]}, ControlMode.EXPLICIT)
        mesh = MeshModels(repo)
        await mesh.load("m", "a")
        retired = repo.models["a"][1]

        async def status() -> ModelState:
            """One runtimeStatus's purge; the retired model's state when it returns."""
            await mesh.purge_shared()
            return retired.state

        assert await asyncio.gather(status(), status()) == [ModelState.UNAVAILABLE] * 2
    asyncio.run(main())
