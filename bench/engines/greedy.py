"""The engines compared: greedy decoding in PyTorch eager, the service's ONNX Runtime decoder, CTranslate2.

Same checkpoint (the bundle is its export, CTranslate2 gets its weights), same held-out inputs,
same thread count, static batches of b sentences, greedy to eos, each engine in a process of its
own (`EngineProcess`). Tokens are compared across engines (so every engine generates the same
lengths); each (engine, batch size) is timed `repeats` times, interleaved, and the median is
kept, so that ratios come from one run.

    python -m bench.engines [--quick] [--checkpoint ...] [--bundle ...]   # bench/engines/__main__.py
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch.nn.utils.rnn import pad_sequence

from bench.common.workload import PAUSE_S
from bench.engines.ct2 import CT2Engine, checkpoint_vocab, convert
from bench.engines.process import Decode, EngineProcess, Point
from model.checkpoint import load_checkpoint, tokenizer_path
from model.decoding import greedy_decode
from service.domain.types import DecodeOptions
from service.runtime.model.bundle import load_bundle
from service.runtime.runner import Runner


def load_sources(tsv: Path, tok: Tokenizer, eos: int, n: int) -> list[list[int]]:
    """Source ids (+ eos) of the first n lines of a TSV split."""
    lines = [ln.split("\t")[0] for ln in tsv.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return [e.ids + [eos] for e in tok.encode_batch(lines[:n], add_special_tokens=False)]


ENGINES = ("pytorch", "onnxruntime", "ctranslate2")


def build(name: str, checkpoint: Path, bundle: Path, threads: int, ct2_model: Path,
          vocab: list[str]) -> Decode:
    """One decoder by name, taking a batch of source ids. Only PyTorch's touches torch: a
    process that ran torch ops slows CTranslate2 down (see EngineProcess)."""
    if name == "pytorch":
        torch.set_num_threads(threads)
        model, _ = load_checkpoint(checkpoint)
        pad, limit = model.cfg.pad_id, model.cfg.max_len - 1

        def torch_decode(batch: list[list[int]]) -> list[list[int]]:
            src = pad_sequence([torch.tensor(s) for s in batch], batch_first=True, padding_value=pad)
            return [h.tokens for h in greedy_decode(model, src, limit)]

        return torch_decode
    if name == "onnxruntime":
        runner = Runner(bundle, intra_op_threads=threads)
        options = DecodeOptions(max_output_tokens=runner.max_len - 1)
        return lambda batch: [h[0].tokens for h in runner.translate(batch, options, max_rows=len(batch))]
    if name == "ctranslate2":
        ct2 = CT2Engine(ct2_model, vocab, threads)
        limit = load_bundle(bundle).max_len - 1
        return lambda batch: ct2.greedy(batch, limit)
    raise ValueError(f"unknown engine {name!r} (one of {', '.join(ENGINES)})")


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
    with tempfile.TemporaryDirectory() as work, contextlib.ExitStack() as stack:
        vocab = checkpoint_vocab(checkpoint)
        ct2_model = convert(checkpoint, Path(work) / "ct2", vocab)  # here: torch stays out of its process
        decoders: dict[str, EngineProcess] = {}
        for name in ENGINES:
            decoders[name] = EngineProcess(name, checkpoint, bundle, threads, ct2_model, vocab, factory=build)
            stack.callback(decoders[name].close)
        for b in batches:
            n = max(b, (16 if quick else 32) if b == 1 else (2 if quick else 4) * b)
            sources = load_sources(split, tok, eos, n)
            for dec in decoders.values():  # warm-up: allocators, thread pools, caches
                dec.time(sources[: min(b, 4)], b)
            times: dict[str, list[float]] = {name: [] for name in decoders}
            outputs: dict[str, list[list[int]]] = {}
            for _ in range(repeats):
                for name, dec in decoders.items():
                    time.sleep(PAUSE_S)  # the previous engine's idle threads stop spinning
                    seconds, outputs[name] = dec.time(sources, b)
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
