"""All benchmarks in one run: engines, server batching modes, scaling and memory.

    python -m bench            # full (`make bench`, <= 30 min)
    python -m bench --quick    # fewer points (`make bench-quick`, <= 5 min)

Runs bench/engines (greedy engines, then the server against CTranslate2: vs_ct2), bench/server
(batching modes), bench/protocols (one server, each protocol) and bench/server/scaling.py in turn.
Prints each benchmark's tables and writes its chart records and charts (bench/charts) to --out
(runs/bench, or runs/bench-quick with --quick): server.json, server-latency-throughput.svg,
server-ttft.svg, protocols.json, protocols-latency-throughput.svg, scaling-rss.json, scaling-rss.svg.
Progress by phase goes to stderr (a bar on a terminal, plain lines otherwise). The last line is one
JSON object of throughput ratios (higher is better): ort_vs_torch_b1, ort_vs_torch_b32, ort_vs_ct2_b1,
ort_vs_ct2_b32, service_vs_ct2_c1, service_vs_ct2_c64, server_c64_vs_inprocess (bench/engines/vs_ct2.py),
continuous_vs_none_c64, continuous_vs_dynamic_mixed, server_c1_vs_inprocess.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HEADLINE = (
    "ort_vs_torch_b1", "ort_vs_torch_b32", "ort_vs_ct2_b1", "ort_vs_ct2_b32",
    "service_vs_ct2_c1", "service_vs_ct2_c64", "server_c64_vs_inprocess",
    "continuous_vs_none_c64", "continuous_vs_dynamic_mixed", "server_c1_vs_inprocess",
)
DEFAULT = Path("artifacts/default")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks in turn (never two at once: they would share the cores)."""
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer points and requests")
    ap.add_argument("--checkpoint", type=Path, default=DEFAULT / "model.pt")
    ap.add_argument("--bundle", type=Path, default=DEFAULT / "bundle")
    ap.add_argument("--threads", type=int, default=2, help="threads of every engine and of the server's ORT")
    ap.add_argument("--out", type=Path, help="for the chart records and charts (default: runs/bench[-quick])")
    a = ap.parse_args(argv)
    out = a.out or Path("runs/bench-quick" if a.quick else "runs/bench")

    from bench.common.progress import Progress
    from bench.engines import greedy, vs_ct2
    from bench.protocols.curve import run as protocols_run
    from bench.server import modes, scaling

    figures: dict[str, float] = {}
    start = time.perf_counter()
    phases = Progress(5, "bench phases", lines=5)
    print("## Engines (greedy, static batches, sentences/s and tokens/s)", flush=True)
    points, ratios = greedy.run(a.quick, a.checkpoint, a.bundle, threads=a.threads)
    print(greedy.table(points), flush=True)
    figures |= ratios
    phases.update(1, "engines done")
    print("\n## The server against CTranslate2 in process", flush=True)
    figures |= vs_ct2.run(a.quick, a.checkpoint, a.bundle, threads=a.threads)
    phases.update(1, "server against CTranslate2 done")
    print("\n## Server", flush=True)
    figures |= modes.run(a.quick, a.bundle, intra_op_threads=a.threads, out=out)
    phases.update(1, f"server done (charts in {out})")
    print("\n## Server per protocol (gRPC, KServe v2 gRPC, HTTP infer, generate)", flush=True)
    per_protocol = protocols_run(a.quick, a.bundle, intra_op_threads=a.threads, out=out)
    figures |= {f"protocols_{k}": v for k, v in per_protocol.items()}
    phases.update(1, "server per protocol done")
    print("\n## Scaling and memory", flush=True)
    scaled = scaling.run(a.quick, a.bundle, intra_op_threads=a.threads, out=out)
    figures |= {f"scaling_{k}": v for k, v in scaled.items()}
    phases.update(1, "scaling and memory done")
    phases.close()
    print(f"\nall figures: {json.dumps({k: round(v, 3) for k, v in figures.items()})}", file=sys.stderr)
    print(f"({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    print(json.dumps({k: round(figures.get(k, float("nan")), 3) for k in HEADLINE}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
