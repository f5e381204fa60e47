"""What a status message sent to a client must never show: tracebacks, source files, paths, runtime
internals and the names of exception classes (Python's own and the service's)."""

from __future__ import annotations

import builtins
import re

from service.dataplane import kserve
from service.domain import errors
from service.runtime.decoding import search

INTERNALS = re.compile(r"Traceback|File \"|\.py\b|(/usr|/home|/tmp|/opt|/work|site-packages)/|"
                       r"\b[A-Za-z]+(Error|Exception)\b|onnxruntime|0x[0-9a-f]{8,}")
_CAMEL = re.compile(r"[A-Z][a-z0-9]+[A-Z]")  # "QueueFull", not "Cancelled" or "Warning" (plain words)


def _exception_names() -> frozenset[str]:
    """Names of the exception classes a handler could leak: builtins and the service's own."""
    names = set()
    for module in (builtins, errors, kserve, search):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and _CAMEL.match(value.__name__):
                names.add(value.__name__)
    return frozenset(names)


EXCEPTION_NAMES = _exception_names()
_NAMES = re.compile(r"\b(" + "|".join(sorted(EXCEPTION_NAMES)) + r")\b")


def internals_in(message: str) -> str | None:
    """The first piece of `message` that shows internals, None when the message is clean."""
    found = INTERNALS.search(message) or _NAMES.search(message)
    return found.group(0) if found else None
