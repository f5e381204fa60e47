"""The per-family benchmark's server phase: the real server, greedy, under a closed loop against CTranslate2
of the same precision in process on the same texts, interleaved; and the server's tokens against
CTranslate2's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from bench.common.loadgen import Record, summarize
from bench.common.translator import TIMEOUT_S, closed_loop_at, open_channel
from bench.common.workload import PAUSE_S
from bench.engines.process import EngineProcess, Point
from bench.families.engines import CT2, CT2_INT8, ORT, ORT_INT8, same, steps
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc

SERVER, CT2_TEXT = "server", "ctranslate2 text"
SERVER_INT8, CT2_TEXT_INT8 = "server int8", "ctranslate2 int8 text"
SERVERS = {SERVER: (ORT, CT2_TEXT), SERVER_INT8: (ORT_INT8, CT2_TEXT_INT8)}  # -> its engine, its reference
TEXT_ENGINES = {CT2_TEXT: CT2, CT2_TEXT_INT8: CT2_INT8}  # CTranslate2 in process on texts -> its engine


def language_options(languages: tuple[str, str] | None) -> dict[str, Any]:
    """The TranslateOptions fields naming a many-to-many model's languages ({} for one pair)."""
    return {} if languages is None else {"source_language": languages[0], "target_language": languages[1]}


async def server_tokens(address: str, texts: list[str], new_tokens: int, extra: Mapping[str, Any],
                        concurrency: int = 8) -> list[list[int]]:
    """The server's best hypothesis (ids) for each text, `concurrency` requests at a time."""
    gate = asyncio.Semaphore(concurrency)
    options = pb.TranslateOptions(max_output_tokens=new_tokens, beam_size=1, **extra)  # greedy, as CT2
    async with open_channel(address) as channel:
        stub = pb_grpc.TranslatorStub(channel)

        async def one(text: str) -> list[int]:
            """One unary Translate."""
            async with gate:
                request = pb.TranslateRequest(texts=[text], options=options)
                reply = await stub.Translate(request, timeout=TIMEOUT_S)
            return list(reply.results[0].hypotheses[0].token_ids)
        return list(await asyncio.gather(*(one(t) for t in texts)))


def server_point(name: str, records: list[Record], concurrency: int, new_tokens: int) -> Point:
    """A closed-loop run as the Point of engine `name` (every request answered, or an error)."""
    summary = summarize(records)
    if summary.errors:
        raise RuntimeError(f"the server failed requests at concurrency {concurrency}: {summary.errors}")
    tokens = sum(steps([0] * r.out_tokens, new_tokens) for r in records)
    return Point(name, concurrency, summary.ok, tokens, summary.elapsed_s)


def compare_server(name: str, address: str, ct2: EngineProcess, texts: list[str], new_tokens: int, batch: int,
                   single: int, repeats: int, free: int,
                   languages: tuple[str, str] | None = None) -> tuple[list[list[Point]], int]:
    """Server `name` (greedy closed loop at concurrency 1 on the first `single` texts and at `batch` on all)
    against CTranslate2 in process (static batches of the same size), `repeats` interleaved runs each:
    the runs of each (engine, concurrency), and on how many texts the server's tokens equal CTranslate2's
    (the first `free`)."""
    extra = language_options(languages)
    served = asyncio.run(server_tokens(address, texts, new_tokens, extra))  # also the warm-up
    _, theirs = ct2.time(texts, batch)
    identical = sum(same(s, t, free) for s, (t, _) in zip(served, theirs, strict=True))
    reference = SERVERS[name][1]
    out = []
    for c in (1, batch):
        sample = texts[:single] if c == 1 else texts
        runs: dict[str, list[Point]] = {name: [], reference: []}
        for _ in range(repeats):
            time.sleep(PAUSE_S)
            records = asyncio.run(closed_loop_at(address, sample, c, len(sample), beam_size=1, options=extra,
                                                 max_output_tokens=new_tokens))
            runs[name].append(server_point(name, records, c, new_tokens))
            time.sleep(PAUSE_S)
            seconds, outputs = ct2.time(sample, c)
            tokens = sum(steps(t, new_tokens) for t, _ in outputs)
            runs[reference].append(Point(reference, c, len(sample), tokens, seconds))
        out += runs.values()
    return out, identical
