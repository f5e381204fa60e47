"""Command line of the engine benchmark (bench/engines/greedy.py says what it measures).

    python -m bench.engines [--quick] [--checkpoint ...] [--bundle ...] [--split ...] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.engines import greedy


def main(argv: list[str] | None = None) -> int:
    """CLI: print the table and the ratios."""
    ap = argparse.ArgumentParser(prog="python -m bench.engines", description=greedy.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--checkpoint", type=Path, default=Path("artifacts/default/model.pt"))
    ap.add_argument("--bundle", type=Path, default=Path("artifacts/default/bundle"))
    ap.add_argument("--split", type=Path, default=Path("artifacts/default/test_sample.tsv"))
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    points, ratios = greedy.run(a.quick, a.checkpoint, a.bundle, a.split, a.threads)
    print(greedy.table(points))
    print(json.dumps({k: round(v, 3) for k, v in ratios.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
