"""A/B of the default provider request against an explicit CPU one, in one process, interleaved.

`make serve` asks for `CUDAExecutionProvider,CPUExecutionProvider`; on a machine without CUDA the
runner then asks ONNX Runtime for the CPU alone with the CPU's session options, which is what
`--providers CPUExecutionProvider` gives. This measures that the two run at the same speed: greedy
decoding of held-out sentences in static batches, each arm timed `pairs` times in turn.

    python -m bench.engines.providers [--pairs 3] [--batches 1 32]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from bench.common.workload import DEFAULT_BUNDLE, HELD_OUT, held_out_sources
from service.domain.types import DecodeOptions
from service.runtime.model.sessions import CPU
from service.runtime.runner import Runner


def sentences_per_s(runner: Runner, ids: list[list[int]], batch: int) -> float:
    """Throughput of greedy decoding `ids` in static batches of `batch`."""
    options = DecodeOptions(max_output_tokens=runner.max_len - 1)
    start = time.perf_counter()
    for i in range(0, len(ids), batch):
        runner.translate(ids[i : i + batch], options, max_rows=batch)
    return len(ids) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    """CLI: print each pair, then one JSON line of default / explicit-CPU ratios (median per batch)."""
    ap = argparse.ArgumentParser(prog="python -m bench.engines.providers", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    arms = {"default": Runner(DEFAULT_BUNDLE, intra_op_threads=args.threads),
            "cpu": Runner(DEFAULT_BUNDLE, providers=[CPU], intra_op_threads=args.threads)}
    texts = held_out_sources(HELD_OUT)
    ratios = {}
    for batch in args.batches:
        ids = arms["cpu"].encode_texts(texts[: 64 if batch == 1 else 8 * batch])
        for runner in arms.values():  # warm-up
            sentences_per_s(runner, ids[:batch], batch)
        rates: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(args.pairs):
            for name, runner in arms.items():
                rates[name].append(sentences_per_s(runner, ids, batch))
        print(f"batch {batch}: " + ", ".join(f"{n} {' / '.join(f'{r:.0f}' for r in v)} sentences/s"
                                             for n, v in rates.items()))
        ratios[f"default_vs_cpu_b{batch}"] = round(
            statistics.median(rates["default"]) / statistics.median(rates["cpu"]), 3)
    print(json.dumps({"providers": arms["default"].providers, **ratios}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
