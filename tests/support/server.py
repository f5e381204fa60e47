"""In-process servers of the tiny bundle: their configuration, texts and health states."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from grpc_health.v1 import health_pb2
from prometheus_client.parser import text_string_to_metric_families

from service.config import ServerConfig

TEXTS = ["the 4217 cat.", "Anna saw 3 red apples on day 12.", "we 7 big.",
         "the cat saw 1000000 big red apples on the day we 31st."]
MAX_BATCH = 8
MESSAGE_LIMIT = 64 * 1024
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def server_config(bundle: Path, **overrides) -> ServerConfig:
    """A config for tests: loopback, free port, CPU, no metrics endpoint unless asked."""
    values = {"bundle": bundle, "port": 0, "metrics_port": -1, "providers": ("CPUExecutionProvider",),
              "max_batch_size": MAX_BATCH, "max_message_bytes": MESSAGE_LIMIT} | overrides
    return ServerConfig(**values)


def scrape(port: int, host: str = "127.0.0.1") -> dict[str, float]:
    """Every unlabelled sample of a server's /metrics endpoint, by sample name."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if not s.labels}
