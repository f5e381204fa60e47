"""Metric samples: of this process's Prometheus registry, and scraped from a /metrics endpoint."""

from __future__ import annotations

import urllib.request

from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

Key = tuple[str, tuple[tuple[str, str], ...]]


def sample(name: str, **labels: str) -> float:
    """Current value of a sample of the default registry, summed over the label sets that include
    `labels` (every model's series when no model is named); 0 if absent."""
    return sum(s.value for family in REGISTRY.collect() for s in family.samples
               if s.name == name and labels.items() <= s.labels.items())


def counts() -> dict[str, float]:
    """Counts and sums of the scheduler's metrics, to compare before/after."""
    out = {}
    for h in ("queue_time_seconds", "time_to_first_token_seconds", "time_per_output_token_seconds",
              "encoder_compute_seconds", "decoder_step_seconds", "batch_size", "input_tokens",
              "output_tokens"):
        out[h] = sample(f"translator_{h}_count")
        out[h + ":sum"] = sample(f"translator_{h}_sum")
    for le in ("1.0", "2.0", "4.0"):
        out[f"rows<={le}"] = sample("translator_batch_size_bucket", le=le)
    return out


def delta(before: dict[str, float]) -> dict[str, float]:
    """Change of every metric of counts() since `before`."""
    after = counts()
    return {k: after[k] - before[k] for k in after}


def key(name: str, **labels: str) -> Key:
    """The key of a sample in scrape()'s answer."""
    return name, tuple(sorted(labels.items()))


def scrape(port: int, host: str = "127.0.0.1") -> dict[Key, float]:
    """Every sample of a server's /metrics endpoint, by key(name, **labels)."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {key(s.name, **s.labels): s.value for family in text_string_to_metric_families(text)
            for s in family.samples}
