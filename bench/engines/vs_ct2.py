"""The real server against CTranslate2 in process, on the same texts: what a user choosing an engine sees.

    python -m bench.engines.vs_ct2 [--quick] [--checkpoint ...] [--bundle ...] [--threads N]

The server runs with its default flags (continuous batching) on 127.0.0.1 and is loaded by two
clients in turn: bench/common/loadgen.py (closed loop, unary Translate, in this process) and Triton's
perf_analyzer (C++, KServe v2 ModelInfer, count windows; `make perf-analyzer-tools` installs it;
skipped when missing). Each client's own CPU time per request is measured, and the server's figure
at each concurrency is the one of the client that takes less CPU there. CTranslate2 (the
checkpoint's weights through bench/engines/ct2.py) and the service's own engine (`Runner.translate`,
static batches) each decode the same held-out sentences in a process of their own
(bench/engines/process.py `EngineProcess`). Concurrency 1 is compared with batch 1, concurrency 64 with
batches of the server's `--max-batch-size` (32: the most rows its batch takes). The points are
interleaved over `repeats` rounds and the medians kept.

Ratios (higher is better): service_vs_ct2_c1 (server at concurrency 1 over CTranslate2 at batch 1),
service_vs_ct2_c64 (server at 64 over CTranslate2 at batch 32), server_c64_vs_inprocess (server at 64
over the in-process engine at batch 32: what the server's own layers cost), server_c1_vs_inprocess_b1
(the same at concurrency 1 against batch 1). The clients share the machine's cores with the server, as
a client on the same host would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tokenizers import Tokenizer

from bench.common.loadgen import summarize
from bench.common.serverproc import ServerProcess
from bench.common.translator import closed_loop_at, wait_ready
from bench.common.workload import DEFAULT_BUNDLE, HELD_OUT, PAUSE_S, held_out_sources
from bench.engines.ct2 import checkpoint_vocab, convert
from bench.engines.greedy import build
from bench.engines.process import EngineProcess
from bench.server import perf_analyzer
from service.config import ServerConfig
from service.runtime.model.bundle import load_bundle

DEFAULT_CHECKPOINT = DEFAULT_BUNDLE.parent / "model.pt"
CLIENTS = ("loadgen", "perf_analyzer")


def loadgen_load(address: str, texts: list[str], concurrency: int) -> tuple[float, float]:
    """The closed loop over `texts`: (texts/s, its CPU ms per request in this process)."""
    cpu0 = time.process_time()
    throughput = summarize(asyncio.run(closed_loop_at(address, texts, concurrency, len(texts)))).throughput
    return throughput, 1e3 * (time.process_time() - cpu0) / len(texts)


def perf_analyzer_load(address: str, data: Path, concurrency: int, requests: int) -> tuple[float, float]:
    """perf_analyzer at one concurrency, windows of `requests`: (texts/s, its CPU ms per request)."""
    row, cpu_ms = perf_analyzer.measure_with_cpu(address, data, concurrency, requests, data.parent,
                                                 max_trials=6)
    return row.throughput, cpu_ms


def server_figure(medians: dict[str, float], clients: tuple[str, ...], concurrency: int) -> tuple[str, float]:
    """(client, the server's sentences/s at `concurrency`) for the client with the least CPU per request."""
    chosen = perf_analyzer.cheaper_client({c: medians[f"cpu_server_c{concurrency}_{c}"] for c in clients})
    return chosen, medians[f"server_c{concurrency}_{chosen}"]


def run(quick: bool = False, checkpoint: Path = DEFAULT_CHECKPOINT, bundle: Path = DEFAULT_BUNDLE,
        threads: int = 2, split: Path = HELD_OUT, n_texts: int | None = None, repeats: int | None = None,
        log=print) -> dict[str, float]:
    """Measure the three throughputs at both loads; returns the ratios and the figures (sentences/s)."""
    texts = held_out_sources(split)[: n_texts or (128 if quick else 500)]
    repeats = repeats or (3 if quick else 5)
    b = load_bundle(bundle)
    tok = Tokenizer.from_file(str(b.tokenizer_path))
    sources = [e.ids + [b.special.eos] for e in tok.encode_batch(texts, add_special_tokens=False)]
    batch = ServerConfig().max_batch_size
    c1_texts = texts[: max(1, len(texts) * 3 // 8)]
    clients = CLIENTS if perf_analyzer.binary().exists() else CLIENTS[:1]
    if len(clients) == 1:
        log(f"  {perf_analyzer.binary()} is missing (`make perf-analyzer-tools`): the server is loaded "
            "by bench/common/loadgen.py only")
    figures: dict[str, list[float]] = {}  # name: sentences/s per round; "cpu_<name>": client CPU ms/request
    with tempfile.TemporaryDirectory() as work, contextlib.ExitStack() as stack:
        vocab = checkpoint_vocab(checkpoint)
        ct2_model = convert(checkpoint, Path(work) / "ct2", vocab)
        ct2 = stack.enter_context(contextlib.closing(
            EngineProcess("ctranslate2", checkpoint, bundle, threads, ct2_model, vocab, factory=build)))
        ort = stack.enter_context(contextlib.closing(
            EngineProcess("onnxruntime", checkpoint, bundle, threads, ct2_model, vocab, factory=build)))
        server = stack.enter_context(ServerProcess(bundle, "continuous"))
        asyncio.run(wait_ready(server.address))
        asyncio.run(closed_loop_at(server.address, texts, 8, 64))  # warm-up
        ct2.time(sources[:8], 1)
        ort.time(sources[:64], batch)
        data = {c: perf_analyzer.write_input_data(t, Path(work) / f"c{c}.json")
                for c, t in ((1, c1_texts), (64, texts))}
        points: dict[str, Callable[[], float | tuple[float, float]]] = {  # name: () -> sentences/s[, cpu]
            "ct2_b1": lambda: len(c1_texts) / ct2.time(sources[: len(c1_texts)], 1)[0],
            "inprocess_b1": lambda: len(c1_texts) / ort.time(sources[: len(c1_texts)], 1)[0],
            "server_c1_loadgen": lambda: loadgen_load(server.address, c1_texts, 1),
            "server_c1_perf_analyzer": lambda: perf_analyzer_load(server.address, data[1], 1, len(c1_texts)),
            "ct2_b32": lambda: len(sources) / ct2.time(sources, batch)[0],
            "inprocess_b32": lambda: len(sources) / ort.time(sources, batch)[0],
            "server_c64_loadgen": lambda: loadgen_load(server.address, texts, 64),
            "server_c64_perf_analyzer": lambda: perf_analyzer_load(server.address, data[64], 64, len(texts)),
        }
        points = {k: v for k, v in points.items() if not k.endswith("perf_analyzer") or len(clients) == 2}
        for r in range(repeats):
            log(f"  round {r + 1}/{repeats}")
            for name, measure in points.items():
                time.sleep(PAUSE_S)  # the previous engine's idle threads stop spinning
                got = measure()
                speed, cpu = got if isinstance(got, tuple) else (got, None)
                figures.setdefault(name, []).append(speed)
                if cpu is not None:
                    figures.setdefault(f"cpu_{name}", []).append(cpu)
    med = {k: statistics.median(v) for k, v in figures.items()}
    for k, v in med.items():
        unit = "client CPU ms per request" if k.startswith("cpu_") else "sentences/s"
        log(f"  {k}: {v:.2f} {unit} (runs: {', '.join(f'{x:.3g}' for x in figures[k])})")
    for c in (1, 64):
        chosen, med[f"server_c{c}"] = server_figure(med, clients, c)
        log(f"  server at concurrency {c}: loaded by {chosen} (the client with less CPU per request)")
    return {
        "service_vs_ct2_c1": med["server_c1"] / med["ct2_b1"],
        "service_vs_ct2_c64": med["server_c64"] / med["ct2_b32"],
        "server_c64_vs_inprocess": med["server_c64"] / med["inprocess_b32"],
        "server_c1_vs_inprocess_b1": med["server_c1"] / med["inprocess_b1"],
        **{k.removeprefix("cpu_") + "_client_cpu_ms" if k.startswith("cpu_") else f"{k}_sentences_per_s": v
           for k, v in med.items()},
    }


def main(argv: list[str] | None = None) -> int:
    """CLI: print the figures, then one JSON line of the ratios."""
    ap = argparse.ArgumentParser(prog="python -m bench.engines.vs_ct2", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer texts and rounds")
    ap.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    ap.add_argument("--threads", type=int, default=2, help="threads of both in-process engines")
    a = ap.parse_args(argv)
    out = run(a.quick, a.checkpoint, a.bundle, a.threads)
    print(json.dumps({k: round(v, 3) for k, v in out.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
