"""KServe ModelMesh's models in this process: each ModelMesh model id is an alias of a repository model.

ModelMesh loads a model as (modelId, modelPath). The path names a model folder of the repository, `<model>`
relative to the repository folder or absolute inside it (with ModelMesh Serving: the InferenceService's
`storage.path`, or the folder its storage helper wrote under the repository); the model's own settings and
version policy apply, as for any other load. The id becomes an alias of that model
(`ModelRepository.aliases`), so inference that names the id (ModelMesh writes it into the request's model
name) reaches the model. An id must be a valid model name and never the name of another model of the
repository (it would shadow it): such a load is refused, InvalidInput, before anything changes. Several ids
may share one model: it is loaded once and unloaded with its last id. Sizes are the memory budget's charges
(service/models/budget.py): what the model holds serving, growth charged since included; before a load, what
the budget expects it to be charged.
Under control mode none ModelMesh cannot load or unload: every model is loaded at start. In the request
metrics these calls, as the inference ModelMesh forwards, carry the repository model's name, never ModelMesh's
ids.

ModelMesh asks for the runtime's status (`runtimeStatus`) only when it starts, and expects a runtime that
holds none of its models: as its model-runtime interface specifies, every status answered READY first unloads
what ModelMesh's calls had loaded (`purge`; a repeat call means the ModelMesh container restarted). Concurrent
callers share one purge. Only ModelMesh should reach these calls: they are served under --modelmesh alone, and
the `modelmesh` protocol group can require a header.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import PurePosixPath

from service.domain.errors import InvalidInput, NotReady, RepositoryRefused, UnknownModel
from service.domain.text import shown
from service.models.naming import check_name, inside
from service.models.repository import ControlMode, ModelRepository
from service.models.served import ModelState
from service.ops import metrics

log = logging.getLogger("service.models")
DEFAULT_CAPACITY_BYTES = 2 * 2**30  # reported without --memory-budget
DEFAULT_MODEL_SIZE_BYTES = 512 * 2**20  # a conservative size for a model not yet sized (opus-mt: ~300 MB)
LOADING_TIMEOUT_MS = 240_000  # a load includes opening the sessions and a warm-up translation
CLOSE_MARGIN_S = 5.0  # beyond the unload grace: how long an unload waits for the versions to close
CLOSE_POLL_S = 0.02


class MeshModels:
    """ModelMesh's view of the repository: load, unload and size models by ModelMesh's model ids."""

    def __init__(self, repository: ModelRepository) -> None:
        """ModelMesh's ids live in the repository's aliases; this keeps which ids it loaded."""
        self.repository = repository
        self.ids: dict[str, str] = {}  # ModelMesh model id -> repository model
        self._lock = asyncio.Lock()  # a load and an unload of one model never interleave
        self._purged: asyncio.Future[None] | None = None  # the purge running now, if any

    def target(self, model_path: str) -> str:
        """The repository model a modelPath names (InvalidInput for any path outside the repository)."""
        root = self.repository.layout.root
        if root is None:
            raise RepositoryRefused("ModelMesh loads models from a model repository: start the server with "
                                    "--model-repository")
        path = PurePosixPath(model_path)
        if path.is_absolute():
            base = next((b for b in (root.absolute(), root.resolve()) if path.is_relative_to(b)), None)
            if base is None:
                raise InvalidInput(f"modelPath {shown(model_path)} is outside the model repository")
            path = path.relative_to(base)
        if len(path.parts) != 1 or path.parts[0] == "..":
            raise InvalidInput(f"modelPath {shown(model_path)} must name a model folder of the model "
                               "repository (<model>, relative to it or absolute inside it)")
        name = check_name(path.parts[0])
        inside(root, name)  # a model folder that is a link must stay inside the repository
        return name

    def check_id(self, model_id: str, name: str) -> None:
        """InvalidInput unless model_id may name repository model `name`: a valid model name, and no other
        model's of the repository (an id that is its own model's name shadows nothing)."""
        if not model_id:
            raise InvalidInput("modelId is empty")
        try:
            check_name(model_id)
        except InvalidInput as exc:
            raise InvalidInput(f"modelId {shown(model_id)} is not a valid model name: {exc}") from None
        if model_id != name and self.repository.layout.has(model_id):
            raise InvalidInput(f"modelId {shown(model_id)} is the name of a model of the repository: an id "
                               "must not shadow a repository model")

    def model_of(self, model_id: str) -> str:
        """The repository model of a ModelMesh id (UnknownModel for an id ModelMesh did not load)."""
        if model_id not in self.ids:
            raise UnknownModel(f"ModelMesh has loaded no model {shown(model_id)} here")
        metrics.served_by(*self.repository.label(self.ids[model_id]))
        return self.ids[model_id]

    async def load(self, model_id: str, model_path: str) -> int:
        """Load the model at model_path under model_id (once for every id of it); its size in bytes."""
        if self.repository.mode is ControlMode.NONE:
            raise RepositoryRefused("model control mode is 'none': ModelMesh cannot load models (start the "
                                    "server with --model-control-mode explicit)")
        name = self.target(model_path)
        metrics.served_by(*self.repository.label(name))
        self.repository.layout.entry(name)  # UnknownModel before anything changes
        self.check_id(model_id, name)
        async with self._lock:
            self.ids[model_id] = name
            self.repository.aliases[model_id] = name  # kept if the load fails: ModelMesh unloads the id
            if name not in self.repository.models:
                await self.repository.load(name)
        log.info("ModelMesh model %s is model %s", shown(model_id), name)
        metrics.served_by(*self.repository.label(name))
        return self.size(model_id)

    def size(self, model_id: str) -> int:
        """Bytes the model of model_id holds: the memory budget's charge of its loaded versions (ModelMesh's
        default size where that measured nothing); NotReady when it is not loaded."""
        name = self.model_of(model_id)
        versions = self.repository.models.get(name)
        if not versions:
            raise NotReady(f"model {shown(name)} of ModelMesh model {shown(model_id)} is not loaded")
        return sum(m.resident_bytes for m in versions.values()) or DEFAULT_MODEL_SIZE_BYTES

    def predict(self, model_path: str) -> int:
        """Bytes a load of the model at model_path will be charged, as the memory budget expects."""
        return self.repository.estimate(self.target(model_path))

    async def unload(self, model_id: str) -> None:
        """Forget model_id; unload its model when no other id uses it and wait until it has closed.
        An unknown id is no error (ModelMesh unloads failed loads too)."""
        async with self._lock:
            name = self.ids.pop(model_id, None)
            self.repository.aliases.pop(model_id, None)
            if name is not None:
                metrics.served_by(*self.repository.label(name))
            if name is None or name in self.ids.values():
                return
            retired = list(self.repository.models.get(name, {}).values())
            await self.repository.unload(name)
        end = time.monotonic() + self.repository.unload_grace_s + CLOSE_MARGIN_S
        while any(m.state is not ModelState.UNAVAILABLE for m in retired) and time.monotonic() < end:
            await asyncio.sleep(CLOSE_POLL_S)

    async def purge(self) -> None:
        """Unload every model ModelMesh loaded."""
        for model_id in list(self.ids):
            await self.unload(model_id)

    async def purge_shared(self) -> None:
        """`purge`, joined by any caller that comes while one runs (both return once it has closed the
        models); a call after it ends purges again."""
        if self._purged is None or self._purged.done():
            self._purged = asyncio.ensure_future(self.purge())
        await asyncio.shield(self._purged)

    def capacity(self) -> int:
        """Bytes ModelMesh may fill with models: the memory budget, else DEFAULT_CAPACITY_BYTES."""
        return self.repository.memory_budget or DEFAULT_CAPACITY_BYTES
