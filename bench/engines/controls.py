"""What controlled decoding costs a decode step: a batch of rows with no option against the same batch with
repetition penalty and no-repeat n-grams on every row (and with seeded sampling), in process.

    python -m bench.engines.controls [--quick] [--bundle DIR ...] [--batch 32] [--new-tokens 32] [--rounds 5]

For each bundle (default: the shipped default model, and the opus-mt-shaped bundle bench/families/marian.py
makes when it exists), one DecodeBatch of `--batch` rows, each a held-out sentence (repeated), is decoded
to the end with every configuration in turn, rounds interleaved. A row leaves at eos, so the
configurations may decode different numbers of rows per step: the cost is the time of the decoder runs
divided by the rows they advanced (row-steps), median over rounds. Ratios (lower is better):
`{config}_vs_plain` per bundle; the issue's goal is penalties_vs_plain <= 1.10 at batch 32.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench.common.workload import DEFAULT_BUNDLE, REPO_ROOT, held_out_sources
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner

MARIAN_RUNS = REPO_ROOT / "runs" / "bench-marian"
OPUS_BUNDLES = (MARIAN_RUNS / "controls", MARIAN_RUNS / "tied")  # the first that exists
CONFIGS = {
    "plain": {},
    "penalties": {"repetition_penalty": 1.2, "no_repeat_ngram_size": 3},
    "sampling": {"temperature": 0.8, "top_p": 0.9, "seed": 1},
}


def row_step_seconds(runner: Runner, texts: list[str], options: DecodeOptions) -> tuple[float, int]:
    """Seconds per row-step of one batch decoded to the end, and the row-steps it took."""
    batch = runner.new_batch(len(texts))
    batch.add([runner.make_request(t, options) for t in texts])
    spent, row_steps = 0.0, 0
    for _ in range(options.max_output_tokens + 1):
        if not len(batch):
            break
        rows = batch.used_rows
        start = time.perf_counter()
        batch.step()
        spent += time.perf_counter() - start
        row_steps += rows
    return spent / max(row_steps, 1), row_steps


def measure(bundle: Path, batch: int, new_tokens: int, rounds: int, log=print) -> dict[str, float]:
    """Median seconds per row-step of every configuration on one bundle (greedy, other options default)."""
    runner = Runner(bundle, providers=["CPUExecutionProvider"])
    sources = held_out_sources()
    texts = [sources[i % len(sources)] for i in range(batch)]
    limit = min(new_tokens, runner.max_len - 1)
    options = {name: DecodeOptions(beam_size=1, max_output_tokens=limit, **extra)
               for name, extra in CONFIGS.items()}
    row_step_seconds(runner, texts, options["plain"])  # warm-up: buffers allocated, sessions run once
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    for _ in range(rounds):
        for name, asked in options.items():
            seconds, steps = row_step_seconds(runner, texts, asked)
            times[name].append(seconds)
            log(f"  {bundle.name} {name}: {seconds * 1e6:.1f} us per row-step ({steps} row-steps)")
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    """Measure and print the ratios."""
    parser = argparse.ArgumentParser(prog="python -m bench.engines.controls",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, action="append",
                        help="bundles (default: the default model and the opus-mt shape)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 rounds, the default model only")
    args = parser.parse_args()
    bundles = args.bundle or [DEFAULT_BUNDLE, *[b for b in OPUS_BUNDLES if (b / "bundle.json").exists()][:1]]
    if args.quick:
        bundles, args.rounds = bundles[:1], 2
    report = {}
    for bundle in bundles:
        medians = measure(bundle, args.batch, args.new_tokens, args.rounds)
        plain = medians["plain"]
        ratios = {f"{k}_vs_plain": round(v / plain, 3) for k, v in medians.items() if k != "plain"}
        per_row_step = {k: round(v * 1e6, 2) for k, v in medians.items()}
        report[str(bundle)] = {"us_per_row_step": per_row_step, **ratios}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
