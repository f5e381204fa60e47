"""The status table's other rows over HTTP, on faults injected in the worker: a failed batch is 500
with an error id (its text only in the log), a deadline from Triton's `timeout` parameter 504, a full
queue 503; each as tritonclient.http or aiohttp's client sees it, the server serving on after."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from tritonclient.utils import InferenceServerException

from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.decoding import best_texts
from tests.support.http import TIMEOUT_S, text_input, triton_http_client
from tests.support.polling import until, wait_until
from tests.support.scheduling import Gate, gate_on
from tests.support.server import TEXTS, server_config

QUEUE = 2  # texts waiting


@pytest.fixture(scope="module")
def http_server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    with BackgroundServer(server_config(tiny_bundle, http_port=0, queue_size=QUEUE), runner) as srv:
        yield srv


def drained(server: BackgroundServer) -> None:
    scheduler = server.running.scheduler
    wait_until(lambda: scheduler.active_sequences == 0 and scheduler.queue_depth == 0,
               "the scheduler to drain", TIMEOUT_S)


def test_a_failed_batch_is_500_with_an_error_id(http_server, runner):
    failing = Gate(None, fail=lambda stage, n: stage == "decoder" and n == 1)
    with triton_http_client(http_server.http_address) as client:
        with gate_on(runner, failing), pytest.raises(InferenceServerException) as err:
            client.infer("translator", [text_input(TEXTS[:2], binary=True)])
        assert err.value.status() == "500" and "error id" in err.value.message()
        assert "injected" not in err.value.message()  # the exception's text stays in the log
        drained(http_server)
        result = client.infer("translator", [text_input(TEXTS[:1], binary=True)])
        assert result.as_numpy("TRANSLATION")[0].decode() == best_texts(runner, TEXTS[:1])[0]


def test_a_deadline_from_the_timeout_parameter_is_504(http_server, runner):
    """Triton's `timeout` (microseconds; tritonclient's infer(timeout=...)) bounds the request: the
    worker held past it, the answer is 504 and the text leaves the batch."""
    gate = Gate("decoder", at=(1,))
    with triton_http_client(http_server.http_address) as client, gate_on(runner, gate):
        with pytest.raises(InferenceServerException, match="deadline") as err:
            client.infer("translator", [text_input(TEXTS[:1], binary=False)], timeout=200_000)
        assert err.value.status() == "504"
        gate.release()
    drained(http_server)


def test_a_full_queue_is_503_and_the_waiting_requests_finish(http_server, runner):
    """One text decoding (the worker held), QUEUE texts waiting: one more text is refused with 503
    and the reason; the others get their translations once the worker goes on."""
    gate = Gate("decoder", at=(1,))
    base = f"http://{http_server.http_address}/v2/models/translator"
    scheduler = http_server.running.scheduler

    async def scenario() -> tuple[list[tuple[int, dict]], tuple[int, dict]]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session:

            async def post(path: str, payload: dict) -> tuple[int, dict]:
                async with session.post(base + path, json=payload) as answer:
                    return answer.status, json.loads(await answer.read())

            first = asyncio.create_task(post("/generate", {"text_input": TEXTS[0]}))
            await asyncio.to_thread(gate.wait_held)
            inputs = [{"name": "TEXT", "shape": [QUEUE], "datatype": "BYTES", "data": TEXTS[1:1 + QUEUE]}]
            queued = asyncio.create_task(post("/infer", {"inputs": inputs}))
            await until(lambda: scheduler.queue_depth == QUEUE, "the queue to fill", TIMEOUT_S)
            refused = await post("/generate", {"text_input": TEXTS[3]})
            gate.release()
            return [await first, await queued], refused

    with gate_on(runner, gate):
        answered, refused = asyncio.run(scenario())
    assert refused[0] == 503 and "queue is full" in refused[1]["error"], refused
    assert answered[0] == (200, {"model_name": "translator", "model_version": "1",
                                 "text_output": best_texts(runner, TEXTS[:1])[0]})
    status, payload = answered[1]
    assert status == 200 and payload["outputs"][0]["data"] == best_texts(runner, TEXTS[1:1 + QUEUE])
    drained(http_server)
