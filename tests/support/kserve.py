"""KServe v2 through Triton's own client: TEXT inputs and a client of a server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import tritonclient.grpc as triton
from tritonclient.grpc._utils import _get_inference_request


def text_input(texts: list[str]) -> triton.InferInput:
    """A TEXT BYTES input of these texts, built by tritonclient."""
    tensor = triton.InferInput("TEXT", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode("utf-8") for t in texts], dtype=np.object_))
    return tensor


def client_request(texts: list[str], **kwargs) -> triton.service_pb2.ModelInferRequest:
    """The exact ModelInferRequest tritonclient's `infer` would send for a TEXT input."""
    args = dict(model_name="translator", inputs=[text_input(texts)], model_version="", request_id="",
                outputs=None, sequence_id=0, sequence_start=False, sequence_end=False, priority=0,
                timeout=None, parameters=None)
    return _get_inference_request(**(args | kwargs))


@contextmanager
def triton_client(address: str) -> Iterator[triton.InferenceServerClient]:
    """tritonclient.grpc's client, unchanged; its stream (if any) stopped and the client closed on exit."""
    client = triton.InferenceServerClient(url=address)
    try:
        yield client
    finally:
        client.stop_stream()
        client.close()
