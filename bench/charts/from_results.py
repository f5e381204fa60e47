"""The chart records' data, taken from each benchmark's results (the same format as docs/charts/records)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SUMMARY = ("requests", "throughput", "tokens_per_s", "p50_ms", "p90_ms", "p99_ms", "ttft_p50_ms",
           "ttft_p99_ms")
# bench/families/compare.py's engine names -> (the chart's name, its text-in, text-out counterpart)
FAMILY_ENGINES = {"onnxruntime": ("ours fp32", "server"),
                  "ctranslate2": ("CTranslate2 float32", "ctranslate2 text"),
                  "onnxruntime int8": ("ours int8", "server int8"),
                  "ctranslate2 int8": ("CTranslate2 int8", "ctranslate2 int8 text")}


def server(results: Mapping[str, Any]) -> dict[str, Any]:
    """bench/server/modes.py: every closed-loop point by mode, workload and concurrency."""
    points = [{"mode": mode, "workload": workload, "concurrency": c,
               **{k: getattr(p.summary, k) for k in SUMMARY}}
              for mode, r in results.items() for (workload, c), p in r.closed.items()]
    return {"points": sorted(points, key=lambda p: (p["workload"], p["mode"], p["concurrency"]))}


def scaling_rss(rss: Mapping[str, Any], every: int) -> dict[str, Any]:
    """bench/server/scaling.py's memory run: RSS after start-up, then after each chunk of `every` requests
    (the first chunk is the warm-up)."""
    return {"title": "Server memory under load (continuous batching)",
            "label": f"RSS every {every:,} requests",
            "warmup_requests": every, "started_mib": round(rss["started_mib"], 1),
            "peak_mib": round(rss["peak_mib"], 1),
            "samples": [[k * every, round(v, 1)] for k, v in enumerate(rss["samples"])]}


def soak_rss(curve_mib: Sequence[float], requests: int, warmup: int, warm_mib: float,
             end_mib: float) -> dict[str, Any]:
    """bench/soak/run.py: RSS after the warm-up, then at each twentieth of the soak (the last at its end)."""
    n = len(curve_mib)
    return {"title": "Soak with faults: server RSS", "label": f"RSS at each 1/{n} of the soak",
            "warmup_requests": warmup, "warm_mib": round(warm_mib, 1), "end_mib": round(end_mib, 1),
            "samples": [[requests * (i + 1) // n, v] for i, v in enumerate(curve_mib)]}


def family_engines(points: Sequence[Any], footprint: Mapping[str, Any], batch: int,
                   title: str = "An imported Marian model: ours against CTranslate2") -> dict[str, Any]:
    """bench/families/compare.py: sentences/s of each engine and its text counterpart at 1 and `batch`, its
    bytes on disk and the memory it adds (Rss after loading, a warm-up, a batch)."""
    by = {(p.engine, p.batch): p.sentences_per_s for p in points}
    engines = []
    for engine, (name, text) in FAMILY_ENGINES.items():
        entry: dict[str, Any] = {"name": name,
                                 "engine": {str(b): by[engine, b] for b in (1, batch) if (engine, b) in by},
                                 "server": {str(b): by[text, b] for b in (1, batch) if (text, b) in by}}
        if footprint:
            entry["disk_mb"] = round(footprint["disk_bytes"][engine] / 1e6, 1)
            entry["memory_mib"] = {k: v["rss_mib"] for k, v in footprint["memory_mib"][engine].items()}
        engines.append(entry)
    return {"title": title, "batch": batch, "engines": engines}
