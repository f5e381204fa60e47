"""bench.gpu's engine part: ours and CTranslate2 on the same ids in static batches, greedy, tokens compared.

On CUDA: our runner on the fp16 variant (what the server picks for CUDA) and on the fp32 base files (ONNX
Runtime has no fp32 CUDA kernel for GroupQueryAttention: those nodes run on the CPU with copies around
them), CTranslate2 float16 and float32. On the CPU (`--device cpu`): our fp32 base files and CTranslate2
float32. Median of `repeats` timed runs after a warm-up; the IO-binding backend's bytes per step (host <->
device) come with our figures.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.gpu.models import Model

Decode = Callable[[list[list[int]]], list[list[int]]]
BATCHES = (1, 32, 128)
ENGINES = {"cuda": ("ort_fp16", "ort_fp32", "ct2_float16", "ct2_float32"), "cpu": ("ort_fp32", "ct2_float32")}
VARIANT = {"ort_fp16": "fp16", "ort_fp32": "base"}  # our engines -> the variant they run (its step bytes)


def model_job(model: Model) -> dict[str, Any]:
    """The model as JSON for a child process."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(model).items() if k != "texts"}


def build_decoder(engine: str, model: dict[str, Any], device: str, runners: dict | None = None) -> Decode:
    """Greedy decoding of a static batch of source ids by one engine (runners: where ours are kept)."""
    from service.domain.types import DecodeOptions
    from service.runtime.model.sessions import CUDA
    from service.runtime.runner import Runner

    if engine in VARIANT:
        providers = None if device == "cuda" else ["CPUExecutionProvider"]
        runner = Runner(Path(model["bundle"]), providers=providers, variant=VARIANT[engine],
                        require_provider=CUDA if engine == "ort_fp16" else None)
        if runners is not None:
            runners[engine] = runner
        options = DecodeOptions(beam_size=1, max_output_tokens=model["new_tokens"] or runner.max_len - 1)
        return lambda batch: [h[0].tokens for h in runner.translate(batch, options, max_rows=len(batch))]
    from bench.engines.ct2 import CT2Engine

    limit = model["new_tokens"] or 511
    ct2 = CT2Engine(Path(model["ct2_dir"]), model["ct2_vocab"], 1 if device == "cuda" else 2, device,
                    engine.removeprefix("ct2_"))
    return lambda batch: ct2.greedy(batch, limit)


def time_decoder(decode: Decode, sources: list[list[int]], batch: int, repeats: int
                 ) -> tuple[float, list[list[int]]]:
    """Median sentences per second over `repeats` runs (after one warm-up), and the outputs."""
    decode(sources[:batch])
    seconds, out = [], []
    for _ in range(repeats):
        start, out = time.perf_counter(), []
        for i in range(0, len(sources), batch):
            out += decode(sources[i : i + batch])
        seconds.append(time.perf_counter() - start)
    return len(sources) / statistics.median(seconds), out


def same_tokens(ours: list[int], theirs: list[int], free: int | None) -> bool:
    """Ours equal to CTranslate2's (their first `free`: where our bundle forces eos at the limit)."""
    return ours == (theirs[:free] if free is not None else theirs)


def engine(model: Model, device: str, ids: list[list[int]], quick: bool,
           batches: tuple[int, ...] = BATCHES) -> dict[str, Any]:
    """Sentences per second of every engine at every batch size, tokens compared with our first engine's."""
    job = model_job(model)
    names = [e for e in ENGINES[device] if model.ct2_dir or not e.startswith("ct2")]
    runners: dict[str, Any] = {}
    decoders = {name: build_decoder(name, job, device, runners) for name in names}
    ours = names[0]
    first = runners[ours]
    free = model.new_tokens - 1 if model.new_tokens and first.bundle.generation.forced_eos_at_limit else None
    result: dict[str, Any] = {"model": model.name, "device": device, "variant": first.variant_name,
                              "provider": first.provider, "backend": type(first.backend).__name__,
                              "new_tokens": model.new_tokens, "sentences_per_s": {}, "same_tokens": {}}
    if model.ct2_skipped:
        result["ct2_skipped"] = model.ct2_skipped
    for batch in batches:
        n = batch * (2 if quick else 4) if batch > 1 else (4 if quick else 16)
        sources = (ids * (n // len(ids) + 1))[:n]
        outputs = {}
        for name, decode in decoders.items():
            transfers = getattr(runners.get(name) and runners[name].backend, "transfers", None)
            steps_before = transfers.decoder_steps if transfers else 0
            rate, outputs[name] = time_decoder(decode, sources, batch, 1 if quick else 2)
            result["sentences_per_s"].setdefault(name, {})[f"b{batch}"] = round(rate, 2)
            if transfers and transfers.decoder_steps > steps_before:
                result.setdefault("bytes_per_step", {}).setdefault(name, {})[f"b{batch}"] = {
                    k: round(v) for k, v in transfers.per_step().items()}
                transfers.__init__()  # the next batch size counts afresh
        for name in names[1:]:
            exact = None if name in VARIANT else free  # ours against ours: all tokens
            agree = sum(same_tokens(a, b, exact) for a, b in zip(outputs[ours], outputs[name], strict=True))
            result["same_tokens"].setdefault(name, {})[f"b{batch}"] = f"{agree}/{len(sources)}"
    rates = result["sentences_per_s"]
    for name in names[1:]:
        result.setdefault("ratios", {})[f"{ours}_vs_{name}"] = {
            f"b{b}": round(rates[ours][f"b{b}"] / rates[name][f"b{b}"], 2) for b in batches}
    steps = model.new_tokens or 1
    result["step_ms_b1"] = {VARIANT[n]: 1e3 / (rates[n]["b1"] * steps) for n in names if n in VARIANT}
    return result
