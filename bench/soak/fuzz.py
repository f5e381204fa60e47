"""Fuzz the KServe v2 BYTES decoder and request decoding with hypothesis (docs/reliability.md).

    python -m bench.soak.fuzz --seconds 600              # `make fuzz`
    python -m bench.soak.fuzz --examples 2000 --seed 7

Runs the fuzz driver of tests/support/fuzz.py (shared with the tests) until `--examples` or `--seconds`
is spent or a failure is found; each example is checked by the oracles of tests/support/hostile.py. Round
i runs with seed `--seed` + i (the run's seed is printed, a finding names its round's seed), so the same
arguments replay a run. A failure is shrunk to a minimal example and printed. The last line is a JSON
object: examples, failures, seconds, seed, per-target counts. Exit code 1 on a failure.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence

import hypothesis

from tests.support.fuzz import TARGETS, fuzz, print_report


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; exit code 1 when a failure was found."""
    parser = argparse.ArgumentParser(prog="python -m bench.soak.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=0, help="stop after this many examples (0: no limit)")
    parser.add_argument("--seconds", type=float, default=60.0, help="stop after this long (0: no limit)")
    parser.add_argument("--seed", type=int, default=None, help="first round's seed (default: random)")
    args = parser.parse_args(argv)
    if not args.examples and not args.seconds:
        parser.error("give --examples or --seconds")
    base_seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(f"fuzzing {', '.join(TARGETS)} with hypothesis {hypothesis.__version__}, seed {base_seed}",
          flush=True)
    report = fuzz(args.examples, args.seconds, base_seed)
    print_report(report)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
