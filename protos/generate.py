"""Generate the Python modules of every .proto under protos/: `python -m protos.generate [--force]`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from protos.codegen import generate


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; importing `protos` already generated stale modules."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="regenerate even when up to date")
    args = parser.parse_args(argv)
    generate(force=args.force)
    print("protos: up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
