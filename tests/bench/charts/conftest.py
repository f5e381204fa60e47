"""Small recorded chart records, in the format the benchmarks write and docs/charts/records holds."""

from __future__ import annotations

import pytest

SOURCE = {"command": "python -m bench --quick", "machine": "2 CPU cores (test)",
          "date": "2026-01-02 03:04 UTC"}


def _point(mode: str, workload: str, c: int, throughput: float, p50: float, p99: float) -> dict:
    """One closed-loop point; TTFT a fixed share of the latencies."""
    return {"mode": mode, "workload": workload, "concurrency": c, "requests": 100, "throughput": throughput,
            "tokens_per_s": 20 * throughput, "p50_ms": p50, "p90_ms": (p50 + p99) / 2, "p99_ms": p99,
            "ttft_p50_ms": p50 / 4, "ttft_p99_ms": p99 / 4}


@pytest.fixture
def server_record() -> dict:
    """Three modes on two workloads at concurrency 1, 8, 64, and a variant measured at 64 only; the
    largest p99 of all is none's at 64 on the mix (987 ms)."""
    points = []
    for workload, scale in (("sentences", 1.0), ("mix", 1.5)):
        for mode, speed in (("none", 1.0), ("dynamic", 1.8), ("continuous", 2.1)):
            for c in (1, 8, 64):
                p99 = 987.0 if (workload, mode, c) == ("mix", "none", 64) else 8.0 * c * scale / speed + 10
                points.append(_point(mode, workload, c, 100 * speed * min(c, 8) ** 0.3 / scale, p99 / 2, p99))
        points.append(_point("continuous-no-budget", workload, 64, 300.0, 100.0, 400.0))
    return {"kind": "server", "source": SOURCE, "points": points}


@pytest.fixture
def engines_record() -> dict:
    """Four engines; ours int8 at batch 32 is the fastest (100.1 sentences/s), ours fp32 after a batch the
    largest memory (496 MiB)."""
    def engine(name, b1, b32, s1, s32, disk, warm, batch):
        return {"name": name, "engine": {"1": b1, "32": b32}, "server": {"1": s1, "32": s32}, "disk_mb": disk,
                "memory_mib": {"load": warm - 10, "warm": warm, "batch": batch}}
    return {"kind": "engines", "source": SOURCE, "batch": 32, "title": "test shape", "engines": [
        engine("ours fp32", 5.7, 47.9, 6.6, 42.3, 415.6, 317, 496),
        engine("CTranslate2 float32", 5.4, 27.8, 5.2, 27.3, 296.5, 312, 343),
        engine("ours int8", 16.7, 100.1, 15.1, 78.2, 76.1, 158, 320),
        engine("CTranslate2 int8", 4.5, 55.6, 4.6, 59.8, 75.6, 106, 159)]}


@pytest.fixture
def rss_record() -> dict:
    """A 1,000-request warm-up, then RSS at each fifth of 5,000 requests; the highest 231.5 MiB."""
    return {"kind": "rss", "source": SOURCE, "title": "test soak", "label": "RSS at each fifth",
            "warmup_requests": 1000, "started_mib": 105.0, "warm_mib": 206.5,
            "samples": [[1000, 216.6], [2000, 231.5], [3000, 219.4], [4000, 225.0], [5000, 226.1]]}


@pytest.fixture
def protocols_record() -> dict:
    """Four protocols at concurrency 1, 8, 64; the largest p99 is HTTP generate's at 64 (876 ms), the
    highest throughput gRPC's at 64 (412.5 sentences/s)."""
    speeds = {"grpc": 1.0, "kserve-grpc": 0.95, "http-infer": 0.9, "http-generate": 0.85}
    points = []
    for protocol, speed in speeds.items():
        for c in (1, 8, 64):
            throughput = 412.5 if (protocol, c) == ("grpc", 64) else 100 * speed * c ** 0.3
            p99 = 876.0 if (protocol, c) == ("http-generate", 64) else 5.0 * c / speed + 4
            requests = 1200 if c == 64 else 600
            points.append({"protocol": protocol, "concurrency": c, "requests": requests, "errors": 0,
                           "throughput": throughput, "p50_ms": p99 / 2, "p90_ms": p99 * 0.8, "p99_ms": p99,
                           "client_cpu_ms": 0.5})
    names = {"grpc": "gRPC translator.v1 Translate", "kserve-grpc": "gRPC KServe v2 ModelInfer",
             "http-infer": "HTTP KServe v2 infer (JSON)", "http-generate": "HTTP generate (Triton)"}
    return {"kind": "protocols", "source": SOURCE, "title": "test server", "rounds": 3,
            "protocols": names, "points": points}
