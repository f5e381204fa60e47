"""Engine benchmark: greedy decoding in PyTorch eager, the service's ONNX Runtime decoder, CTranslate2.

Same checkpoint (the bundle is its export, CTranslate2 gets its weights), same held-out inputs,
same thread count, static batches of b sentences, greedy to eos. Tokens are compared across
engines (so every engine generates the same lengths); each (engine, batch size) is timed
`repeats` times, interleaved, and the median is kept, so that ratios come from one run.

    python -m bench.engine [--quick] [--checkpoint ...] [--bundle ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch.nn.utils.rnn import pad_sequence

from bench.ct2 import CT2Engine, checkpoint_vocab, convert
from model.checkpoint import load_checkpoint, tokenizer_path
from model.decoding import greedy_decode
from service.runner import DecodeOptions, Runner

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


def load_sources(tsv: Path, tok: Tokenizer, eos: int, n: int) -> list[list[int]]:
    """Source ids (+ eos) of the first n lines of a TSV split."""
    lines = [ln.split("\t")[0] for ln in tsv.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return [e.ids + [eos] for e in tok.encode_batch(lines[:n], add_special_tokens=False)]


def engines(checkpoint: Path, bundle: Path, threads: int, work: Path) -> dict[str, Decode]:
    """The three decoders, each taking a batch of source ids."""
    torch.set_num_threads(threads)
    model, _ = load_checkpoint(checkpoint)
    cfg = model.cfg
    limit = cfg.max_len - 1

    def torch_decode(batch: list[list[int]]) -> list[list[int]]:
        src = pad_sequence([torch.tensor(s) for s in batch], batch_first=True, padding_value=cfg.pad_id)
        return [h.tokens for h in greedy_decode(model, src, limit)]

    runner = Runner(bundle, providers=["CPUExecutionProvider"], intra_op_threads=threads)
    options = DecodeOptions(max_new_tokens=limit)

    def ort_decode(batch: list[list[int]]) -> list[list[int]]:
        return [h[0].tokens for h in runner.translate(batch, options, max_rows=len(batch))]

    vocab = checkpoint_vocab(checkpoint)
    ct2 = CT2Engine(convert(checkpoint, work / "ct2", vocab), vocab, threads)
    return {
        "pytorch": torch_decode,
        "onnxruntime": ort_decode,
        "ctranslate2": lambda batch: ct2.greedy(batch, limit),
    }


def time_engine(decode: Decode, sources: list[list[int]], batch: int) -> tuple[float, list[list[int]]]:
    """Seconds to decode all sources in static batches of `batch`, and the outputs."""
    out: list[list[int]] = []
    start = time.perf_counter()
    for i in range(0, len(sources), batch):
        out += decode(sources[i : i + batch])
    return time.perf_counter() - start, out


DEFAULT = Path("artifacts/default")


def run(quick: bool = False, checkpoint: Path = DEFAULT / "model.pt", bundle: Path = DEFAULT / "bundle",
        split: Path = DEFAULT / "test_sample.tsv", threads: int = 2, batches: tuple[int, ...] | None = None,
        repeats: int | None = None) -> tuple[list[Point], dict[str, float]]:
    """Measure every engine at every batch size; returns the points and the ratios."""
    batches = batches or ((1, 32) if quick else (1, 8, 32, 64))
    repeats = repeats or (3 if quick else 5)
    _, state = load_checkpoint(checkpoint)
    tok = Tokenizer.from_file(str(tokenizer_path(checkpoint, state)))
    eos = int(state["config"]["eos_id"])
    points: list[Point] = []
    mismatches: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as work:
        decoders = engines(checkpoint, bundle, threads, Path(work))
        for b in batches:
            n = max(b, (16 if quick else 32) if b == 1 else (2 if quick else 4) * b)
            sources = load_sources(split, tok, eos, n)
            for dec in decoders.values():  # warm-up: allocators, thread pools, caches
                time_engine(dec, sources[: min(b, 4)], b)
            times: dict[str, list[float]] = {name: [] for name in decoders}
            outputs: dict[str, list[list[int]]] = {}
            for _ in range(repeats):
                for name, dec in decoders.items():
                    seconds, outputs[name] = time_engine(dec, sources, b)
                    times[name].append(seconds)
            ref = outputs["pytorch"]
            for name, out in outputs.items():
                wrong = sum(a != r for a, r in zip(out, ref, strict=True))
                mismatches[name] = mismatches.get(name, 0) + wrong
            tokens = sum(len(t) + 1 for t in ref)  # + eos
            for name in decoders:
                points.append(Point(name, b, len(sources), tokens, statistics.median(times[name])))
    by = {(p.engine, p.batch): p.sentences_per_s for p in points}
    ratios = {}
    for b in batches:
        if b in (1, 32):
            ratios[f"ort_vs_torch_b{b}"] = by["onnxruntime", b] / by["pytorch", b]
            ratios[f"ort_vs_ct2_b{b}"] = by["onnxruntime", b] / by["ctranslate2", b]
    ratios |= {f"mismatched_sentences_{k}": float(v) for k, v in mismatches.items() if k != "pytorch"}
    return points, ratios


def table(points: list[Point]) -> str:
    """Markdown table: sentences/s (tokens/s) per engine and batch size."""
    batches = sorted({p.batch for p in points})
    names = list(dict.fromkeys(p.engine for p in points))
    by = {(p.engine, p.batch): p for p in points}
    lines = ["| engine | " + " | ".join(f"b={b} sent/s (tok/s)" for b in batches) + " |",
             "|---|" + "---|" * len(batches)]
    for name in names:
        cells = [f"{by[name, b].sentences_per_s:.1f} ({by[name, b].tokens_per_s:.0f})" for b in batches]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    """CLI: print the table and the ratios."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--checkpoint", type=Path, default=Path("artifacts/default/model.pt"))
    ap.add_argument("--bundle", type=Path, default=Path("artifacts/default/bundle"))
    ap.add_argument("--split", type=Path, default=Path("artifacts/default/test_sample.tsv"))
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    points, ratios = run(a.quick, a.checkpoint, a.bundle, a.split, a.threads)
    print(table(points))
    print(json.dumps({k: round(v, 3) for k, v in ratios.items()}))


if __name__ == "__main__":
    main()
