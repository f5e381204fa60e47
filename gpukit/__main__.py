"""`python -m gpukit build ...` (make gpu-kit) and `python -m gpukit check ...` (make gpu-check KIT=DIR)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpukit.build import DEFAULT_PART_MIB, DEFAULT_PLATFORM, DEFAULT_PYTHON, OPUS_MT, build
from gpukit.check import run_check
from gpukit.parts import KitError


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(prog="python -m gpukit", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    builder = sub.add_parser("build", help="gather the kit (needs registry access and the project's .venv)")
    builder.add_argument("--out", type=Path, default=Path(".gpu-kit"), help="folder of parts and manifest")
    builder.add_argument("--python", default=DEFAULT_PYTHON, help="target CPython (%(default)s)")
    builder.add_argument("--platform", default=DEFAULT_PLATFORM, help="target wheel platform (%(default)s)")
    builder.add_argument("--part-mib", type=float, default=DEFAULT_PART_MIB, help="part size, MiB")
    builder.add_argument("--with-cuda-libraries", action="store_true",
                         help="add NVIDIA's CUDA 13 / cuDNN 9 / cuBLAS wheels (several GB) for a host with a "
                              "driver only")
    builder.add_argument("--opus-mt", choices=OPUS_MT, default="full",
                         help="the opus-mt skeleton's shape (%(default)s; quick: small, for tests)")
    builder.add_argument("--fixtures", type=Path, help="the GPU tier's fixtures, written before by "
                         "python -m tests.support.tiny DIR (default: the tiny model trained and exported)")
    check = sub.add_parser("check", help="verify, install and run the GPU check with no network")
    check.add_argument("--kit", type=Path, required=True, help="folder holding manifest.json and the parts")
    check.add_argument("--out", type=Path, default=Path("runs/gpu-check"), help="folder of the log and JSON")
    check.add_argument("bench_args", nargs=argparse.REMAINDER, help="after --: arguments of bench.gpu")
    args = ap.parse_args(argv)
    if args.command == "build":
        if args.part_mib <= 0:
            ap.error("--part-mib must be positive")
        try:
            build(args.out, args.python, args.platform, args.part_mib, args.with_cuda_libraries,
                  opus_mt=args.opus_mt, prebuilt_fixtures=args.fixtures)
        except ValueError as exc:
            ap.error(str(exc))
        return 0
    try:
        return run_check(args.kit, args.out, [a for a in args.bench_args if a != "--"])
    except KitError as exc:  # raised before the log exists
        print(f"gpu-check: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
