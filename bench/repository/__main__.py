"""Command line of the repository benchmark (bench/repository/__init__.py says what it measures).

    python -m bench.repository [--quick] [--out DIR] [--bundle DIR] [--large DIR | --no-large]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.charts import record
from bench.common.progress import Progress
from bench.common.workload import DEFAULT_BUNDLE, PAUSE_S, held_out_sources
from bench.repository import cold, colocate, cycles, perf
from bench.repository.models import ct2_dir, large_bundle, make_repository
from bench.repository.plan import QUICK, Plan

RESULTS = "repository.json"
CHART = "repository-cycles-rss"
NO_LARGE = ("no opus-mt-shaped bundle (--no-large, or none under runs/bench-marian/*/bundle: "
            "python -m bench.marian makes one)")


def _log(message: str) -> None:
    """Progress lines on stderr (the results go to stdout)."""
    print(message, file=sys.stderr, flush=True)


def measure(plan: Plan, bundle: Path, texts: Sequence[str], large: Path | None,
            log: Callable[[str], None] = _log) -> dict[str, Any]:
    """Every part in turn (never two at once: they would share the cores); their figures by part."""
    results: dict[str, Any] = {"plan": dict(vars(plan)), "bundle": str(bundle),
                               "large_bundle": str(large) if large else None}
    skipped: list[str] = []
    results["skipped"] = skipped  # what was left out, and why
    phases = Progress(4, "bench.repository parts", lines=4)
    with tempfile.TemporaryDirectory(prefix="bench-repository-") as tmp:
        work = Path(tmp)
        log("## Two models in one process against two processes")
        results["colocate"] = {"default": colocate.run(bundle, work / "colocate", texts, plan, plan.requests,
                                                       plan.max_output_tokens, log)}
        if plan.large and large is not None:
            log(f"## The same with the opus-mt-shaped bundle {large}")
            results["colocate"]["opus-mt"] = colocate.run(large, work / "colocate-large", texts, plan,
                                                          plan.large_requests, plan.large_output_tokens, log)
        else:
            skipped.append("co-location of the opus-mt-shaped bundle: " + ("--quick" if large else NO_LARGE))
            log(f"  skipped: {skipped[-1]}")
        phases.update(1, "co-location done")
        time.sleep(PAUSE_S)
        log("## The cold on-demand load")
        models = {"default": (make_repository(work / "cold", bundle, ["default"])["default"],
                              plan.max_output_tokens, None)}
        if plan.large_cold and large is not None:
            folder = make_repository(work / "cold", large, ["opus-mt"])["opus-mt"]
            models["opus-mt"] = (folder, plan.large_output_tokens, ct2_dir(large))
        else:
            skipped.append("cold load of the opus-mt-shaped bundle and CTranslate2's: "
                           + ("not asked for" if large else NO_LARGE))
            log(f"  skipped: {skipped[-1]}")
        results["cold"] = cold.run(work / "cold", models, texts[0], log, plan.server_args())
        skipped += [f"CTranslate2's load of {name}: no conversion of its weights" for name, (_, _, ct2)
                    in models.items() if ct2 is None]
        phases.update(1, "cold load done")
        time.sleep(PAUSE_S)
        log(f"## {plan.cycles} load/unload cycles under load (after {plan.warmup_cycles} warm-up cycles)")
        results["cycles"] = cycles.run(bundle, work / "cycles", texts, plan, plan.max_output_tokens, log)
        if plan.large and large is not None:
            log(f"## The cycles of the opus-mt-shaped bundle (greedy, {plan.large_output_tokens} new tokens)")
            results["cycles_opus"] = cycles.run(large, work / "cycles-large", texts, plan,
                                                plan.large_output_tokens, log, beam_size=1)
        else:
            skipped.append("cycles of the opus-mt-shaped bundle: " + ("--quick" if large else NO_LARGE))
        phases.update(1, "cycles done")
        time.sleep(PAUSE_S)
        log("## perf_analyzer against one named model of several")
        results["perf_analyzer"] = perf.run(bundle, work / "perf", texts, plan.perf_concurrency,
                                            plan.perf_requests, log, plan.server_args())
        if results["perf_analyzer"]["skipped"]:
            skipped.append(f"perf_analyzer: {results['perf_analyzer']['skipped']}")
        phases.update(1, "perf_analyzer done")
    phases.close()
    results["requests_lost"] = (sum(c["requests_lost"] for c in results["colocate"].values())
                                + sum(results[k]["requests_lost"] for k in ("cycles", "cycles_opus")
                                      if k in results)
                                + sum(1 for m in models if results["cold"][m]["codes"] != ["OK", "OK"]))
    return results


def _get(data: dict[str, Any], *keys: str) -> Any:
    """data[k1][k2]... or None where a part was skipped."""
    for key in keys:
        if not isinstance(data, dict) or data.get(key) is None:
            return None
        data = data[key]
    return data


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """The last line's figures: ratios against their goals, counts, and None for what was skipped."""
    rows = _get(results, "perf_analyzer", "rows") or []
    figures = {
        "colocate_throughput_ratio": _get(results, "colocate", "default", "throughput_ratio"),  # goal >= 0.9
        "colocate_rss_vs_allowed": _get(results, "colocate", "default", "rss_vs_allowed"),  # goal <= 1
        "colocate_one_process_rss_mib": _get(results, "colocate", "default", "one_process_rss_mib"),
        "colocate_two_processes_rss_mib": _get(results, "colocate", "default", "two_processes_rss_mib"),
        "fixed_cost_mib": _get(results, "colocate", "default", "fixed_cost_mib"),
        "opus_colocate_throughput_ratio": _get(results, "colocate", "opus-mt", "throughput_ratio"),
        "opus_colocate_rss_vs_allowed": _get(results, "colocate", "opus-mt", "rss_vs_allowed"),
        "cold_first_request_s": _get(results, "cold", "default", "first_request_s"),
        "cold_second_request_ms": _get(results, "cold", "default", "second_request_ms"),
        "opus_cold_first_request_s": _get(results, "cold", "opus-mt", "first_request_s"),
        "opus_ct2_load_s": _get(results, "cold", "opus-mt", "ct2", "load_s"),
        "opus_cold_first_request_vs_ct2_load": _get(results, "cold", "opus-mt", "first_request_vs_ct2_load"),
        "cycles": _get(results, "cycles", "cycles"),
        "cycles_rss_growth_pct_of_model": _get(results, "cycles", "rss_growth_pct_of_model"),  # goal <= 5
        "opus_cycles_rss_growth_pct_of_model": _get(results, "cycles_opus", "rss_growth_pct_of_model"),
        "opus_cycles_model_mib": _get(results, "cycles_opus", "model_mib"),
        "cycles_requests_sent": _get(results, "cycles", "requests_sent"),
        "cycles_requests_answered": _get(results, "cycles", "requests_answered"),
        "cycles_refused_while_unloaded": _get(results, "cycles", "requests_refused_while_unloaded"),
        "perf_analyzer_named_texts_per_s": rows[-1]["throughput"] if rows else None,
        "perf_analyzer_only_named_answered": _get(results, "perf_analyzer", "only_the_named_model_answered"),
        "requests_lost": results["requests_lost"],  # goal 0
    }
    return {k: _rounded(v) for k, v in figures.items()}


def _rounded(value: Any) -> Any:
    """A float to 3 decimals (NaN to None), anything else as it is."""
    if not isinstance(value, float):
        return value
    return None if math.isnan(value) else round(value, 3)


def write(out: Path, results: dict[str, Any]) -> list[Path]:
    """`<out>/repository.json` (every figure, with the command, machine and date) and the cycles' RSS record
    and chart beside it."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS
    path.write_text(json.dumps({"source": record.source(), **results}, indent=1, default=str) + "\n",
                    encoding="utf-8")
    return [path, *record.write(out, CHART, "rss", results["cycles"]["chart"])]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(prog="python -m bench.repository", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests, one round, the default bundle only")
    ap.add_argument("--out", type=Path, help="results and chart (default: runs/bench-repository[-quick])")
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help="the bundle every model copies")
    ap.add_argument("--large", type=Path,
                    help="the opus-mt-shaped bundle (default: runs/bench-marian/*/bundle)")
    ap.add_argument("--no-large", action="store_true", help="leave the opus-mt-shaped bundle out")
    ap.add_argument("--cycles", type=int, help="load/unload cycles (default: the plan's)")
    ap.add_argument("--intra-op-threads", type=int, default=0,
                    help="every server's ONNX Runtime threads (default 0: the server's default, the cores)")
    a = ap.parse_args(argv)
    plan = replace(QUICK if a.quick else Plan(), intra_op_threads=a.intra_op_threads)
    plan = replace(plan, cycles=a.cycles) if a.cycles else plan
    out = a.out or Path("runs/bench-repository-quick" if a.quick else "runs/bench-repository")
    large = None if a.no_large else (a.large or large_bundle())
    start = time.perf_counter()
    results = measure(plan, a.bundle, held_out_sources()[: plan.texts], large)
    for path in write(out, results):
        _log(f"wrote {path}")
    _log(f"({time.perf_counter() - start:.0f} s)")
    print(json.dumps(headline(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
