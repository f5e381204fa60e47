"""An engine in a process of its own, timed there: the `EngineProcess` every engine comparison uses (the
greedy engines, bench/engines/vs_ct2.py, bench/families), and the `Point` it measures."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

Decode = Callable[[list[list[int]]], list[list[int]]]  # a batch of source ids -> generated ids


@dataclass
class Point:
    """One measurement: an engine at a batch size."""

    engine: str
    batch: int
    sentences: int
    tokens: int
    seconds: float

    @property
    def sentences_per_s(self) -> float:
        """Throughput in sentences per second."""
        return self.sentences / self.seconds

    @property
    def tokens_per_s(self) -> float:
        """Throughput in generated tokens per second."""
        return self.tokens / self.seconds


def time_engine(decode: Decode, sources: list[list[int]], batch: int) -> tuple[float, list[list[int]]]:
    """Seconds to decode all sources in static batches of `batch`, and the outputs."""
    out: list[list[int]] = []
    start = time.perf_counter()
    for i in range(0, len(sources), batch):
        out += decode(sources[i : i + batch])
    return time.perf_counter() - start, out


def _serve(conn: Connection, factory: Callable[..., Decode], *engine: Any) -> None:
    """Child process: build one engine (`factory(*engine)`), then answer (sources, batch) with
    (seconds, outputs)."""
    decode = factory(*engine)
    conn.send("ready")
    while (job := conn.recv()) is not None:
        conn.send(time_engine(decode, *job))


class EngineProcess:
    """One engine in a process of its own.

    Engines that share a process slow each other down: PyTorch's and CTranslate2's OpenMP
    runtimes fight over the cores (CTranslate2 ran 14x slower at batch 1 once PyTorch had run an
    op in the same process), and ORT's spinning pool would do the same. The processes take turns:
    only one decodes at a time.
    """

    def __init__(self, *engine: Any, factory: Callable[..., Decode]) -> None:
        """Start the child for `factory(*engine)` (a module-level function: the child imports it)
        and wait until it is ready."""
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, factory, *engine), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(600) or self.conn.recv() != "ready":
            self.close()
            raise RuntimeError(f"engine {engine[0]} did not start")

    def time(self, sources: list[list[int]], batch: int) -> tuple[float, list[list[int]]]:
        """Seconds to decode sources in static batches in the child, and the outputs."""
        self.conn.send((sources, batch))
        return self.conn.recv()

    def close(self) -> None:
        """Stop the child."""
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
