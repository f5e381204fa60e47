"""Latency against throughput per protocol on one server (issue 36): closed loop at concurrency 1 to 64.

    python -m bench.protocols [--quick] [--bundle DIR] [--concurrency 1 8 ...] [--out DIR]

One server of the bundle (default configuration: continuous batching) answers gRPC translator.v1
Translate, KServe v2 ModelInfer over gRPC, KServe v2 infer over HTTP (JSON) and Triton's generate over
HTTP, one held-out sentence per request, the protocols interleaved per concurrency
(bench/protocols/curve.py). Prints a markdown table; with --out also writes `<out>/protocols.json`
(the chart record) and its chart `protocols-latency-throughput.svg` beside it (`make bench-http`:
runs/bench-http). The last line is a JSON object: each protocol's throughput at the highest
concurrency, and HTTP infer's / gRPC's there.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from bench.common.workload import DEFAULT_BUNDLE, HELD_OUT
from bench.protocols.clients import PROTOCOLS
from bench.protocols.curve import QUICK, Plan, run


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(prog="python -m bench.protocols", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="concurrency 1, 8 and 64, fewer requests")
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help="model bundle directory")
    ap.add_argument("--sources", type=Path, default=HELD_OUT, help="TSV whose first column is sent")
    ap.add_argument("--protocols", nargs="+", choices=list(PROTOCOLS), help="default: all four")
    ap.add_argument("--concurrency", type=int, nargs="+", help="default: 1 8 32 64 (--quick: 1 8 64)")
    ap.add_argument("--min-requests", type=int, help="requests per point and round (default 200, --quick 60)")
    ap.add_argument("--rounds", type=int, help="sweeps, pooled per point (default 3, --quick 2)")
    ap.add_argument("--intra-op-threads", type=int, default=0, help="the server's ONNX Runtime threads")
    ap.add_argument("--out", type=Path, help="write protocols.json and its chart here")
    a = ap.parse_args(argv)
    plan = QUICK if a.quick else Plan()
    changes = {"protocols": tuple(a.protocols) if a.protocols else None,
               "concurrencies": tuple(sorted(a.concurrency)) if a.concurrency else None,
               "min_requests": a.min_requests, "rounds": a.rounds}
    plan = replace(plan, **{k: v for k, v in changes.items() if v is not None})
    print(json.dumps({k: round(v, 3) for k, v in
                      run(a.quick, a.bundle, a.intra_op_threads, a.out, plan, a.sources).items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
