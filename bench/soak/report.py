"""What the soak found (`Report`), and how its records and the server's counters are judged: lost,
duplicated, hanging, wrong or unclean answers, metrics against the driver's counts, RSS growth after the
plateau."""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from bench.common.loadgen import Record
from bench.soak.calls import RETIRED
from bench.soak.case import HTTP_METHODS, HTTP_REPOSITORY_LOAD, REPOSITORY_LOAD
from bench.soak.cases import VALID_KINDS
from service.models.repository import UNLOAD_GRACE_S

# A leak is growth after the plateau: the median RSS of the soak's second half against its first half's
# (the warm-up's RSS, taken before every shape has been seen once, is reported but not judged)
RSS_GROWTH_LIMIT = 0.05
# kinds whose client-side code may differ from the server's count (see compare_metrics)
RACING = {"cancel_stream": ("CANCELLED",), "http_cancel_stream": ("CANCELLED",),
          "short_deadline": ("DEADLINE_EXCEEDED",)}
RACE_CODES = ("OK", "CANCELLED", "DEADLINE_EXCEEDED", "INTERNAL", "RESOURCE_EXHAUSTED")
STATUS_PROBLEMS = ("status", "INVALID", "RESOURCE", "INTERNAL", "NOT_FOUND", "DEADLINE", "UNAVAILABLE")
GRACE_SLACK_S = 1.0  # the client sees a reload end and a drain begin this much off the server's clock


@dataclass
class Report:
    """What the soak found."""

    settings: dict
    requests: int = 0
    answered: int = 0
    lost: int = 0
    duplicated: int = 0
    hanging: int = 0
    wrong_results: int = 0
    bad_status: int = 0
    valid_ok: int = 0
    valid_ok_http: int = 0  # of valid_ok, sent over HTTP
    faults: dict[str, int] = field(default_factory=dict)  # requests per fault kind
    valid: dict[str, int] = field(default_factory=dict)  # requests per valid kind
    codes: dict[str, int] = field(default_factory=dict)  # terminal status codes
    problems: list[str] = field(default_factory=list)  # the first ones, with their request
    serving_at_end: bool = False
    rss_warm_kib: int = 0
    rss_end_kib: int = 0
    rss_drift: float = 0.0  # end against after warm-up (reported, not judged)
    rss_growth: float = 0.0  # median of the second half of the curve against the first half's
    rss_curve_mib: list[float] = field(default_factory=list)  # RSS at each twentieth of the soak
    metrics_mismatch: dict[str, list[float]] = field(default_factory=dict)  # "method code": [server, driver]
    not_counted: int = 0  # refused by gRPC before a handler: not in translator_requests_total
    raced: int = 0  # cancels / short deadlines the server counted under another code, or not at all
    retired: int = 0  # accepted requests still in flight a grace after a reload replaced their version
    elapsed_s: float = 0.0
    requests_per_s: float = 0.0

    @property
    def passed(self) -> bool:
        """Every check held."""
        counts_ok = self.lost == self.duplicated == self.hanging == 0
        return (not self.problems and counts_ok and self.serving_at_end
                and self.rss_growth <= RSS_GROWTH_LIMIT and not self.metrics_mismatch)


def rss_growth(curve: Sequence[float]) -> float:
    """Growth after the plateau: the median of the curve's second half over its first half's, minus 1."""
    half = len(curve) // 2
    if half == 0:
        return 0.0
    return statistics.median(curve[-half:]) / statistics.median(curve[:half]) - 1


def excuse_retired(records: Sequence[Record]) -> int:
    """Judge the requests marked RETIRED (failed as their model version was retired): one is excused when
    a reload that answered OK while it was in flight had been over for the repository's unload grace when
    it failed (docs/service.md: a replaced version's requests get that grace); any other becomes a status
    problem. The number excused."""
    reloads = [r.end for r in records if r.kind == "repo_keyed" and r.code == "OK"
               and r.method in (REPOSITORY_LOAD, HTTP_REPOSITORY_LOAD)]
    excused = 0
    for record in records:
        marks = [p for p in record.problems if p.startswith(RETIRED)]
        if not marks:
            continue
        record.problems = [p for p in record.problems if not p.startswith(RETIRED)]
        if any(record.start < t and record.end >= t + UNLOAD_GRACE_S - GRACE_SLACK_S for t in reloads):
            excused += 1
        else:
            record.problems.append(f"status UNAVAILABLE ({record.details!r}) explained by no reload")
    return excused


def summarize(report: Report, records: Sequence[Record], sent: int) -> None:
    """Fill the report's request counts and problems from the records (RETIRED ones judged first)."""
    report.retired += excuse_retired(records)
    indexed = Counter(r.index for r in records if r.index >= 0)
    report.requests = sent
    report.answered = len(records)
    report.lost = sent - len(records)
    report.duplicated = (sum(1 for r in records if r.answers > 1)
                         + sum(n - 1 for n in indexed.values() if n > 1))
    report.lost += sum(1 for r in records if r.answers == 0)
    report.hanging = sum(1 for r in records if any("after a" in p for p in r.problems))
    report.wrong_results = sum(1 for r in records if any("differ" in p or "add up" in p for p in r.problems))
    report.bad_status = sum(1 for r in records if any(p.startswith(STATUS_PROBLEMS) or "internals" in p
                                                      for p in r.problems))
    report.valid_ok = sum(1 for r in records if r.kind in VALID_KINDS and r.code == "OK" and not r.problems)
    report.valid_ok_http = sum(1 for r in records if r.kind in VALID_KINDS and r.code == "OK"
                               and not r.problems and r.method in HTTP_METHODS)
    report.faults = dict(sorted(Counter(r.kind for r in records if r.kind not in VALID_KINDS).items()))
    report.valid = dict(sorted(Counter(r.kind for r in records if r.kind in VALID_KINDS).items()))
    report.codes = dict(sorted(Counter(r.code for r in records).items()))
    report.problems = [f"#{r.index} {r.kind}: {p}" for r in records for p in r.problems][:50]


def compare_metrics(report: Report, before: Counter, after: Counter, records: Sequence[Record]) -> None:
    """translator_requests_total must have grown by the driver's counts. Oversized calls are left out
    (gRPC refuses them before any handler). A cancel or a short deadline races the server: the server
    may have answered OK (or failed the batch) before it saw the cancel, and a deadline may expire
    before the handler starts (gRPC answers alone). Those records may land under another code of the
    same method, or (deadlines) nowhere; everything else must match exactly."""
    counted = [r for r in records if r.kind != "oversized"]
    report.not_counted = len(records) - len(counted)
    racing = [r for r in counted if r.code in RACING.get(r.kind, ())]
    exact = Counter(f"{r.method} {r.code}" for r in counted if r.code not in RACING.get(r.kind, ()))
    server = Counter({k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)})
    extra = Counter()
    for key in sorted(set(exact) | {k for k, v in server.items() if v}):
        diff = server.get(key, 0) - exact.get(key, 0)
        method, code = key.split(" ")
        if diff < 0 or (diff > 0 and code not in RACE_CODES):
            report.metrics_mismatch[key] = [server.get(key, 0), exact.get(key, 0)]
        extra[method] += max(0, diff)
    for method in {r.method for r in racing} | set(extra):
        mine = [r for r in racing if r.method == method]
        may_vanish = sum(r.kind == "short_deadline" for r in mine)
        if not len(mine) - may_vanish <= extra[method] <= len(mine):
            report.metrics_mismatch[f"{method} (racing)"] = [extra[method], len(mine)]
    same = Counter(f"{r.method} {r.code}" for r in racing)
    report.raced = sum(n - min(n, server.get(k, 0) - exact.get(k, 0)) for k, n in same.items())


def print_report(report: Report, out=sys.stdout) -> None:
    """Human-readable summary, then the report as one JSON line."""
    out.write(f"requests {report.requests}, answered {report.answered}, lost {report.lost}, "
              f"duplicated {report.duplicated}, hanging {report.hanging}, "
              f"wrong results {report.wrong_results}, "
              f"bad statuses {report.bad_status}\n")
    out.write(f"valid requests answered OK and token-identical: {report.valid_ok} "
              f"({report.valid_ok_http} over HTTP)\n")
    out.write(f"valid by kind: {report.valid}\nfaults by kind: {report.faults}\n")
    out.write(f"status codes: {report.codes}\n")
    out.write(f"SERVING at the end: {report.serving_at_end}; "
              f"RSS {report.rss_warm_kib / 1024:.1f} MiB after warm-up, "
              f"{report.rss_end_kib / 1024:.1f} MiB at the end ({100 * report.rss_drift:+.1f}%); "
              f"second half against first half {100 * report.rss_growth:+.1f}% "
              f"(limit {100 * RSS_GROWTH_LIMIT:.0f}%); at each twentieth: {report.rss_curve_mib} MiB\n")
    out.write(f"metrics vs driver: {'equal' if not report.metrics_mismatch else report.metrics_mismatch} "
              f"({report.not_counted} oversized calls refused by gRPC before any handler; "
              f"{report.raced} cancels or deadlines raced the server's answer; {report.retired} accepted "
              f"requests outlived a reload's grace of {UNLOAD_GRACE_S:g} s)\n")
    out.write(f"{report.elapsed_s:.0f} s, {report.requests_per_s:.1f} requests/s\n")
    for problem in report.problems[:20]:
        out.write(f"PROBLEM {problem}\n")
    out.write(("PASSED" if report.passed else "FAILED") + "\n")
    out.write(json.dumps(asdict(report) | {"passed": report.passed}) + "\n")
