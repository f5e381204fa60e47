"""Triton's own client of the service tests' server (tests/service/conftest.py `server`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.grpc as triton

from service.server import BackgroundServer
from tests.support.kserve import triton_client as open_client


@pytest.fixture
def triton_client(server: BackgroundServer) -> Iterator[triton.InferenceServerClient]:
    """tritonclient.grpc's client of `server`, unchanged; its stream is stopped after the test."""
    with open_client(server.address) as client:
        yield client
