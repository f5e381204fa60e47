"""The model-repository calls of the data plane (service/dataplane/calls.py's DataPlane has them): the index,
load (with a `config` of settings over the model's own) and unload, on the server's one repository."""

from __future__ import annotations

from typing import Any

from service.domain.errors import InvalidInput, UnknownModel
from service.domain.text import shown
from service.models.layout import LOAD_ORIGIN, ModelSettings
from service.models.repository import IndexEntry, ModelRepository

LOAD_CONFIG = "config"  # repository load: JSON settings over the model's own (Triton's `config`)


class RepositoryCalls:
    """Triton's repository extension (and ModelMesh's load / unload) on `models`."""

    models: ModelRepository

    def index(self, repository: str = "", ready_only: bool = False) -> list[IndexEntry]:
        """Every model of the repository with its state (only the ready ones if asked)."""
        check_repository(repository)
        return self.models.index(ready_only=ready_only)

    async def load(self, name: str, given: dict[str, Any], repository: str = "") -> None:
        """Load (or reload, with no gap) a model; `given`: the load parameters (only `config`, a JSON
        string of model settings over the model's own)."""
        check_repository(repository)
        settings = None
        for key, value in given.items():
            if key != LOAD_CONFIG:
                raise InvalidInput(f"unsupported load parameter {key!r}: only {LOAD_CONFIG!r} "
                                   "(a JSON string of "
                                   "model settings) is accepted")
            if not isinstance(value, str):
                raise InvalidInput(f"load parameter {LOAD_CONFIG!r} must be a JSON string of model settings, "
                                   f"got {shown(value)}")
            settings = ModelSettings.parse(value, LOAD_ORIGIN)  # checked against the server's limits at load
        await self.models.load(name, settings)

    async def unload(self, name: str, repository: str = "") -> None:
        """Unload a model: new requests are refused, in-flight ones complete."""
        check_repository(repository)
        await self.models.unload(name)


def check_repository(name: str) -> None:
    """UnknownModel unless `name` is "" (the server's one model repository)."""
    if name:
        raise UnknownModel(f"unknown model repository {shown(name)}: this server has one, named by the empty "
                           "string")
