"""Score throughput against greedy translation throughput, on the same pairs, in one run.

`python -m bench.engines.scoring [--bundle DIR] [--pairs N] [--rows R] [--repeat K]` (`make bench-scoring`):
takes
N sources of the default model's test sample, translates them greedily (Runner.translate, R rows per
batch), then scores each source against its greedy output (Runner.score, R pairs per run) in every
scoring mode the bundle's decoder takes (service/runtime/decoding/scoring.py: "windows" on a concatenated
cache, "steps" on both), K times each, alternating, and prints pairs per second of each and the ratio
score / greedy (the issue's goal: >= 1). It checks on the way that the score of each greedy output is the
log_prob the search reported (for outputs that ended with eos, and those cut at the maximum length, which
Score takes without the end token). In process, CPU provider unless --provider says otherwise; the best
of the K runs counts.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from service.domain.types import DecodeOptions
from service.runtime.runner import Runner

DEFAULT_BUNDLE = Path("artifacts/default/bundle")
SAMPLE = Path("artifacts/default/test_sample.tsv")


def sources(n: int) -> list[str]:
    """The first n sources of the default model's test sample."""
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines[:n]]


def best_rate(fn, pairs: int, repeat: int) -> float:
    """Pairs per second of the fastest of `repeat` calls of fn."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return pairs / best


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(prog="python -m bench.engines.scoring", description=__doc__.splitlines()[0])
    p.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    p.add_argument("--texts", type=Path, default=None, help="a file of sources, one a line (default: the "
                   "default model's test sample)")
    p.add_argument("--pairs", type=int, default=128)
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--provider", default="CPUExecutionProvider")
    p.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0: its default)")
    args = p.parse_args(argv)
    runner = Runner(args.bundle, providers=[args.provider], intra_op_threads=args.threads)
    texts = (args.texts.read_text(encoding="utf-8").splitlines()[: args.pairs] if args.texts
             else sources(args.pairs))
    options = DecodeOptions(beam_size=1)
    hyps = [h[0] for h in runner.translate(texts, options, max_rows=args.rows)]
    targets = [h.text for h in hyps]
    requests = runner.score_requests(texts, targets)
    checked = worst = 0
    for h, r in zip(hyps, runner.new_scorer(args.rows).score(requests), strict=True):
        body = r.target_ids[:-1] if r.end_token_scored else r.target_ids  # a cut one: no eos scored
        if body == h.tokens and r.end_token_scored == (h.finish_reason == "eos"):
            checked, worst = checked + 1, max(worst, abs(r.log_prob - h.log_prob))
    modes = ["steps", *(["windows"] if runner.kv_cache == "concat" else [])]
    scorers = {m: runner.new_scorer(args.rows, m) for m in modes}
    rates: dict[str, float] = {}
    for _ in range(args.repeat):  # alternate, so that drift of the machine hits every one alike
        r = best_rate(lambda: runner.translate(texts, options, max_rows=args.rows), len(texts), 1)
        rates["greedy"] = max(rates.get("greedy", 0.0), r)
        for m, scorer in scorers.items():
            r = best_rate(lambda s=scorer: s.score(requests), len(texts), 1)
            rates[f"score/{m}"] = max(rates.get(f"score/{m}", 0.0), r)
    tokens = sum(len(r.target) for r in requests) / len(requests)
    print(f"bundle {args.bundle} ({runner.kv_cache} cache, {runner.provider}), {len(texts)} pairs, "
          f"{args.rows} rows, {tokens:.1f} tokens scored a pair, best of {args.repeat}")
    print(f"score of the greedy output vs its log_prob: {checked} pairs checked, max |diff| {worst:.2e}")
    for name, rate in rates.items():
        ratio = "" if name == "greedy" else f"  ratio to greedy {rate / rates['greedy']:.2f}"
        print(f"  {name:12s} {rate:8.1f} pairs/s{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
