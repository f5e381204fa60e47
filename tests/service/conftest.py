"""Servers of the tiny bundle shared by the service tests (in process, on 127.0.0.1, free ports)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.server import server_config


@pytest.fixture(scope="module")
def server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A continuous-batching server of the tiny bundle with the test configuration, per module."""
    with BackgroundServer(server_config(tiny_bundle), runner) as srv:
        yield srv


@pytest.fixture(scope="module")
def channel(server: BackgroundServer) -> Iterator[grpc.Channel]:
    """A channel to `server`."""
    with grpc.insecure_channel(server.address) as ch:
        yield ch
