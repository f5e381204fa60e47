"""The fuzz driver: the KServe v2 BYTES decoder and request decoding under hypothesis, round after round, and
the management surfaces of a live server.

`fuzz(examples, seconds, seed)` runs rounds of generated examples, alternating targets, until the example
or time budget is spent or a failure is found: `deserialize_bytes` on raw BYTES tensors (well-formed,
mutated, arbitrary) with any element count, and `decode_request` on arbitrary ModelInferRequest messages;
each example is checked by the oracles of tests/support/hostile.py. With `management_targets(admin)` (a
server: tests/support/hostile_management.py) the targets are its repository API over gRPC and HTTP and its
ModelMesh calls, each call carrying the restricted groups' header right or wrong, judged by
tests/support/hostile_exchange.py; `after_round` (the exchange's `settle`) puts the repository back and
checks the server still serves after every round. Round i runs with seed `seed` + i (a finding names its
round's seed), so the same arguments replay a run (a server's state aside); a failure is shrunk to a
minimal example. The command is bench/soak/fuzz.py (`make fuzz`, docs/reliability.md).
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple, TextIO

import hypothesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.support import hostile, hostile_management
from tests.support.hostile_exchange import Exchange
from tests.support.hostile_management import Admin

ROUND = 2000  # examples per hypothesis run; a round's seed reproduces it
NOTES_CHARS = 4000  # of hypothesis' notes on a finding (the failing example's repr): a huge one is cut
SERVER_ROUND = 50  # examples per round of a server's target (each a call; the server is checked after it)


@dataclass
class TargetStats:
    """What one target saw."""

    examples: int = 0
    accepted: int = 0  # examples the decoder accepted (the rest were refused with a clean message)
    failures: int = 0


@dataclass
class Report:
    """The whole run."""

    examples: int = 0
    failures: int = 0
    seconds: float = 0.0
    seed: int = 0
    engine: str = f"hypothesis {hypothesis.__version__}"
    targets: dict[str, TargetStats] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)


def _deserialize(tensor: tuple[bytes, int]) -> bool:
    """Oracle of deserialize_bytes; True when the tensor was accepted."""
    return hostile.check_deserialize(*tensor) is not None


def _decode(request: Any) -> bool:
    """Oracle of decode_request; True when the request was accepted."""
    return hostile.check_decode(request) is not None


class Target(NamedTuple):
    """What a target draws, its oracle (True: the example was accepted), and its examples per round."""

    strategy: st.SearchStrategy
    oracle: Callable[[Any], bool]
    round: int = ROUND


TARGETS: dict[str, Target] = {
    "deserialize_bytes": Target(hostile.byte_tensors(), _deserialize),
    "decode_request": Target(hostile.infer_requests(), _decode),
}


def management_targets(admin: Admin, exchange: Exchange) -> dict[str, Target]:
    """The management surfaces of the server `admin` describes, sent and judged by `exchange`: the
    repository API over gRPC (and HTTP when served), ModelMesh's calls when served."""
    targets = {"repository_grpc": Target(hostile_management.grpc_repository_calls(admin), exchange.judge,
                                         SERVER_ROUND)}
    if admin.http is not None:
        targets["repository_http"] = Target(hostile_management.http_repository_calls(admin), exchange.judge,
                                            SERVER_ROUND)
    if admin.modelmesh:
        targets["modelmesh"] = Target(hostile_management.modelmesh_calls(admin), exchange.judge, SERVER_ROUND)
    return targets


def run_round(target: Target, name: str, examples: int, round_seed: int, stats: TargetStats) -> str | None:
    """One hypothesis run of `examples` examples of a target; the shrunk failure, None if none."""
    strategy, oracle, _ = target

    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate, Phase.shrink],
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
    @seed(round_seed)
    @given(strategy)
    def example(value: Any) -> None:
        """One example."""
        stats.examples += 1
        stats.accepted += oracle(value)

    try:
        example()
    except Exception as exc:  # noqa: BLE001 - every finding is reported, whatever it raised
        stats.failures += 1
        notes = "\n".join(getattr(exc, "__notes__", []))[:NOTES_CHARS]
        where = "".join(traceback.format_tb(exc.__traceback__)[-2:])
        return f"{name} (seed {round_seed}): {type(exc).__name__}: {exc}\n{notes}\n{where}"
    return None


def fuzz(examples: int, seconds: float, base_seed: int, out: TextIO | None = None,
         targets: dict[str, Target] | None = None,
         after_round: Callable[[], str | None] | None = None) -> Report:
    """Alternate targets (TARGETS by default) round by round until the example or time budget is spent, or
    a failure; `after_round` (a finding, or None) runs after each round."""
    out = out or sys.stdout
    targets = targets or TARGETS
    report = Report(seed=base_seed, targets={name: TargetStats() for name in targets})
    start = time.perf_counter()
    rounds = 0
    while True:
        spent = sum(t.examples for t in report.targets.values())
        if (examples and spent >= examples) or (seconds and time.perf_counter() - start >= seconds):
            break
        name = list(targets)[rounds % len(targets)]
        target = targets[name]
        size = target.round
        if examples:
            size = min(size, examples - spent, max(1, examples // len(targets)))
        finding = run_round(target, name, size, base_seed + rounds, report.targets[name])
        if not finding and after_round is not None and (problem := after_round()):
            report.targets[name].failures += 1
            finding = f"after a round of {name} (seed {base_seed + rounds}): {problem}"
        if finding:
            report.findings.append(finding)
            print(f"FAILURE {finding}", file=out, flush=True)
            break
        rounds += 1
        if rounds % 20 == 0:
            print(f"{time.perf_counter() - start:7.1f} s  {spent} examples", file=out, flush=True)
    report.seconds = round(time.perf_counter() - start, 1)
    report.examples = sum(t.examples for t in report.targets.values())
    report.failures = sum(t.failures for t in report.targets.values())
    return report


def print_report(report: Report, out: TextIO | None = None) -> None:
    """Per-target lines, then the JSON summary as the last line."""
    out = out or sys.stdout
    for name, stats in report.targets.items():
        print(f"{name}: {stats.examples} examples, {stats.accepted} accepted, {stats.failures} failures",
              file=out)
    summary = asdict(report)
    summary.pop("findings")
    print(json.dumps(summary), file=out, flush=True)
