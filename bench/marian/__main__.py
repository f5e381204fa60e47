"""Command line of the Marian benchmark (bench/marian/compare.py says what it measures).

    python -m bench.marian [--quick] [--out DIR] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from bench.charts import from_results, record
from bench.marian import compare


def main(argv: list[str] | None = None) -> int:
    """CLI: print the table, the checks, then the JSON ratios."""
    ap = argparse.ArgumentParser(prog="python -m bench.marian", description=compare.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="d_model 64, 2 + 2 layers, 1,000 tokens")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-marian"),
                    help="where the model, bundle and CTranslate2 directories go (under full/ or quick/)")
    ap.add_argument("--repeats", type=int, help="interleaved repeats per point")
    a = ap.parse_args(argv)
    plan = compare.QUICK_PLAN if a.quick else compare.Plan()
    if a.repeats:
        plan = replace(plan, repeats=a.repeats)
    out = a.out / ("quick" if a.quick else "full")
    result = compare.run(plan, out, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(compare.table(result, plan.batch))
    print(compare.checks(result, plan))
    print("phases (s): " + ", ".join(f"{k} {v:.0f}" for k, v in result.phases.items()), file=sys.stderr)
    ratios = result.ratios(plan.batch)
    record.write(out, "marian-engines", "engines",
                 from_results.marian_engines(result.points, result.footprint, plan.batch))
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in ratios.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
