"""Soak with faults: a real server under a long mix of valid, hostile and abandoned requests.

    python -m bench.soak --requests 10000 --concurrency 48       # `make soak` (default bundle)
    python -m bench.soak --requests 300 --concurrency 16 --bundle my-bundle --sources pairs.tsv

Starts `python -m service.server` on a free 127.0.0.1 port (bench/serverproc.py), computes every
valid text's reference in-process (service.runtime.runner.Runner, same bundle, decoded alone), warms
the server up, then sends the mix of bench/soak_cases.py from `--concurrency` closed-loop users over
several channels and one HTTP connection pool (the server's HTTP port: KServe v2 REST infer in JSON
and binary tensor data, generate, generate_stream as server-sent events, bench/soak_http_cases.py),
with bursts of maximal requests beyond the queue every `--burst-every` requests. Optionally
(`--inject-every N`) the server fails every N-th decoder step through the runner's fault hook
(bench/faulty_server.py). Checks, all printed in the report (the last line is
its JSON):

- every request got exactly one terminal answer (lost = duplicated = hanging = 0), with an
  allowed status and a clean message (no tracebacks, paths or class names);
- every accepted valid request's result is token-identical to decoding it alone;
- the server is SERVING at the end, and its RSS does not grow after its plateau: the median of the
  soak's second half within 5% of the first half's (RSS sampled at each twentieth);
- `translator_requests_total{method,code}` grew by the driver's own counts (HTTP requests under
  their route's path pattern, their HTTP status as the table's gRPC name); calls gRPC refused
  before any handler ran (a message over --max-message-bytes) are not in it and are left out, and
  a cancel or a too-short deadline may race the server's answer (see `compare_metrics`).

Progress goes to stderr (a bar on a terminal, a line at each twentieth otherwise, with the last RSS).
`main` writes the RSS curve to `<out>/soak-rss.json` and its chart beside it (warm-up marked).
Exit code 0 when every check passed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from bench.charts import from_results, record
from bench.progress import Progress
from bench.serverproc import ServerProcess, free_port
from bench.soak_calls import Record, Stubs, send
from bench.soak_case import HTTP_METHODS
from bench.soak_cases import VALID_KINDS, Case, Mix
from bench.soak_http_calls import HttpClient
from bench.workload import DEFAULT_BUNDLE, HELD_OUT, held_out_sources
from service.runtime.runner import Runner

# A leak is growth after the plateau: the median RSS of the soak's second half against its first half's
# (the warm-up's RSS, taken before every shape has been seen once, is reported but not judged)
RSS_GROWTH_LIMIT = 0.05
RSS_SAMPLES = 20  # RSS read at each twentieth of the soak
# kinds whose client-side code may differ from the server's count (see compare_metrics)
RACING = {"cancel_stream": ("CANCELLED",), "http_cancel_stream": ("CANCELLED",),
          "short_deadline": ("DEADLINE_EXCEEDED",)}
RACE_CODES = ("OK", "CANCELLED", "DEADLINE_EXCEEDED", "INTERNAL", "RESOURCE_EXHAUSTED")
STATUS_PROBLEMS = ("status", "INVALID", "RESOURCE", "INTERNAL", "NOT_FOUND", "DEADLINE", "UNAVAILABLE")
CHANNELS = 4
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024),
                   ("grpc.max_send_message_length", 64 * 1024 * 1024)]


@dataclass
class Settings:
    """What to run: the server's settings and the driver's."""

    bundle: Path = DEFAULT_BUNDLE
    sources: Path = HELD_OUT
    requests: int = 10_000
    concurrency: int = 48
    warmup: int = 0  # 0: 20% of the requests, at least 100
    batching: str = "continuous"
    max_batch_size: int = 16
    queue_size: int = 128
    max_message_bytes: int = 256 * 1024
    max_connection_age_ms: int = 20_000  # short, so that channels reconnect during the soak
    burst_every: int = 500
    inject_every: int = 0  # fail every N-th decoder step in the server (0: never)
    seed: int = 0
    max_minutes: float = 60.0
    max_output_tokens: int = 0  # the server's --max-output-tokens, references alike (0: the model's)
    out: Path = Path("runs/soak")  # the RSS curve's record and chart (written by main)

    @property
    def warmup_requests(self) -> int:
        """The warm-up's requests (`warmup`, or 20% of the requests, at least 100)."""
        return self.warmup or max(100, self.requests // 5)


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
    elapsed_s: float = 0.0
    requests_per_s: float = 0.0

    @property
    def passed(self) -> bool:
        """Every check held."""
        counts_ok = self.lost == self.duplicated == self.hanging == 0
        return (not self.problems and counts_ok and self.serving_at_end
                and self.rss_growth <= RSS_GROWTH_LIMIT and not self.metrics_mismatch)


class FaultyServer(ServerProcess):
    """The server started through bench/faulty_server.py: every N-th decoder step fails."""

    def __init__(self, *args, inject_every: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.inject_every = inject_every

    def command(self, port_file: Path) -> list[str]:
        """The server's command line, wrapped."""
        command = super().command(port_file)
        return [command[0], "-m", "bench.faulty_server", "--fail-every", str(self.inject_every), *command[3:]]


def request_counts(metrics_port: int) -> Counter:
    """translator_requests_total by "method code" from the server's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    out: Counter = Counter()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "translator_requests_total":
                out[f"{s.labels['method']} {s.labels['code']}"] += s.value
    return out


async def serving(address: str) -> bool:
    """Whether the server's health service answers SERVING."""
    async with aio.insecure_channel(address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    return reply.status == health_pb2.HealthCheckResponse.SERVING


async def drive(address: str, http_address: str, cases: Sequence[Case], concurrency: int, burst: list[Case],
                burst_every: int, injected: bool, limit_s: float,
                progress: Callable[[int], None] | None = None) -> list[Record]:
    """Closed loop: `concurrency` users take the next case (`progress(index)` is told); every
    burst_every-th case also fires the burst all at once. Bounded by limit_s (unfinished requests
    are then lost, and reported)."""
    channels = [aio.insecure_channel(address, options=CHANNEL_OPTIONS) for _ in range(CHANNELS)]
    session = aiohttp.ClientSession()
    http = HttpClient(session, f"http://{http_address}")
    stubs = [Stubs(c, http) for c in channels]
    records: list[Record] = []
    pending = iter(enumerate(cases))

    async def user(u: int) -> None:
        """Send cases back to back until none are left."""
        for i, case in pending:
            if progress is not None:
                progress(i)
            if burst and burst_every and i % burst_every == burst_every - 1:
                fired = [send(-1, b, stubs[j % CHANNELS], injected) for j, b in enumerate(burst)]
                records.extend(await asyncio.gather(*fired, send(i, case, stubs[u % CHANNELS], injected)))
            else:
                records.append(await send(i, case, stubs[u % CHANNELS], injected))

    try:
        await asyncio.wait_for(asyncio.gather(*(user(u) for u in range(concurrency))), limit_s)
    except TimeoutError:
        pass  # what did not finish is counted as lost
    finally:
        for channel in channels:
            await channel.close()
        await session.close()
    return records


class RssSampler:
    """The server's RSS each time the soak reaches another twentieth of its requests, and at the end."""

    def __init__(self, server: ServerProcess, total: int) -> None:
        self.server, self.total = server, total
        self.curve_mib: list[float] = []

    def progress(self, index: int) -> None:
        """Called as case `index` is sent: sample at 5%, 10%, ... of the cases."""
        taken = len(self.curve_mib)
        if index * RSS_SAMPLES >= self.total * (taken + 1) and taken < RSS_SAMPLES - 1:
            self.curve_mib.append(round(self.server.rss_kib() / 1024, 1))

    def __enter__(self) -> RssSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.curve_mib.append(round(self.server.rss_kib() / 1024, 1))


def rss_growth(curve: Sequence[float]) -> float:
    """Growth after the plateau: the median of the curve's second half over its first half's, minus 1."""
    half = len(curve) // 2
    if half == 0:
        return 0.0
    return statistics.median(curve[-half:]) / statistics.median(curve[:half]) - 1


def summarize(report: Report, records: Sequence[Record], sent: int) -> None:
    """Fill the report's request counts and problems from the records."""
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


def run(settings: Settings, log=print) -> Report:
    """Run a soak; returns its report."""
    report = Report(settings={k: str(v) for k, v in asdict(settings).items()})
    runner = Runner(settings.bundle, intra_op_threads=1)
    mix = Mix(runner, held_out_sources(settings.sources), settings.max_batch_size, settings.max_message_bytes,
              seed=settings.seed, max_output_tokens=settings.max_output_tokens or None)
    # The server's RSS reaches its plateau after ~2,000 requests of the mix (ORT's arena and the
    # allocator grow to the largest shapes first): the baseline is taken after that.
    warmup = settings.warmup_requests
    log(f"references for {warmup + settings.requests} requests ...")
    warm_cases = mix.cases(warmup)  # the soak's own mix: every path allocates its peak before the baseline
    cases = mix.cases(settings.requests)
    burst_size = settings.queue_size // settings.max_batch_size + 4  # more texts than the queue holds
    burst = [mix.burst_case() for _ in range(burst_size)]
    n_bursts = settings.requests // settings.burst_every if settings.burst_every else 0
    sent = settings.requests + n_bursts * burst_size
    http_address = f"127.0.0.1:{free_port()}"
    args = ["--http-port", http_address.rsplit(":", 1)[1],
            "--max-batch-size", str(settings.max_batch_size), "--queue-size", str(settings.queue_size),
            "--max-message-bytes", str(settings.max_message_bytes),
            "--max-connection-age-ms", str(settings.max_connection_age_ms), "--drain-grace-s", "10",
            "--max-output-tokens", str(settings.max_output_tokens)]
    kind = FaultyServer if settings.inject_every else ServerProcess
    extra = {"inject_every": settings.inject_every} if settings.inject_every else {}
    injected = bool(settings.inject_every)
    with kind(settings.bundle, settings.batching, args, **extra) as server:
        log(f"server {server.address} (pid {server.pid}); warm-up: {warmup} requests of the mix, 2 bursts")
        warm = asyncio.run(drive(server.address, http_address, warm_cases, settings.concurrency, burst,
                                 max(1, warmup // 2), injected, 600))
        warm_problems = [f"warm-up #{r.index} {r.kind}: {p}" for r in warm for p in r.problems]
        time.sleep(1.0)
        report.rss_warm_kib = server.rss_kib()
        before = request_counts(server.metrics_port)
        log(f"soak: {settings.requests} requests + {n_bursts} bursts of {burst_size}, "
            f"concurrency {settings.concurrency}; RSS after warm-up {report.rss_warm_kib / 1024:.0f} MiB")
        t0 = time.perf_counter()
        with RssSampler(server, settings.requests) as sampler, \
                Progress(settings.requests, "soak", lines=RSS_SAMPLES) as bar:
            def progress(index: int) -> None:
                """Sample RSS where due, and count the request."""
                sampler.progress(index)
                bar.update(1, f"RSS {sampler.curve_mib[-1]} MiB" if sampler.curve_mib else "")
            records = asyncio.run(drive(server.address, http_address, cases, settings.concurrency, burst,
                                        settings.burst_every, injected, settings.max_minutes * 60, progress))
        report.elapsed_s = time.perf_counter() - t0
        report.rss_curve_mib = sampler.curve_mib
        time.sleep(1.0)
        after = request_counts(server.metrics_port)
        report.rss_end_kib = server.rss_kib()
        report.serving_at_end = asyncio.run(serving(server.address))
    summarize(report, records, sent)
    report.problems = (warm_problems + report.problems)[:50]
    compare_metrics(report, before, after, records)
    report.rss_drift = report.rss_end_kib / max(1, report.rss_warm_kib) - 1
    report.rss_growth = rss_growth(report.rss_curve_mib)
    report.requests_per_s = report.answered / max(report.elapsed_s, 1e-9)
    return report


def print_report(report: Report, out=sys.stdout) -> None:
    """Human-readable summary, then the report as one JSON line."""
    out.write(f"requests {report.requests}, answered {report.answered}, lost {report.lost}, "
              f"duplicated {report.duplicated}, hanging {report.hanging}, "
              f"wrong results {report.wrong_results}, "
              f"bad statuses {report.bad_status}\n")
    out.write(f"valid requests answered OK and token-identical: {report.valid_ok} "
              f"({report.valid_ok_http} over HTTP)\n")
    out.write(f"faults by kind: {report.faults}\nstatus codes: {report.codes}\n")
    out.write(f"SERVING at the end: {report.serving_at_end}; "
              f"RSS {report.rss_warm_kib / 1024:.1f} MiB after warm-up, "
              f"{report.rss_end_kib / 1024:.1f} MiB at the end ({100 * report.rss_drift:+.1f}%); "
              f"second half against first half {100 * report.rss_growth:+.1f}% "
              f"(limit {100 * RSS_GROWTH_LIMIT:.0f}%); at each twentieth: {report.rss_curve_mib} MiB\n")
    out.write(f"metrics vs driver: {'equal' if not report.metrics_mismatch else report.metrics_mismatch} "
              f"({report.not_counted} oversized calls refused by gRPC before any handler; "
              f"{report.raced} cancels or deadlines raced the server's answer)\n")
    out.write(f"{report.elapsed_s:.0f} s, {report.requests_per_s:.1f} requests/s\n")
    for problem in report.problems[:20]:
        out.write(f"PROBLEM {problem}\n")
    out.write(("PASSED" if report.passed else "FAILED") + "\n")
    out.write(json.dumps(asdict(report) | {"passed": report.passed}) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    defaults = Settings()
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, value in asdict(defaults).items():
        ap.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    settings = Settings(**vars(ap.parse_args(argv)))
    report = run(settings, log=lambda text: print(text, file=sys.stderr, flush=True))
    print_report(report)
    record.write(settings.out, "soak-rss", "rss", from_results.soak_rss(
        report.rss_curve_mib, settings.requests, settings.warmup_requests, report.rss_warm_kib / 1024,
        report.rss_end_kib / 1024))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
