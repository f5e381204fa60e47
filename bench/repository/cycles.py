"""Load/unload cycles of one model under load, through tritonclient.grpc's load_model and unload_model.

One explicit-mode server of two copies of a bundle: `steady` loaded at start, `cycled` not. The cycled
model is sized first (the RSS its first load adds, before any load runs; then unloaded). Then, while
`steady` gets closed-loop requests throughout and `cycled` gets requests throughout whether it is loaded
or not (the probe), each cycle loads `cycled`, sends it `cycle_requests` requests, unloads it and samples
the process's RSS once its memory has had `settle_s` to go. The first `warmup_cycles` cycles are the
process's warm-up under that load (its allocators and libraries reach their working size: the same traffic
with no cycle at all grows as much, `python -m bench.repository.cycles_only --control`); the growth is from
after the last of them (else after the first counted cycle) to after the last cycle, against the model's
size.

Every request is accounted for: `steady`'s and the cycle's own must all be answered OK; a probe request
may be refused (UNAVAILABLE or NOT_FOUND) only when it overlapped a window in which `cycled` was not
loaded (from the start of an unload call to the return of the next load call); anything else is lost.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import tritonclient.grpc as triton

from bench.common.loadgen import Record, closed_loop
from bench.common.serverproc import ServerProcess
from bench.common.translator import open_channel
from bench.repository.models import bundle_bytes, make_repository, repository_server
from bench.repository.plan import Plan
from bench.repository.traffic import Target, loop_until, model_client

STEADY, CYCLED = "steady", "cycled"
REFUSED = ("UNAVAILABLE", "NOT_FOUND")  # what a request for a model that is not loaded may get
API_TIMEOUT_S = 120.0  # one load_model / unload_model call
Window = tuple[float, float]  # (from, to) s on the run's clock: the cycled model not loaded


async def _cycled_requests(target: Target, texts: Sequence[str], n: int, t0: float) -> list[Record]:
    """n requests to the freshly loaded model, four at a time."""
    if n < 1:
        return []
    async with open_channel(target.address) as channel:
        return await closed_loop(model_client(channel, texts, target, t0).call, 4, n)


def _size(server: ServerProcess, client: triton.InferenceServerClient) -> float:
    """MiB of RSS the first load of the cycled model adds (the server then unloads it)."""
    before = server.rss_kib()
    client.load_model(CYCLED, client_timeout=API_TIMEOUT_S)
    added = (server.rss_kib() - before) / 1024
    client.unload_model(CYCLED, client_timeout=API_TIMEOUT_S)
    return added


async def _cycles(server: ServerProcess, client: triton.InferenceServerClient, texts: Sequence[str],
                  plan: Plan, max_output_tokens: int, beam_size: int, log: Callable[[str], None]
                  ) -> dict[str, Any]:
    """The cycles under load: the requests of each kind, the windows, the RSS samples and their times."""
    t0, stop = time.perf_counter(), asyncio.Event()
    steady, cycled = (Target(server.address, name, max_output_tokens, beam_size) for name in (STEADY, CYCLED))
    background = [asyncio.create_task(loop_until(stop, steady, texts, plan.steady_concurrency, t0)),
                  asyncio.create_task(loop_until(stop, cycled, texts, plan.probe_concurrency, t0))]
    windows: list[Window] = []
    samples: list[tuple[float, float]] = []  # (s on the clock, RSS MiB) after each counted unload
    warmup: list[tuple[float, float]] = []  # the same after each warm-up cycle
    own: list[Record] = []
    load_s: list[float] = []
    unloaded_since = 0.0  # the cycled model is not loaded from the start
    try:
        for k in range(-plan.warmup_cycles, plan.cycles):
            start = time.perf_counter()
            await asyncio.to_thread(client.load_model, CYCLED, client_timeout=API_TIMEOUT_S)
            loaded = time.perf_counter()
            windows.append((unloaded_since, loaded - t0))
            load_s.append(loaded - start)
            own += await _cycled_requests(cycled, texts, plan.cycle_requests, t0)
            unloaded_since = time.perf_counter() - t0
            await asyncio.to_thread(client.unload_model, CYCLED, client_timeout=API_TIMEOUT_S)
            await asyncio.sleep(plan.settle_s)
            sample = (time.perf_counter() - t0, server.rss_kib() / 1024)
            (samples if k >= 0 else warmup).append(sample)
            what = f"cycle {k + 1}/{plan.cycles}" if k >= 0 else f"warm-up cycle {k + plan.warmup_cycles + 1}"
            log(f"  {what}: loaded in {load_s[-1]:.2f} s, RSS after the unload {sample[1]:.1f} MiB")
    finally:
        stop.set()
        steady_records, probe_records = await asyncio.gather(*background)
    windows.append((unloaded_since, float("inf")))
    return {"steady": steady_records, "probe": probe_records, "own": own, "windows": windows,
            "samples": samples, "warmup_samples": warmup, "load_s": load_s}


def expected_refusal(record: Record, windows: Sequence[Window]) -> bool:
    """A refusal of a request that overlapped a window in which the cycled model was not loaded."""
    return record.code in REFUSED and any(record.start <= hi and record.end >= lo for lo, hi in windows)


def account(kinds: dict[str, list[Record]], windows: Sequence[Window], may_refuse: Sequence[str]
            ) -> dict[str, dict[str, Any]]:
    """Per kind of request: sent, answered OK, refused while unloaded (kinds in may_refuse only), lost
    (every other failure)."""
    out = {}
    for kind, records in kinds.items():
        ok = sum(r.code == "OK" for r in records)
        refused = sum(expected_refusal(r, windows) for r in records) if kind in may_refuse else 0
        out[kind] = {"sent": len(records), "answered": ok, "refused_while_unloaded": refused,
                     "lost": len(records) - ok - refused,
                     "errors": dict(Counter(r.code for r in records if r.code != "OK"))}
    return out


def run(bundle: Path, work: Path, texts: Sequence[str], plan: Plan, max_output_tokens: int = 0,
        log: Callable[[str], None] = print, beam_size: int = 0) -> dict[str, Any]:
    """Size the cycled model, run the cycles under load (every request with beam_size; 0 = the model's
    default); the figures and the RSS chart's data."""
    folders = make_repository(work, bundle, (STEADY, CYCLED))
    with repository_server(work, "explicit", [STEADY], plan.server_args()) as server:
        client = _triton(server)
        try:
            model_mib = _size(server, client)
            started = server.rss_kib() / 1024
            log(f"  the cycled model adds {model_mib:.1f} MiB when it loads; RSS {started:.1f} MiB")
            got = asyncio.run(_cycles(server, client, texts, plan, max_output_tokens, beam_size, log))
            index = {m.name: m.state for m in client.get_model_repository_index().models}
        finally:
            client.close()
        peak = server.peak_rss_kib() / 1024
    kinds = {"steady": got["steady"], "cycled": got["own"], "probe": got["probe"]}
    counts = account(kinds, got["windows"], ("probe",))
    warm = [v for _, v in got["warmup_samples"]]
    rss = [v for _, v in got["samples"]]
    base = warm[-1] if warm else rss[0]  # after the last warm-up cycle, else after the first counted one
    growth = rss[-1] - base
    ends = sorted(r.end for records in kinds.values() for r in records)
    every = [*got["warmup_samples"], *got["samples"]]
    sent_by = [sum(end <= at for end in ends) for at, _ in every]
    chart = {"title": f"{plan.cycles} load/unload cycles of one model under load: server RSS",
             "label": f"RSS after each unload ({len(warm) or 'the first'} warm-up cycles shaded)",
             "warmup_requests": sent_by[max(0, len(warm) - 1)],
             "started_mib": round(started, 1), "peak_mib": round(peak, 1),
             "samples": [[n, round(v, 1)] for n, (_, v) in zip(sent_by, every, strict=True)]}
    return {"bundle": str(bundle), "cycles": plan.cycles, "beam_size": beam_size, "model_mib": model_mib,
            "model_bytes_on_disk": bundle_bytes(folders[CYCLED]), "rss_started_mib": started,
            "warmup_cycles": len(warm), "rss_after_warmup_mib": base, "rss_warmup_samples_mib": warm,
            "rss_growth_from_first_cycle_mib": rss[-1] - (warm or rss)[0],
            "rss_after_first_mib": rss[0], "rss_after_last_mib": rss[-1], "rss_peak_mib": peak,
            "rss_growth_mib": growth, "rss_growth_last_half_mib": rss[-1] - rss[len(rss) // 2],
            "rss_growth_pct_of_model": 100 * growth / model_mib if model_mib > 0
            else float("nan"), "rss_samples_mib": rss, "load_s": got["load_s"], "final_index": index,
            "requests": counts, "requests_sent": sum(c["sent"] for c in counts.values()),
            "requests_answered": sum(c["answered"] for c in counts.values()),
            "requests_refused_while_unloaded": sum(c["refused_while_unloaded"] for c in counts.values()),
            "requests_lost": sum(c["lost"] for c in counts.values()), "chart": chart}


def _triton(server: ServerProcess) -> triton.InferenceServerClient:
    """tritonclient.grpc's client of the server."""
    return triton.InferenceServerClient(server.address)
