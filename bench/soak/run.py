"""Soak with faults: a real server under a long mix of valid, hostile and abandoned requests (the command
and its checks: bench/soak/__main__.py).

`run(settings)` starts the server (bench/soak/faulty_server.py's when faults are injected) on a repository of
the bundle twice (control mode explicit, the model-repository group restricted by a key made for the run),
computes every valid text's reference in process, drives a warm-up and the soak through the closed loop of
bench/common/loadgen.py (bench/soak/calls.py sends and checks each case), samples the server's RSS and
counters, and returns the `Report` (bench/soak/report.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from bench.common.loadgen import Record, closed_loop
from bench.common.progress import Progress
from bench.common.serverproc import ServerProcess, free_port
from bench.common.workload import DEFAULT_BUNDLE, HELD_OUT, held_out_sources
from bench.soak.admin_cases import SERVED, SPARE
from bench.soak.calls import Stubs, send
from bench.soak.cases import RESTRICTION, Case, Mix
from bench.soak.http_calls import HttpClient
from bench.soak.report import Report, compare_metrics, excuse_retired, rss_growth, summarize
from service.runtime.runner import Runner

RSS_SAMPLES = 20  # RSS read at each twentieth of the soak
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


@contextlib.contextmanager
def repository(bundle: Path) -> Iterator[Path]:
    """A temporary model repository of the bundle twice: the served model and a spare one (never loaded)."""
    with tempfile.TemporaryDirectory(prefix="soak-repository-") as folder:
        root = Path(folder)
        for name in (SERVED, SPARE):
            (root / name).mkdir()
            (root / name / "1").symlink_to(bundle.resolve(), target_is_directory=True)
        yield root


def repository_flags(root: Path, key: str, value: str) -> list[str]:
    """The server's flags for the soak's repository: control mode explicit, the served model loaded at
    start, the model-repository group restricted by (key, value) over both protocols."""
    return ["--model-repository", str(root), "--model-control-mode", "explicit", "--load-model", SERVED,
            "--grpc-restricted-protocol", f"model-repository:{key}={value}",
            "--http-restricted-api", f"model-repository:{key}={value}"]


class FaultyServer(ServerProcess):
    """The server started through bench/soak/faulty_server.py: every N-th decoder step fails."""

    def __init__(self, *args, inject_every: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.inject_every = inject_every

    def command(self, port_file: Path) -> list[str]:
        """The server's command line, wrapped."""
        command = super().command(port_file)
        return [command[0], "-m", "bench.soak.faulty_server", "--fail-every", str(self.inject_every),
                *command[3:]]


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
    """The closed loop: `concurrency` users take the next case (`progress(index)` is told); every
    burst_every-th case also fires the burst all at once. Bounded by limit_s (unfinished requests
    are then lost, and reported)."""
    channels = [aio.insecure_channel(address, options=CHANNEL_OPTIONS) for _ in range(CHANNELS)]
    session = aiohttp.ClientSession()
    http = HttpClient(session, f"http://{http_address}")
    stubs = [Stubs(c, http) for c in channels]
    bursts: list[Record] = []

    async def call(i: int, lane: int) -> Record:
        """Send case i over the lane's channel (with the burst beside it when due)."""
        if progress is not None:
            progress(i)
        mine = send(i, cases[i], stubs[lane % CHANNELS], injected)
        if burst and burst_every and i % burst_every == burst_every - 1:
            fired = [send(-1, b, stubs[j % CHANNELS], injected) for j, b in enumerate(burst)]
            *fired_records, record = await asyncio.gather(*fired, mine)
            bursts.extend(fired_records)
            return record
        return await mine

    try:
        records = await closed_loop(call, concurrency, len(cases), limit_s=limit_s) if cases else []
    finally:
        for channel in channels:
            await channel.close()
        await session.close()
    return records + bursts


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


def run(settings: Settings, log=print) -> Report:
    """Run a soak; returns its report."""
    report = Report(settings={k: str(v) for k, v in asdict(settings).items()})
    runner = Runner(settings.bundle, intra_op_threads=1)
    restriction = (RESTRICTION[0], secrets.token_hex(8))
    mix = Mix(runner, held_out_sources(settings.sources), settings.max_batch_size, settings.max_message_bytes,
              seed=settings.seed, max_output_tokens=settings.max_output_tokens or None,
              restriction=restriction)
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
    with repository(settings.bundle) as root, \
            kind(settings.bundle, settings.batching, [*args, *repository_flags(root, *restriction)],
                 **extra) as server:
        log(f"server {server.address} (pid {server.pid}); warm-up: {warmup} requests of the mix, 2 bursts")
        warm = asyncio.run(drive(server.address, http_address, warm_cases, settings.concurrency, burst,
                                 max(1, warmup // 2), injected, 600))
        report.retired = excuse_retired(warm)
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
