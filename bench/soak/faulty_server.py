"""`python -m service.server` with injected inference faults, for the soak (bench/soak/run.py).

    python -m bench.soak.faulty_server --fail-every 500 [server flags]

Every N-th decoder step of the process raises inside the backend's decoder run
(service/runtime/cache/backends.py), as a failing model call would: that batch's requests must get
INTERNAL (over HTTP: 500 with a JSON error, or an error event once a generate_stream has begun), and
the server must keep serving both protocols.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from typing import Any

from service.runtime.cache.backends import HostBackend, IoBindingBackend
from service.server import main as serve


def install(fail_every: int) -> None:
    """Make every `fail_every`-th decoder run of every backend of the process raise RuntimeError."""
    steps = itertools.count(1)
    for backend in (HostBackend, IoBindingBackend):
        original = backend.decode

        def decode(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            """The fault, then the backend's own run."""
            if next(steps) % fail_every == 0:
                raise RuntimeError("injected decoder failure (bench.soak.faulty_server)")
            return _original(self, *args, **kwargs)

        backend.decode = decode


def main(argv: Sequence[str] | None = None) -> int:
    """Install the fault, then run the server with the remaining flags."""
    ap = argparse.ArgumentParser(prog="python -m bench.soak.faulty_server", add_help=False)
    ap.add_argument("--fail-every", type=int, required=True)
    known, rest = ap.parse_known_args(argv)
    if known.fail_every < 1:
        ap.error("--fail-every must be >= 1")
    install(known.fail_every)
    return serve(rest)


if __name__ == "__main__":
    sys.exit(main())
