"""Server benchmark: the real server per batching mode under closed-loop and Poisson load.

    python -m bench.server [--quick] [--bundle DIR] [--intra-op-threads N] [--json FILE] [--out DIR]

One `python -m service.server` subprocess per batching mode runs on 127.0.0.1 for the whole run
(bench/common/serverproc.py); every measurement point is taken for each mode in turn, so that a change of
the machine's load hits every mode alike. bench/common/loadgen.py drives them with two workloads
(bench/common/workload.py): `sentences`, the held-out sentences as they are (5 to 43 tokens), and `mix`,
the same with some texts made of 2, 4 or 8 joined sentences (up to the bundle's max_len).
1. Concurrency 1 against in-process decoding, on the same texts: `Runner.translate([text])` in a
   separate process (same bundle and threads, timed there) and the server (unary Translate), in
   alternating blocks of 20 texts with a pause between blocks; never both at once. Then Triton's
   perf_analyzer (KServe v2) on the same texts, when installed: the ratio takes the p50 of the
   client that took less CPU per request (bench/engines/vs_ct2.py does the same).
2. Closed loop at each concurrency and workload (every `stream_every`-th request streamed: time
   to first token), with the server's own metrics for rows per decoder step and step time.
3. Open loop on `sentences` at Poisson rates = fractions of the continuous mode's closed-loop peak.
The points at the headline concurrency (64) send at least `headline_requests` requests, so that
p99 is the 10th-slowest of about a thousand texts rather than the 3rd of 300. Every server runs
with its defaults apart from the Plan's flags; `variants` are more servers (a label, a mode and
extra flags: by default `continuous-no-budget`, continuous batching without the token budget),
measured beside the others at the headline concurrency only, on every workload.
`run(quick, bundle)` prints the markdown tables and returns the ratios (higher is better); with `out`
also every closed-loop point to `<out>/server.json` and its charts beside it (bench/charts).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.charts import from_results, record
from bench.common.loadgen import Record, Summary, percentiles, summarize
from bench.common.serverproc import ServerProcess
from bench.common.translator import Client, closed_loop_at, open_channel, open_loop_at
from bench.common.workload import DEFAULT_BUNDLE, HELD_OUT, PAUSE_S, Lengths, held_out_sources, mixed_texts
from bench.server import perf_analyzer
from bench.server.inprocess import InProcessDecoder

MODES = ("continuous", "dynamic", "none")
WORKLOADS = ("sentences", "mix")


@dataclass(frozen=True)
class Plan:
    """What one benchmark run measures (full mode by default; see QUICK)."""

    modes: tuple[str, ...] = MODES
    workloads: tuple[str, ...] = WORKLOADS
    concurrencies: tuple[int, ...] = (1, 8, 32, 64, 128)
    min_requests: int = 300  # closed loop: max(min_requests, per_user * concurrency) requests
    per_user: int = 5
    headline_concurrency: int = 64  # the ratios' concurrency
    headline_requests: int = 960  # at least this many requests there (p99 = the 10th-slowest)
    variants: tuple[tuple[str, str, tuple[str, ...]], ...] = (
        ("continuous-no-budget", "continuous", ("--max-batch-tokens", "0")),)  # (label, mode, flags)
    rate_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    open_seconds: float = 15.0  # open loop: about this long per rate, within the bounds below
    open_requests: tuple[int, int] = (100, 1500)
    c1_requests: int = 100  # concurrency-1 comparison with in-process decoding
    mix_texts: int = 2000
    stream_every: int = 8
    warmup_requests: int = 32
    max_batch_size: int = 64
    max_queue_delay_ms: float = 5.0
    queue_size: int = 256
    intra_op_threads: int = 0
    seed: int = 0

    def requests_at(self, concurrency: int) -> int:
        """Closed-loop requests at a concurrency."""
        headline = self.headline_requests if concurrency == self.headline_concurrency else 0
        return max(self.min_requests, self.per_user * concurrency, headline)

    def open_requests_at(self, rate: float) -> int:
        """Open-loop requests at an arrival rate."""
        low, high = self.open_requests
        return int(min(high, max(low, rate * self.open_seconds)))

    def server_args(self) -> list[str]:
        """Server flags shared by every mode."""
        return ["--max-batch-size", str(self.max_batch_size),
                "--max-queue-delay-ms", str(self.max_queue_delay_ms), "--queue-size", str(self.queue_size),
                "--intra-op-threads", str(self.intra_op_threads)]


QUICK = Plan(concurrencies=(1, 8, 64), min_requests=80, per_user=3, headline_requests=0, variants=(),
             rate_fractions=(0.3, 0.8), open_seconds=5.0, open_requests=(40, 300), c1_requests=40,
             mix_texts=500, warmup_requests=16)


@dataclass
class Point:
    """One measurement: the client's summary and the server's view (means over the point)."""

    summary: Summary
    rows_per_step: float = math.nan
    step_ms: float = math.nan
    encoder_ms: float = math.nan


@dataclass
class ModeResult:
    """Everything measured for one batching mode."""

    mode: str
    c1_server_ms: list[float] = field(default_factory=list)  # the texts of c1_inprocess_ms, same order
    c1_inprocess_ms: list[float] = field(default_factory=list)
    c1_records: list[Record] = field(default_factory=list)
    c1_loadgen_cpu_ms: float = math.nan  # the Python client's CPU time per request at concurrency 1
    c1_perf_analyzer: tuple[float, float] | None = None  # perf_analyzer on the same texts: p50 ms, CPU ms
    closed: dict[tuple[str, int], Point] = field(default_factory=dict)  # by (workload, concurrency)
    open: list[Point] = field(default_factory=list)  # by rate
    peak_rss_mib: float = math.nan

    @property
    def c1_client(self) -> tuple[str, float]:
        """(client, its p50 ms at concurrency 1) for the client that took less CPU per request."""
        pa = self.c1_perf_analyzer
        cpu = {"loadgen": self.c1_loadgen_cpu_ms, **({"perf_analyzer": pa[1]} if pa else {})}
        if perf_analyzer.cheaper_client(cpu) == "perf_analyzer":
            return "perf_analyzer", pa[0]
        return "loadgen", statistics.median(self.c1_server_ms)

    @property
    def c1_ratio(self) -> float:
        """In-process p50 / server p50 at concurrency 1 (1.0 = no serving overhead); NaN if not measured."""
        if not self.c1_server_ms:
            return math.nan
        return statistics.median(self.c1_inprocess_ms) / self.c1_client[1]


# ----- concurrency 1 against in-process decoding ----------------------------------------------
C1_BLOCK = 20  # texts per block of the concurrency-1 comparison


async def c1_in_blocks(decoder: InProcessDecoder, address: str,
                       texts: list[str]) -> tuple[list[float], list[Record], float]:
    """In-process latency (ms) of each text, and the same texts through the server (unary, concurrency
    1), in alternating blocks with a pause between them: one side's idle ONNX Runtime threads, still
    spinning right after its work, would otherwise slow the other side's next text. Also returns the
    client's CPU time per request (ms)."""
    inproc, records, client_cpu = [], [], 0.0
    async with open_channel(address) as channel:
        client = Client([channel], texts)
        for start in range(0, len(texts), C1_BLOCK):
            block = range(start, min(start + C1_BLOCK, len(texts)))
            for i in block:
                inproc.append(1e3 * await asyncio.to_thread(decoder.seconds, texts[i]))
            await asyncio.sleep(PAUSE_S)
            cpu0 = time.process_time()
            for i in block:
                records.append(await client.call(i))
                if records[-1].code != "OK":
                    raise RuntimeError(f"concurrency-1 request {i} failed with {records[-1].code}")
            client_cpu += time.process_time() - cpu0
            await asyncio.sleep(PAUSE_S)
    return inproc, records, 1e3 * client_cpu / max(1, len(records))


def perf_analyzer_c1(address: str, texts: list[str]) -> tuple[float, float]:
    """perf_analyzer at concurrency 1 on `texts` (windows of all of them): (p50 ms, its CPU ms/request)."""
    with tempfile.TemporaryDirectory(prefix="perf-analyzer-") as tmp:
        data = perf_analyzer.write_input_data(texts, Path(tmp) / "c1.json")
        row, cpu_ms = perf_analyzer.measure_with_cpu(address, data, 1, len(texts), Path(tmp), max_trials=6)
    return row.p50_ms, cpu_ms


# ----- closed and open loop --------------------------------------------------------------------
def _server_view(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Mean rows per decoder step, decoder step and encoder run times (ms) between two scrapes."""
    def mean(name: str, scale: float = 1.0) -> float:
        count = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
        total = after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)
        return scale * total / count if count else math.nan

    return {"rows_per_step": mean("translator_batch_size"),
            "step_ms": mean("translator_decoder_step_seconds", 1e3),
            "encoder_ms": mean("translator_encoder_compute_seconds", 1e3)}


def _point(server: ServerProcess, coro_factory, offered_rate: float | None = None) -> Point:
    """Run one load (a coroutine from coro_factory()) and summarize it with the server's view."""
    before = server.scrape()
    records = asyncio.run(coro_factory())
    return Point(summarize(records, offered_rate), **_server_view(before, server.scrape()))


def measure(plan: Plan, bundle: Path, workloads: dict[str, list[str]], log=print) -> dict[str, ModeResult]:
    """Start one server per mode, then take every point for each mode in turn."""
    modes = sorted(plan.modes, key=lambda m: m != "continuous")  # continuous first: it sets the rates
    first = workloads[plan.workloads[0]]
    extra = {label: (mode, flags) for label, mode, flags in plan.variants if mode in plan.modes}
    results = {m: ModeResult(m) for m in [*modes, *extra]}
    with contextlib.ExitStack() as stack:
        decoder = stack.enter_context(InProcessDecoder(bundle, plan.intra_op_threads))
        for text in first[:3]:
            decoder.seconds(text)  # loaded and warm, as the servers
        servers = {m: stack.enter_context(ServerProcess(bundle, m, plan.server_args())) for m in modes}
        for label, (mode, flags) in extra.items():
            servers[label] = stack.enter_context(ServerProcess(bundle, mode, [*plan.server_args(), *flags]))
        for m, server in servers.items():
            r, warmup = results[m], plan.warmup_requests
            asyncio.run(closed_loop_at(server.address, first, min(8, warmup), warmup))
            if m in extra:
                continue
            c1_texts = first[: plan.c1_requests]
            r.c1_inprocess_ms, r.c1_records, r.c1_loadgen_cpu_ms = asyncio.run(
                c1_in_blocks(decoder, server.address, c1_texts))
            r.c1_server_ms = [1e3 * x.latency for x in r.c1_records]
            if perf_analyzer.binary().exists():
                time.sleep(PAUSE_S)
                r.c1_perf_analyzer = perf_analyzer_c1(server.address, c1_texts)
            client, p50 = r.c1_client
            log(f"  {m}: concurrency 1: in-process p50 {statistics.median(r.c1_inprocess_ms):.1f} ms, "
                f"server p50 {p50:.1f} ms ({client}, the client with less CPU per request)")
        decoder.close()
        for name in plan.workloads:
            for c in plan.concurrencies:
                for m, server in servers.items():
                    if m in extra and c != plan.headline_concurrency:
                        continue

                    def load(address=server.address, texts=workloads[name], c=c):
                        return closed_loop_at(address, texts, c, plan.requests_at(c), plan.stream_every)
                    p = results[m].closed[name, c] = _point(server, load)
                    log(f"  {m}: {name} c={c}: {p.summary.throughput:.1f}/s, p99 {p.summary.p99_ms:.0f} ms, "
                        f"{p.rows_per_step:.1f} rows/step")
        ref = results[modes[0]].closed
        peak = max(p.summary.throughput for (w, _), p in ref.items() if w == plan.workloads[0])
        for k, fraction in enumerate(plan.rate_fractions):
            rate = fraction * peak
            for m in modes:
                server = servers[m]

                def load(address=server.address, rate=rate, k=k):
                    return open_loop_at(address, first, rate, plan.open_requests_at(rate), plan.seed + k,
                                        plan.stream_every)
                p = _point(server, load, offered_rate=rate)
                results[m].open.append(p)
                log(f"  {m}: open loop {rate:.1f}/s: {p.summary.throughput:.1f}/s answered, "
                    f"p99 {p.summary.p99_ms:.0f} ms, errors {p.summary.errors}")
        for m, server in servers.items():
            results[m].peak_rss_mib = server.peak_rss_kib() / 1024
    return results


# ----- ratios and tables ------------------------------------------------------------------------
def ratios(results: dict[str, ModeResult], c: int = 64) -> dict[str, float]:
    """The headline ratios (higher is better) at concurrency c; NaN when not measured."""
    def get(mode: str, workload: str, what: str = "throughput") -> float:
        """A summary figure of one closed-loop point at concurrency c."""
        r = results.get(mode)
        p = r.closed.get((workload, c)) if r is not None else None
        return getattr(p.summary, what) if p is not None else math.nan

    cont = results.get("continuous")
    out = {
        "continuous_vs_none_c64": get("continuous", "sentences") / get("none", "sentences"),
        "continuous_vs_dynamic_mixed": get("continuous", "mix") / get("dynamic", "mix"),
        "dynamic_vs_continuous_p99_mixed": (get("dynamic", "mix", "p99_ms")
                                            / get("continuous", "mix", "p99_ms")),
        "server_c1_vs_inprocess": cont.c1_ratio if cont is not None else math.nan,
        "continuous_vs_none_c64_mix": get("continuous", "mix") / get("none", "mix"),
        "continuous_vs_dynamic_c64_sentences": get("continuous", "sentences") / get("dynamic", "sentences"),
    }
    for label in [m for m in results if m not in MODES]:  # the Plan's variants
        key = label.replace("-", "_")
        out[f"{key}_vs_none_c64"] = get(label, "sentences") / get("none", "sentences")
        out[f"{key}_vs_dynamic_mixed"] = get(label, "mix") / get("dynamic", "mix")
        out[f"dynamic_vs_{key}_p99_mixed"] = get("dynamic", "mix", "p99_ms") / get(label, "mix", "p99_ms")
    for m, r in results.items():
        if r.c1_server_ms:
            out[f"{m}_c1_vs_inprocess"] = r.c1_ratio
        for w in WORKLOADS:
            if (w, c) in r.closed:
                out[f"{m}_c64_{w}_per_s"] = get(m, w)
        out[f"{m}_peak_rss_mib"] = r.peak_rss_mib
    return out


def _ms(x: float) -> str:
    """Milliseconds (or any positive figure) for a table cell."""
    return "-" if not math.isfinite(x) else f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = [header, ["---"] * len(header), *rows]
    return "".join("| " + " | ".join(cells) + " |\n" for cells in lines)


CELLS = ["requests", "sentences/s", "tokens/s", "p50 ms", "p90 ms", "p99 ms", "TTFT p50 ms", "TTFT p99 ms",
         "errors", "rows/step", "step ms", "encoder ms"]


def _cells(p: Point) -> list[str]:
    """The CELLS of a point."""
    s = p.summary
    errors = ", ".join(f"{k} {v}" for k, v in sorted(s.errors.items())) or "0"
    return [str(s.requests), f"{s.throughput:.1f}", f"{s.tokens_per_s:.0f}", _ms(s.p50_ms), _ms(s.p90_ms),
            _ms(s.p99_ms), _ms(s.ttft_p50_ms), _ms(s.ttft_p99_ms), errors, _ms(p.rows_per_step),
            _ms(p.step_ms), _ms(p.encoder_ms)]


def _c1_table(results: dict[str, ModeResult]) -> str:
    """Concurrency 1: in-process and client latency, and where the server says its time went."""
    header = ["mode", "texts", "in-process p50 ms", "Python client p50 ms", "p90 ms", "server total p50 ms",
              "server queue p50 ms", "server compute p50 ms", "perf_analyzer p50 ms",
              "client CPU ms (Python / perf_analyzer)", "in-process / client p50"]
    rows = []
    for m, r in results.items():
        if not r.c1_server_ms:
            continue
        client = [statistics.median(r.c1_inprocess_ms), *percentiles(r.c1_server_ms, (50, 90))]
        server = [statistics.median(x.server_ms[k] for x in r.c1_records) for k in (2, 0, 1)]
        cells = [f"{x:.1f}" for x in client + server]
        pa = r.c1_perf_analyzer
        cpu = f"{r.c1_loadgen_cpu_ms:.2f} / " + (f"{pa[1]:.2f}" if pa else "-")
        rows.append([m, str(len(r.c1_server_ms)), *cells, f"{pa[0]:.1f}" if pa else "-", cpu,
                     f"{r.c1_ratio:.2f} ({r.c1_client[0]})"])
    return _table(header, rows)


def tables(results: dict[str, ModeResult], scores: dict[str, float]) -> str:
    """The markdown tables of a run."""
    points = sorted(((w, c, m, p) for m, r in results.items() for (w, c), p in r.closed.items()),
                    key=lambda x: (WORKLOADS.index(x[0]), x[1]))
    closed = _table(["workload", "concurrency", "mode", *CELLS],
                    [[w, str(c), m, *_cells(p)] for w, c, m, p in points])
    opened = _table(["mode", "offered/s", *CELLS], [[m, f"{p.summary.offered_rate:.1f}", *_cells(p)]
                                                   for m, r in results.items() for p in r.open])
    c1 = _c1_table(results)
    rss = _table(["mode", "peak RSS MiB (VmHWM)"], [[m, f"{r.peak_rss_mib:.0f}"] for m, r in results.items()])
    score = _table(["ratio / figure", "value"], [[k, f"{v:.3g}"] for k, v in scores.items()])
    return (f"### Closed loop\n\n{closed}\n### Open loop (Poisson arrivals, sentences)\n\n{opened}\n"
            f"### Concurrency 1: server against in-process decoding (same texts)\n\n{c1}\n"
            f"### Peak memory of the server processes\n\n{rss}\n### Ratios\n\n{score}")


def run_plan(plan: Plan, bundle: Path, sources: list[str], log=print,
             out: Path | None = None) -> tuple[dict[str, float], str]:
    """Measure every mode of the plan (its record and charts into `out`); the ratios and the tables."""
    lengths = Lengths(bundle)
    workloads = {"sentences": [s for s in sources if lengths(s) <= lengths.max_len],
                 "mix": mixed_texts(sources, plan.mix_texts, lengths, plan.seed)}
    results = measure(plan, bundle, {w: workloads[w] for w in plan.workloads}, log)
    scores = ratios(results, 64 if 64 in plan.concurrencies else max(plan.concurrencies))
    if out is not None:
        record.write(out, "server", "server", from_results.server(results))
    return scores, tables(results, scores)


def run(quick: bool = False, bundle: Path = DEFAULT_BUNDLE, intra_op_threads: int = 0,
        sources: Path = HELD_OUT, out: Path | None = None) -> dict[str, float]:
    """The server benchmark (prints its tables); ratios and headline figures by name."""
    plan = replace(QUICK if quick else Plan(), intra_op_threads=intra_op_threads)
    scores, text = run_plan(plan, Path(bundle), held_out_sources(sources), log=_progress, out=out)
    print(text, flush=True)
    return scores


def _progress(message: str) -> None:
    """Progress lines on stderr (the tables go to stdout)."""
    print(message, file=sys.stderr, flush=True)
