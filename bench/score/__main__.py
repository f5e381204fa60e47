"""Score beside translation on a real server: its peak memory against translating the same sources, and the
latency of one-sentence translations while it runs, measured side by side in one run.

    python -m bench.score [--bundle DIR] [--pairs 32] [--target-tokens 200]

The bundle is the opus-mt-shaped one bench.marian imported when there is one (bench/repository/models.py
`large_bundle`), else the default model. Every server runs with the default flags (continuous batching):

1. Targets: the server's greedy translations of `--pairs` sources, at most `--target-tokens` tokens, their
   texts cut to about that many tokens again (a text can tokenize to more tokens than it was decoded with).
2. Memory: a fresh server translates the sources greedily (`--target-tokens` at most, one request), another
   fresh server scores the (source, target) pairs (one request); each one's peak resident set above what
   it held before the call (the peak is reset through /proc/<pid>/clear_refs, else sampled every 5 ms).
   The goal: Score's growth at most 1.2x translation's.
3. Latency: on one server, `--users` users send one-sentence translations (greedy, at most
   `--sentence-tokens` tokens) `--requests` times, alone, then again while the same Score runs back to
   back; the p99 of each and their ratio (goal: at most 2). Health (grpc.health.v1) is polled every
   0.2 s throughout: the server must stay SERVING, and every call must succeed.

The last line printed is a JSON object of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.common.loadgen import percentiles
from bench.common.serverproc import ServerProcess, proc_status_kib
from bench.common.translator import closed_loop_at, open_channel
from bench.common.workload import DEFAULT_BUNDLE, REPO_ROOT
from bench.repository.models import large_bundle
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc

TIMEOUT_S = 600.0
SAMPLE = REPO_ROOT / "artifacts" / "default" / "test_sample.tsv"


def sources_for(bundle: Path, n: int) -> list[str]:
    """n source sentences for the bundle: the Marian builder's for its opus-mt-shaped model, else the
    default model's test sample."""
    if bundle != DEFAULT_BUNDLE and (bundle.parent / "hf").is_dir():
        from bench.families.marian import FULL
        from bench.families.text import source_texts

        return source_texts(FULL, n)
    return [line.split("\t")[0] for line in SAMPLE.read_text(encoding="utf-8").splitlines()[:n]]


async def translate(address: str, texts: Sequence[str], tokens: int) -> list[pb.TranslationResult]:
    """Greedy translations of texts in one request, at most `tokens` tokens each."""
    async with open_channel(address) as channel:
        request = pb.TranslateRequest(texts=list(texts), options=pb.TranslateOptions(
            beam_size=1, max_output_tokens=tokens))
        return list((await pb_grpc.TranslatorStub(channel).Translate(request, timeout=TIMEOUT_S)).results)


async def score(address: str, sources: Sequence[str], targets: Sequence[str]) -> list[pb.ScoreResult]:
    """The scores of the pairs, in one request."""
    async with open_channel(address) as channel:
        request = pb.ScoreRequest(sources=list(sources), targets=list(targets))
        return list((await pb_grpc.TranslatorStub(channel).Score(request, timeout=TIMEOUT_S)).results)


def cut(texts: Sequence[str], tokens: Sequence[int], most: int) -> list[str]:
    """Each text cut to about `most` tokens (a text of n tokens keeps the share most / n of its words): a
    translation's text can tokenize again to more tokens than it was decoded with."""
    out = []
    for text, n in zip(texts, tokens, strict=True):
        words = text.split()
        out.append(" ".join(words[: max(1, len(words) * most // n)]) if n > most else text)
    return out


class PeakRss:
    """The peak resident set of a process during a block, above its resident set at the start (KiB)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.start, self.peak = pid, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self.reset = False

    def __enter__(self) -> PeakRss:
        self.start = proc_status_kib(self.pid, "VmRSS")
        with contextlib.suppress(OSError):  # resets VmHWM to the current resident set
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            self.reset = True
        self._thread.start()
        return self

    def _sample(self) -> None:
        """Sample VmRSS every 5 ms (the fallback where the peak cannot be reset)."""
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, proc_status_kib(self.pid, "VmRSS"))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.reset:
            self.peak = max(self.peak, proc_status_kib(self.pid, "VmHWM"))

    @property
    def growth_mib(self) -> float:
        """Peak above the start, MiB."""
        return (self.peak - self.start) / 1024


def peak_growth(bundle: Path, call: Callable[[str], object]) -> float:
    """MiB a fresh server's resident set peaks above its level before `call(address)` (run to the end)."""
    with ServerProcess(bundle, "continuous") as server, PeakRss(server.pid) as peak:
        asyncio.run(call(server.address))  # type: ignore[arg-type]
    return peak.growth_mib


async def health_poll(address: str, stop: asyncio.Event, seen: list[str]) -> None:
    """Record the server's health status every 0.2 s until stopped."""
    async with open_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while not stop.is_set():
            try:
                answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5.0)
                seen.append(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))
            except aio.AioRpcError as exc:
                seen.append(exc.code().name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)


@dataclass
class Latency:
    """One latency run: the translations' percentiles, failures, health and the Score calls' seconds."""

    p50_ms: float
    p99_ms: float
    failed: int
    not_serving: int
    health_checks: int
    score_calls_s: list[float]


async def latency(address: str, sentences: Sequence[str], users: int, requests: int, tokens: int,
                  pairs: tuple[Sequence[str], Sequence[str]] | None) -> Latency:
    """p99 of the one-sentence translations, with Score calls back to back beside them when `pairs`."""
    stop, health = asyncio.Event(), []
    scores: list[float] = []

    async def scoring() -> None:
        """Score the pairs again and again until the translations are done."""
        while not stop.is_set():
            start = time.perf_counter()
            await score(address, *pairs)  # type: ignore[misc]
            scores.append(time.perf_counter() - start)

    background = [asyncio.ensure_future(health_poll(address, stop, health))]
    if pairs is not None:
        background.append(asyncio.ensure_future(scoring()))
        await asyncio.sleep(1.0)  # the Score is under way when the translations start
    records = await closed_loop_at(address, sentences, users, requests, max_output_tokens=tokens, beam_size=1)
    stop.set()
    await asyncio.gather(*background)
    failed = [r.code for r in records if r.code != "OK"]
    p50, p99 = percentiles([r.latency * 1e3 for r in records if r.code == "OK"], (50, 99))
    return Latency(round(p50, 1), round(p99, 1), len(failed), sum(1 for s in health if s != "SERVING"),
                   len(health), [round(s, 1) for s in scores])


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(prog="python -m bench.score", description=__doc__.splitlines()[0])
    p.add_argument("--bundle", type=Path, default=None, help="default: the opus-mt-shaped bundle if built")
    p.add_argument("--pairs", type=int, default=32)
    p.add_argument("--target-tokens", type=int, default=200)
    p.add_argument("--users", type=int, default=4)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--sentence-tokens", type=int, default=40)
    a = p.parse_args(argv)
    bundle = a.bundle or large_bundle() or DEFAULT_BUNDLE
    sources = sources_for(bundle, a.pairs + a.users * 4)
    pair_sources, sentences = sources[: a.pairs], sources[a.pairs:]
    with ServerProcess(bundle, "continuous") as server:
        made = asyncio.run(translate(server.address, pair_sources, a.target_tokens))
        targets = [r.hypotheses[0].text for r in made]
        scored = asyncio.run(score(server.address, pair_sources, targets))
        targets = cut(targets, [len(r.token_ids) for r in scored], a.target_tokens)
        scored = asyncio.run(score(server.address, pair_sources, targets))
        target_tokens = sum(len(r.token_ids) for r in scored) / len(scored)
        alone = asyncio.run(latency(server.address, sentences, a.users, a.requests, a.sentence_tokens, None))
        beside = asyncio.run(latency(server.address, sentences, a.users, a.requests, a.sentence_tokens,
                                     (pair_sources, targets)))
    translated_mib = peak_growth(bundle, lambda address: translate(address, pair_sources, a.target_tokens))
    scored_mib = peak_growth(bundle, lambda address: score(address, pair_sources, targets))
    memory_ratio = scored_mib / translated_mib if translated_mib > 0 else math.nan
    p99_ratio = beside.p99_ms / alone.p99_ms
    print(f"bundle {bundle}: {a.pairs} pairs, {target_tokens:.0f} target tokens a pair (eos included)")
    print(f"peak RSS growth: translate {translated_mib:.0f} MiB, score {scored_mib:.0f} MiB "
          f"(ratio {memory_ratio:.2f}, goal <= 1.2)")
    print(f"one-sentence translations, {a.users} users x {a.requests}: p99 alone {alone.p99_ms} ms, "
          f"beside Score {beside.p99_ms} ms (ratio {p99_ratio:.2f}, goal <= 2); the Score calls beside "
          f"them took {beside.score_calls_s} s")
    print(f"health: {alone.not_serving + beside.not_serving} of {alone.health_checks + beside.health_checks} "
          f"checks not SERVING; failed calls: {alone.failed + beside.failed}")
    print(json.dumps({"bundle": str(bundle), "pairs": a.pairs, "target_tokens": round(target_tokens, 1),
                      "translate_peak_mib": round(translated_mib, 1), "score_peak_mib": round(scored_mib, 1),
                      "score_memory_ratio": round(memory_ratio, 3), "alone": asdict(alone),
                      "beside": asdict(beside), "p99_ratio": round(p99_ratio, 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
