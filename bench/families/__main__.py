"""Command line of the per-family benchmark (bench/families/compare.py says what it measures).

    python -m bench.families --family {marian,bart,mbart50,t5,pegasus} [--quick] [--out DIR] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from bench.charts import from_results, record
from bench.families import compare
from bench.families.registry import FAMILIES


def main(argv: list[str] | None = None, default_family: str | None = None) -> int:
    """CLI: print the table, the token checks, the goal checks, then the JSON ratios."""
    prog = "python -m bench.marian" if default_family else "python -m bench.families"
    ap = argparse.ArgumentParser(prog=prog, description=compare.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=sorted(FAMILIES), default=default_family, required=not default_family,
                    help="the imported family (bench/families/registry.py)")
    ap.add_argument("--quick", action="store_true", help="d_model 64, 2 + 2 layers, 1,000 tokens")
    ap.add_argument("--out", type=Path, help="where the model, bundle and CTranslate2 directories go (under "
                    "full/ or quick/; default runs/bench-<family>)")
    ap.add_argument("--repeats", type=int, help="interleaved repeats per point")
    a = ap.parse_args(argv)
    if a.repeats is not None and a.repeats < 1:
        ap.error(f"--repeats must be >= 1, not {a.repeats}")
    plan = compare.plan_for(a.family, a.quick)
    if a.repeats:
        plan = replace(plan, repeats=a.repeats)
    out = (a.out or Path(f"runs/bench-{a.family}")) / ("quick" if a.quick else "full")
    result = compare.run(plan, out, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(compare.table(result, plan.batch))
    print(compare.checks(result, plan))
    ratios = result.ratios(plan.batch)
    goals = compare.goals(ratios, a.family, plan.batch)
    print(compare.goal_lines(goals))
    print("phases (s): " + ", ".join(f"{k} {v:.0f}" for k, v in result.phases.items()), file=sys.stderr)
    checkpoint = FAMILIES[a.family].checkpoint
    title = f"{checkpoint}'s shape, imported: ours against CTranslate2"
    if a.family == "marian":
        title = "An imported Marian model: ours against CTranslate2"
    record.write(out, f"{a.family}-engines", "engines",
                 from_results.family_engines(result.points, result.footprint, plan.batch, title))
    ratios["goals_met"] = {k: met for k, (*_, met) in goals.items()}
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in ratios.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
