"""Resident memory of a bundle's weights in one process, each configuration in a fresh process.

The runner on the CPU (default options), after decoding a warm-up batch greedily and with beam search
(so that every session has read its weights):
- `one_step`: encoder and decoder sessions (the server's default, `--steps-per-call 1`);
- `multistep`: plus the multi-step decoder (`--steps-per-call > 1`), a second session over the
  decoder's weights, each session keeping the kernels' prepacked copy (`--multistep-weights packed`,
  the default);
- `multistep_shared`: the same with `--multistep-weights shared`: neither decoder session prepacks and
  both read the bundle's one weights file mapping (service/runtime/sessions.py).

Memory is read from /proc/self/smaps_rollup: resident (Rss), proportional (Pss: a page mapped twice,
by two sessions, counts once; the ratios use it), of Rss anonymous (heap, arena, packed copies) and
file-backed (the mapped weights file: page cache, shared with any other process that maps it). Prints
one JSON line: `multistep_vs_one_step` is the packed copy the multi-step decoder adds, and
`shared_vs_one_step` near 1.0 means that with shared weights it adds none.

    python -m bench.memory.weights [--bundle DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.workload import DEFAULT_BUNDLE, REPO_ROOT
from interface import names

CONFIGS = ("one_step", "multistep", "multistep_shared")
_CHILD = """
import json, sys
from bench.memory.proc import smaps_rollup
def mem():
    out = smaps_rollup()
    return out | {"file": out["rss"] - out["anonymous"]}
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from service.runtime.stepping import StepPolicy
config = sys.argv[2]
before = mem()
weights = {"multistep": "packed", "multistep_shared": "shared"}.get(config)
policy = StepPolicy(16, weights=weights) if weights else StepPolicy(1)
runner = Runner(sys.argv[1], providers=["CPUExecutionProvider"], step_policy=policy)
ids = [[5 + (i + j) % 50 for j in range(12)] + [runner.special.eos] for i in range(8)]
runner.translate(ids, DecodeOptions(max_new_tokens=16))
runner.translate(ids[:2], DecodeOptions(max_new_tokens=8, beam_size=2))
after = mem()
print(json.dumps({k: round(after[k] - before[k], 1) for k in after}))
"""


def measure(bundle: Path, config: str) -> dict[str, float]:
    """MiB added by opening and warming the runner in a fresh process, for one configuration."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(bundle), config], capture_output=True, text=True,
                         cwd=REPO_ROOT, timeout=1200, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(bundle: Path) -> dict[str, Any]:
    """Every configuration's memory and the ratios."""
    data = bundle / names.weights_file(None)  # the base variant's, which the CPU runs
    weights = data.stat().st_size / 2**20 if data.is_file() else 0.0
    result: dict[str, Any] = {"bundle": str(bundle), "weights_file_mib": round(weights, 1)}
    for config in CONFIGS:
        result[config] = measure(bundle, config)
    rss = {config: result[config]["pss"] for config in CONFIGS}  # shared pages counted once
    result["multistep_vs_one_step"] = round(rss["multistep"] / rss["one_step"], 3)
    result["shared_vs_one_step"] = round(rss["multistep_shared"] / rss["one_step"], 3)
    return result


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
