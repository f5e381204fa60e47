"""A connection's age (--max-connection-age-ms) sends GOAWAY so that clients move to new connections, and
its grace bounds the calls still running: by default (grace 0) they finish however long they take (a whole
document, a long stream), and with a grace they are cut when it ends. Driven through tritonclient's
ModelStreamInfer, one call kept busy with one request after another."""

from __future__ import annotations

import contextlib
import queue
import time
from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException

from service.runtime.runner import Runner
from service.server import BackgroundServer, grpc_options
from tests.support.kserve import text_input, triton_client
from tests.support.server import server_config

AGE_MS = 300
BUSY_S = 2.0  # how long the call is kept busy: several ages and graces
MAX_REQUESTS = 5000  # the loop's bound, whatever the machine's speed (BUSY_S ends it first: > 0.4 ms each)


def busy_stream(address: str) -> tuple[int, float, str | None]:
    """One ModelStreamInfer call sending a request, then the next once it is answered, for BUSY_S: the
    answers, the seconds the call lived, and the error that ended it (None: it lived BUSY_S)."""
    with triton_client(address) as client:
        answers: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put(error))
        answered, start = 0, time.monotonic()
        while time.monotonic() - start < BUSY_S and answered < MAX_REQUESTS:
            # A call cut between two requests refuses the next one; its error comes through the callback.
            with contextlib.suppress(InferenceServerException):
                client.async_stream_infer("translator", [text_input(["hi there"])], request_id=str(answered))
            if (error := answers.get(timeout=60)) is not None:
                return answered, time.monotonic() - start, str(error)
            answered += 1
        return answered, time.monotonic() - start, None

def test_by_default_a_call_outlives_its_connections_age():
    options = dict(grpc_options(server_config(Path("b"), max_connection_age_ms=AGE_MS)))
    assert options["grpc.max_connection_age_ms"] == AGE_MS
    assert "grpc.max_connection_age_grace_ms" not in options  # gRPC's own: running calls finish


@pytest.mark.parametrize("grace_ms", [0, AGE_MS])
def test_a_running_call_is_cut_only_where_a_grace_is_set(tiny_bundle: Path, runner: Runner, grace_ms: int):
    config = server_config(tiny_bundle, max_connection_age_ms=AGE_MS, max_connection_age_grace_ms=grace_ms)
    with BackgroundServer(config, runner) as server:
        answered, lived, error = busy_stream(server.address)
    assert answered > 0
    if grace_ms:
        assert error is not None and "UNAVAILABLE" in error.upper(), (answered, lived, error)
        assert lived < BUSY_S
    else:
        assert error is None, (answered, lived, error)
        assert lived > (AGE_MS + AGE_MS) / 1000  # past its connection's age and a grace of that length
