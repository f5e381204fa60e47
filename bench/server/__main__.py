"""Command line of the server benchmark (bench/server/modes.py says what it measures).

    python -m bench.server [--quick] [--bundle DIR] [--intra-op-threads N] [--json FILE] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.common.workload import DEFAULT_BUNDLE, HELD_OUT
from bench.server import modes


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.server", description=modes.__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer points and requests (~3 minutes)")
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help="model bundle directory")
    parser.add_argument("--sources", type=Path, default=HELD_OUT, help="TSV whose first column is sent")
    parser.add_argument("--intra-op-threads", type=int, default=0, help="server and in-process ORT threads")
    parser.add_argument("--json", type=Path, help="also write the ratios to this JSON file")
    parser.add_argument("--out", type=Path, help="write server.json (every point) and its charts here")
    args = parser.parse_args(argv)
    scores = modes.run(args.quick, args.bundle, args.intra_op_threads, args.sources, args.out)
    if args.json:
        args.json.write_text(json.dumps(scores, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
