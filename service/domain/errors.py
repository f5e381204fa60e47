"""Every exception the service raises on purpose, in one place and free of any transport.

The runtime, the scheduler and the servicers raise these; `service/api/status.py` maps each to a gRPC status
code in one table. Messages are written for clients: they say what was wrong.
"""

from __future__ import annotations

import uuid


class ServiceError(Exception):
    """Base class of every domain error."""


class InvalidInput(ServiceError, ValueError):
    """A request the model cannot serve: empty or too long text, out-of-range option values."""


class InvalidTensor(InvalidInput):
    """A KServe v2 request whose tensors or parameters break the protocol's rules."""


class LanguageUndetermined(InvalidInput):
    """source_language "auto": the detected language is below the confidence floor or not one the model
    translates from (the message names it and its confidence)."""


class UnknownModel(ServiceError):
    """A request named a model (or version) that the server's model repository does not have."""


class RepositoryRefused(ServiceError):
    """A model load or unload that the server's model control mode does not allow."""


class MemoryBudgetExceeded(ServiceError):
    """A model load that does not fit the memory budget beside the models in use."""


class BatchFull(ServiceError):
    """Not enough free rows in a DecodeBatch for the requests being added."""


class QueueFull(ServiceError):
    """The bounded request queue is full: the client should retry later."""


class ShuttingDown(ServiceError):
    """The server is draining and accepts no new work."""


class NotReady(ServiceError):
    """The model is not loaded or its worker is not running (or is stuck)."""


class DeadlineExceeded(ServiceError):
    """The request's deadline passed before its result was ready."""


class Cancelled(ServiceError):
    """The client cancelled the request."""


class BatchFailed(ServiceError):
    """Inference failed for the batch this request was in (the server keeps serving)."""


class BundleError(ServiceError):
    """A model bundle that cannot be served: missing files, bad manifest, hash mismatch."""


class ProviderUnavailable(ServiceError):
    """The execution provider the server was told to require is not the one running the model."""


def error_id() -> str:
    """A short random id that ties a client's status message to the server's log line."""
    return uuid.uuid4().hex[:12]
