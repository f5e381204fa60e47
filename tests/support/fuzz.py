"""The fuzz driver: the KServe v2 BYTES decoder and request decoding under hypothesis, round after round.

`fuzz(examples, seconds, seed)` runs rounds of generated examples, alternating targets, until the example
or time budget is spent or a failure is found: `deserialize_bytes` on raw BYTES tensors (well-formed,
mutated, arbitrary) with any element count, and `decode_request` on arbitrary ModelInferRequest messages;
each example is checked by the oracles of tests/support/hostile.py. Round i runs with seed `seed` + i (a
finding names its round's seed), so the same arguments replay a run; a failure is shrunk to a minimal
example. The command is bench/soak/fuzz.py (`make fuzz`, docs/reliability.md).
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

import hypothesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.support import hostile

ROUND = 2000  # examples per hypothesis run; a round's seed reproduces it


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


TARGETS: dict[str, tuple[st.SearchStrategy, Callable[[Any], bool]]] = {
    "deserialize_bytes": (hostile.byte_tensors(), _deserialize),
    "decode_request": (hostile.infer_requests(), _decode),
}


def run_round(name: str, examples: int, round_seed: int, stats: TargetStats) -> str | None:
    """One hypothesis run of `examples` examples of a target; the shrunk failure, None if none."""
    strategy, oracle = TARGETS[name]

    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate, Phase.shrink],
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
    @seed(round_seed)
    @given(strategy)
    def target(value: Any) -> None:
        """One example."""
        stats.examples += 1
        stats.accepted += oracle(value)

    try:
        target()
    except Exception as exc:  # noqa: BLE001 - every finding is reported, whatever it raised
        stats.failures += 1
        notes = "\n".join(getattr(exc, "__notes__", []))
        where = "".join(traceback.format_tb(exc.__traceback__)[-2:])
        return f"{name} (seed {round_seed}): {type(exc).__name__}: {exc}\n{notes}\n{where}"
    return None


def fuzz(examples: int, seconds: float, base_seed: int, out: TextIO | None = None) -> Report:
    """Alternate targets round by round until the example or time budget is spent, or a failure."""
    out = out or sys.stdout
    report = Report(seed=base_seed, targets={name: TargetStats() for name in TARGETS})
    start = time.perf_counter()
    rounds = 0
    while True:
        spent = sum(t.examples for t in report.targets.values())
        if (examples and spent >= examples) or (seconds and time.perf_counter() - start >= seconds):
            break
        name = list(TARGETS)[rounds % len(TARGETS)]
        size = min(ROUND, examples - spent, max(1, examples // len(TARGETS))) if examples else ROUND
        finding = run_round(name, size, base_seed + rounds, report.targets[name])
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
