"""What required phrases cost: constrained beam search (beam 4, 1-3 required phrases per sentence) against
plain beam 4 on the same sentences, sentences/s at batch 1 and batch 32, side by side in one run, in process.

    python -m bench.engines.constraints [--quick] [--bundle DIR ...] [--sentences 64] [--rounds 3]

For each bundle (default: the opus-mt-shaped bundle bench/marian/build.py makes when it exists, else the
shipped default model), each sentence's phrases are 1-3 distinct words of the plain beam-4 translation of
another sentence (so that most must be placed), as text: words of at most MAX_PIECES tokens, from the next
sentence whose translation has any, so that every request's phrases fit in the output cap (a random-weight
model's "words" may run to more pieces than the cap: those could never be placed, and the unmet share would
measure the data, not the search). Batch 1 decodes the sentences one request at a time; batch 32 keeps a
DecodeBatch of 32 requests, refilled as requests finish (the continuous batch's pattern): 128 rows plain, up
to 256 constrained (a request with phrases holds the plain beam's 4 rows beside the constrained beam's until
one of the two searches ends, service/runtime/decoding/plain_first.py). Rounds interleave plain and
constrained; medians. Ratios: `constrained_vs_plain_b1` and `_b32` (sentences/s, higher is better); the
issue's goal is >= 0.5 at both. Also the share of phrases left unmet (with phrases that fit: those the search
did not place in the room the cap leaves). `--quick`: the default model, 8 sentences, 1 round.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from bench.common.workload import DEFAULT_BUNDLE, held_out_sources
from bench.engines.controls import OPUS_BUNDLES
from service.domain.types import DecodeOptions, FinishedEvent
from service.runtime.runner import Runner

BEAM, BATCH = 4, 32
MAX_NEW = 48  # output cap (the opus-mt shape's random weights rarely stop on their own)
MAX_PIECES = 8  # tokens of a phrase at most: 3 of them take half the cap, so each request's phrases fit


def cap(runner: Runner) -> int:
    """The output cap of every request: MAX_NEW, or less when the model's length allows less."""
    return min(MAX_NEW, runner.max_len - 1)


def pieces(runner: Runner, word: str) -> int:
    """Tokens a phrase takes in the output: its shortest form as the service tokenizes it."""
    (phrase,) = runner.resolve(DecodeOptions(required_phrases=[word])).required_phrases.constraints
    return min(len(form) for form in phrase.forms)


def phrases_for(runner: Runner, texts: list[str], seed: int = 0) -> list[list[str]]:
    """1-3 distinct words per sentence, of at most MAX_PIECES tokens each, from the plain translation of the
    next sentence that has such a word (module doc)."""
    rng = random.Random(seed)
    plain = runner.translate(texts, DecodeOptions(beam_size=BEAM, max_output_tokens=cap(runner)))
    words = [dict.fromkeys(h[0].text.split()) for h in plain]  # distinct, in order
    fitting = [[w for w in ws if pieces(runner, w) <= MAX_PIECES] for ws in words]
    if not any(fitting):
        fitting = [["the"]] * len(texts)
    out = []
    for i in range(len(texts)):
        pool = next(f for j in range(1, len(texts) + 1) if (f := fitting[(i + j) % len(texts)]))
        out.append(rng.sample(pool, min(len(pool), rng.randint(1, 3))))
    return out


def run(runner: Runner, texts: list[str], options: list[DecodeOptions], batch: int) -> tuple[float, int]:
    """Sentences/s decoding every text with its options, `batch` requests at a time (refilled as they
    finish), and the phrases left unmet."""
    pending = [runner.make_request(t, o) for t, o in zip(texts, options, strict=True)]
    decoder = runner.new_batch(batch * max(r.options.rows for r in pending))  # 2 * BEAM with phrases
    unmet, done = 0, 0
    start = time.perf_counter()
    while done < len(texts):
        room = batch - len(decoder)
        if room and pending:
            decoder.add(pending[:room])
            pending = pending[room:]
        for event in decoder.step():
            if isinstance(event, FinishedEvent):
                done += 1
                unmet += len(event.hypotheses[0].unmet_phrases)
    return len(texts) / (time.perf_counter() - start), unmet


def measure(bundle: Path, sentences: int, rounds: int, log=print) -> dict[str, float]:
    """Median sentences/s of plain and constrained beam search at batch 1 and 32 on one bundle."""
    runner = Runner(bundle, providers=["CPUExecutionProvider"])
    sources = held_out_sources()
    texts = [sources[i % len(sources)] for i in range(sentences)]
    limit = cap(runner)
    plain = [DecodeOptions(beam_size=BEAM, max_output_tokens=limit)] * len(texts)
    constrained = [DecodeOptions(beam_size=BEAM, max_output_tokens=limit, required_phrases=p)
                   for p in phrases_for(runner, texts)]
    phrases = sum(len(o.required_phrases) for o in constrained)
    run(runner, texts[:2], plain[:2], 2)  # warm-up
    rates: dict[str, list[float]] = {}
    unmet = 0
    for _ in range(rounds):
        for batch in (1, BATCH):
            for name, options in (("plain", plain), ("constrained", constrained)):
                rate, missing = run(runner, texts, options, batch)
                rates.setdefault(f"{name}_b{batch}", []).append(rate)
                unmet = max(unmet, missing)
                log(f"  {bundle.name} {name} batch {batch}: {rate:.2f} sentences/s")
    out = {k: statistics.median(v) for k, v in rates.items()}
    return {**out, "unmet_share": unmet / max(phrases, 1)}


def main() -> None:
    """Measure and print the rates and ratios (JSON)."""
    parser = argparse.ArgumentParser(prog="python -m bench.engines.constraints",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, action="append",
                        help="bundles (default: the opus-mt shape when built, else the default model)")
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the default model, 8 sentences, 1 round")
    args = parser.parse_args()
    opus = [b for b in OPUS_BUNDLES if (b / "bundle.json").exists()][:1]
    bundles = args.bundle or opus or [DEFAULT_BUNDLE]
    if args.quick:
        bundles, args.sentences, args.rounds = [DEFAULT_BUNDLE], 8, 1
    report = {}
    for bundle in bundles:
        m = measure(bundle, args.sentences, args.rounds)
        ratios = {f"constrained_vs_plain_b{b}": round(m[f"constrained_b{b}"] / m[f"plain_b{b}"], 3)
                  for b in (1, BATCH)}
        report[str(bundle)] = {k: round(v, 3) for k, v in m.items()} | ratios
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
