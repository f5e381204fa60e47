"""Export a checkpoint to a verified ONNX bundle directory.

    python -m export --checkpoint runs/default/best.pt --out artifacts/default/bundle \\
        [--fp16] [--optimize] [--test-split data/corpus/test.tsv --eval-size 500] \\
        [--attention fused|plain|inplace] [--source-language en]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import export.lowering.fused  # noqa: F401  (registers the "fused" lowering)
import export.lowering.inplace  # noqa: F401  (registers the "inplace" lowering)
from export.build import BundleError, add_bundle_options, build_bundle, bundle_options
from export.export import ExportError
from export.verify.base import ParityError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(prog="python -m export", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, required=True, help="checkpoint file (.pt)")
    ap.add_argument("--test-split", type=Path, help="TSV to evaluate the model on for bundle.json metrics")
    ap.add_argument("--eval-size", type=int, default=500, help="pairs of --test-split to evaluate")
    ap.add_argument("--source-language", help="the language the model reads, e.g. en (bundle.json "
                    "source_language; absent: not stated)")
    add_bundle_options(ap)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 on bad input, 1 on failed verification)."""
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    opts = bundle_options(a, test_split=a.test_split, eval_size=a.eval_size,
                          source_language=a.source_language)
    try:
        result = build_bundle(a.checkpoint, a.out, opts, log=lambda msg: print(msg, file=sys.stderr))
    except (BundleError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (ParityError, ExportError) as e:
        print(f"error: {type(e).__name__}: {e} (no bundle written)", file=sys.stderr)
        return 1
    files = {k: v["bytes"] for k, v in result.manifest["files"].items()}
    checks = {k: v for k, v in result.manifest["verification"].items() if k not in ("cases", "row_past_lens")}
    summary = {"bundle": str(result.bundle_dir), "version": result.manifest["version"], "bytes": files,
               "verification": checks, "metrics": result.manifest["metrics"], "seconds": result.seconds}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
