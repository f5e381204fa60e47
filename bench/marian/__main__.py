"""`python -m bench.marian`: the per-family benchmark of the Marian entry (opus-mt-en-de's shape), its output
under runs/bench-marian; `python -m bench.families --family marian` is the same run.

    python -m bench.marian [--quick] [--out DIR] [--repeats N]
"""

from __future__ import annotations

import sys

from bench.families.__main__ import main

if __name__ == "__main__":
    sys.exit(main(default_family="marian"))
