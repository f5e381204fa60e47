"""Fuzz the KServe v2 BYTES decoder and request decoding with hypothesis, and with `--management` the
management surfaces of a real server (docs/reliability.md).

    python -m bench.soak.fuzz --seconds 600              # `make fuzz`
    python -m bench.soak.fuzz --examples 2000 --seed 7
    python -m bench.soak.fuzz --management --seconds 600  # the decoders and a server's management calls

Runs the fuzz driver of tests/support/fuzz.py (shared with the tests) until `--examples` or `--seconds`
is spent or a failure is found; each example is checked by the oracles of tests/support/hostile.py. With
`--management` it also starts `python -m service.server` on 127.0.0.1 (bench/common/serverproc.py) with a
two-model repository of `--bundle` (model `translator` loaded, `spare` not), control mode explicit,
ModelMesh served, and the model-repository (both protocols) and modelmesh groups restricted by one key;
its repository API over gRPC and HTTP and its ModelMesh calls get hostile names, parameters, configs, ids,
paths and headers (tests/support/hostile_management.py), every answer judged by
tests/support/hostile_exchange.py, and after every round the repository is put back and the server must
still be ready and translate. Round i runs with seed `--seed` + i (the run's seed is printed, a finding
names its round's seed), so the same arguments replay a run. A failure is shrunk to a minimal example and
printed. The last line is a JSON object: examples, failures, seconds, seed, per-target counts. Exit code 1
on a failure.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import secrets
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import hypothesis

from bench.common.serverproc import ServerProcess, free_port
from bench.common.workload import DEFAULT_BUNDLE
from tests.support.fuzz import TARGETS, Report, fuzz, management_targets, print_report
from tests.support.hostile_exchange import Exchange
from tests.support.hostile_management import Admin

MODEL, SPARE, KEY = "translator", "spare", "admin-key"
MAX_MESSAGE_BYTES = 128 * 1024  # small enough that hostile configs and headers reach the limits


@contextlib.contextmanager
def management_server(bundle: Path) -> Iterator[Admin]:
    """A server of a two-model repository of `bundle` with its management surfaces open behind one key."""
    value = secrets.token_hex(8)
    with tempfile.TemporaryDirectory(prefix="fuzz-repository-") as folder:
        root = Path(folder)
        for name in (MODEL, SPARE):
            (root / name).mkdir()
            (root / name / "1").symlink_to(bundle.resolve(), target_is_directory=True)
        http_port = free_port()
        args = ["--model-repository", str(root), "--model-control-mode", "explicit", "--load-model", MODEL,
                "--modelmesh", "--http-port", str(http_port), "--max-message-bytes", str(MAX_MESSAGE_BYTES),
                "--grpc-restricted-protocol", f"model-repository,modelmesh:{KEY}={value}",
                "--http-restricted-api", f"model-repository:{KEY}={value}"]
        with ServerProcess(bundle, "continuous", args) as server:
            yield Admin(server.address, f"127.0.0.1:{http_port}", KEY, value, MODEL, SPARE, root,
                        max_message_bytes=MAX_MESSAGE_BYTES)


def run(examples: int, seconds: float, base_seed: int, management: bool, bundle: Path) -> Report:
    """The decoders alone, or with a management server's targets."""
    if not management:
        return fuzz(examples, seconds, base_seed)
    with management_server(bundle) as admin:
        exchange = Exchange(admin)
        try:
            targets = TARGETS | management_targets(admin, exchange)
            return fuzz(examples, seconds, base_seed, targets=targets, after_round=exchange.settle)
        finally:
            exchange.close()


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; exit code 1 when a failure was found."""
    parser = argparse.ArgumentParser(prog="python -m bench.soak.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=0, help="stop after this many examples (0: no limit)")
    parser.add_argument("--seconds", type=float, default=60.0, help="stop after this long (0: no limit)")
    parser.add_argument("--seed", type=int, default=None, help="first round's seed (default: random)")
    parser.add_argument("--management", action="store_true",
                        help="also fuzz a server's repository API, ModelMesh calls and restricted headers")
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help="the management server's bundle")
    args = parser.parse_args(argv)
    if not args.examples and not args.seconds:
        parser.error("give --examples or --seconds")
    base_seed = args.seed if args.seed is not None else random.randrange(2**32)
    names = [*TARGETS, *(["repository_grpc", "repository_http", "modelmesh"] if args.management else [])]
    print(f"fuzzing {', '.join(names)} with hypothesis {hypothesis.__version__}, seed {base_seed}",
          flush=True)
    report = run(args.examples, args.seconds, base_seed, args.management, args.bundle)
    print_report(report)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
