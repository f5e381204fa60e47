"""Resident memory of a bundle's weights in one process: the runner measured in a fresh process.

The runner on the CPU (default options: encoder and decoder sessions), after decoding a warm-up batch
greedily and with beam search (so that every session has read its weights). Memory is read from
/proc/self/smaps_rollup: resident (Rss), proportional (Pss: a page mapped twice counts once), of Rss
anonymous (heap, arena, the kernels' prepacked copies) and file-backed (the mapped weights file: page
cache, shared with any other process that maps it). Prints one JSON line: the bundle, its weights
file's size and what the runner added.

    python -m bench.memory.weights [--bundle DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common.workload import DEFAULT_BUNDLE, REPO_ROOT
from interface import names

_CHILD = """
import json, sys
from bench.memory.proc import smaps_rollup
def mem():
    out = smaps_rollup()
    return out | {"file": out["rss"] - out["anonymous"]}
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
before = mem()
runner = Runner(sys.argv[1], providers=["CPUExecutionProvider"])
ids = [[5 + (i + j) % 50 for j in range(12)] + [runner.special.eos] for i in range(8)]
runner.translate(ids, DecodeOptions(max_output_tokens=16))
runner.translate(ids[:2], DecodeOptions(max_output_tokens=8, beam_size=2))
after = mem()
print(json.dumps({k: round(after[k] - before[k], 1) for k in after}))
"""


def measure(bundle: Path) -> dict[str, float]:
    """MiB added by opening and warming the runner in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(bundle)], capture_output=True, text=True,
                         cwd=REPO_ROOT, timeout=1200, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(bundle: Path) -> dict[str, Any]:
    """The weights file's size and the runner's memory."""
    data = bundle / names.weights_file(None)  # the base variant's, which the CPU runs
    weights = data.stat().st_size / 2**20 if data.is_file() else 0.0
    return {"bundle": str(bundle), "weights_file_mib": round(weights, 1), "runner": measure(bundle)}


def main(argv: list[str] | None = None) -> int:
    """CLI: print the JSON line."""
    ap = argparse.ArgumentParser(prog="python -m bench.memory.weights", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    args = ap.parse_args(argv)
    print(json.dumps(run(args.bundle)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
