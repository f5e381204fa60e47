"""Redraw charts from recorded JSON, measuring nothing (`make charts`: the docs' charts).

    python -m bench.charts                          # docs/charts/records/*.json -> docs/charts/*.svg
    python -m bench.charts runs/bench/server.json   # beside the given records

A benchmark's run writes its records (`<name>.json`, with the command, machine and date) and their
charts beside them; copying a record into docs/charts/records and running this redraws the docs' chart.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.charts.draw import draw

DOCS = Path("docs/charts")


def main(argv: list[str] | None = None) -> int:
    """Draw every record given (default: the docs' records into docs/charts)."""
    ap = argparse.ArgumentParser(prog="python -m bench.charts", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", type=Path, nargs="*", help="record files (default: the docs' records)")
    a = ap.parse_args(argv)
    pairs = ([(p, p.with_suffix("")) for p in a.records] if a.records
             else [(p, DOCS / p.stem) for p in sorted((DOCS / "records").glob("*.json"))])
    if not pairs:
        print("no records to draw", file=sys.stderr)
        return 1
    for path, stem in pairs:
        for svg in draw(json.loads(path.read_text(encoding="utf-8")), stem):
            print(f"{path} -> {svg} ({svg.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
