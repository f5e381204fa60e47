"""Model -> verified bundle directory: the export pipeline behind `python -m export` (our checkpoints)
and `python -m export.pretrained` (Hugging Face checkpoints), shared by both through `package`.

The bundle is assembled in a hidden staging directory next to `out` and only moved into place
after verification passed, so a failed export never leaves a half-written bundle behind.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from tokenizers import Tokenizer

import export.lowering.fused  # noqa: F401  (registers the "fused" lowering)
import export.lowering.inplace  # noqa: F401  (registers the "inplace" lowering)
from export.bundle import build_manifest, copy_tokenizer, write_manifest
from export.export import export_graphs
from export.lowering.attention import get_lowering
from export.lowering.tied import SHARE_TIED_EMBEDDING, tie_files
from export.variants.cuda_kernels import integer_nodes
from export.variants.fp16 import to_fp16
from export.variants.int8 import (
    INT8_FILES,
    INT8_VARIANT,
    REDUCE_RANGE,
    quantization,
    write_int8,
)
from export.variants.optimized import OFFLINE_LEVEL_NAME, optimize_offline
from export.verify.base import source_ids, verify_bundle
from export.verify.fp16 import verify_fp16
from export.verify.int8 import Int8Limits, TestSet, verify_int8
from export.weights import pack_bundle
from interface import names
from interface.generation import SOURCE_LANGUAGE, parse_generation, parse_source_language
from model.checkpoint import file_sha256, load_checkpoint, tokenizer_path
from model.config import ModelConfig
from model.data import read_tsv
from model.evaluate import evaluate
from model.tokenizer import load_tokenizer
from model.transformer import Transformer

FP16_FILES = {"encoder": "encoder.fp16.onnx", "decoder": "decoder.fp16.onnx"}
QUANTIZATIONS = (INT8_VARIANT,)  # --quantize
CPU = "CPUExecutionProvider"


class BundleError(RuntimeError):
    """A problem with the command's inputs or output directory."""


@dataclass
class BuildOptions:
    """What to build besides encoder.onnx and decoder.onnx."""

    fp16: bool = False
    quantize: str | None = None  # "int8": the CPU provider's int8 variant (export/variants/int8.py)
    cpu_variant: str | None = None  # the variant bundle.json names for the CPU provider (None: base files)
    int8_limits: Int8Limits = field(default_factory=Int8Limits)  # below them the int8 variant is refused
    int8_reduce_range: bool = REDUCE_RANGE  # 7-bit weights, for CPUs without VNNI (export/variants/int8.py)
    # tied embeddings as tables of their own in every variant (fp32 / fp16 tables, int8 rows): the matrix
    # stored twice (export/lowering/tied.py, export/variants/int8_embedding.py; docs/export.md)
    embedding_rows: bool = not SHARE_TIED_EMBEDDING
    optimize: bool = False
    test_split: Path | None = None
    eval_size: int = 500
    force: bool = False  # replace an existing bundle directory
    attention: str = "inplace"
    verify_sources: int = 8  # sources decoded greedily by both runtimes
    source_language: str | None = None  # our checkpoints' bundle.json source_language (python -m export)


@dataclass
class ModelSource:
    """A model to package, and what its bundle holds and says besides the graphs."""

    model: Transformer
    write_tokenizer: Callable[[Path], None]  # writes the tokenizer file(s) into the bundle directory
    sources: list[list[int]]  # source ids (+ eos) that verification decodes greedily
    weights_sha256: str  # of the checkpoint (bundle.json `checkpoint`, and the version's suffix)
    step: int = 0
    metrics: Callable[[], dict[str, Any]] = dict  # computed after verification passed
    test_set: Callable[[], TestSet | None] = lambda: None  # a test split the int8 variant is checked on
    manifest: dict[str, Any] = field(default_factory=dict)  # more bundle.json keys (format 2 objects)
    format_version: int = names.BUNDLE_FORMAT_VERSION


@dataclass
class BuildResult:
    """The written bundle, its manifest and where the time went."""

    bundle_dir: Path
    manifest: dict[str, Any]
    seconds: dict[str, float] = field(default_factory=dict)


def check_output_dir(out: Path, force: bool) -> None:
    """Refuse to overwrite anything but an existing bundle, and that only with force."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise BundleError(f"output directory {out} exists and is not empty (--force replaces a bundle)")
        if not (out / names.BUNDLE_FILE).is_file():
            raise BundleError(f"refusing to replace {out}: it is not a bundle (no {names.BUNDLE_FILE})")


def verification_sources(
    model: Transformer, tok: Tokenizer | None, test_split: Path | None, n: int, seed: int = 0
) -> list[list[int]]:
    """Source ids (+ eos) for the greedy check: the split's first n sources, else random ids."""
    cfg = model.cfg
    if test_split is not None and tok is not None:
        texts = [s for s, _ in read_tsv(test_split)[:n]]
        encoded = tok.encode_batch(texts, add_special_tokens=False)
        return [e.ids[: cfg.max_len - 1] + [cfg.eos_id] for e in encoded]
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, min(24, cfg.max_len - 1), n)
    return [source_ids(cfg, rng, int(k)).tolist() + [cfg.eos_id] for k in lengths]


def bundle_metrics(
    model: Transformer, tok: Tokenizer, state: dict[str, Any], test_split: Path | None, eval_size: int
) -> dict[str, Any]:
    """Greedy test metrics on the first eval_size pairs, else the checkpoint's stored metrics."""
    if test_split is not None:
        scores, _ = evaluate(model, tok, read_tsv(test_split)[:eval_size])
        return {"split": test_split.stem, **scores.as_dict()}
    stored = state.get("metrics") or {}
    return {"split": "valid", **stored} if stored else {}


def split_test_set(tok: Tokenizer, cfg: ModelConfig, split: Path | None, n: int) -> TestSet | None:
    """The first n pairs of a TSV split as the int8 check's test set (sources encoded as model/evaluate.py
    encodes them), or None without a split."""
    if split is None:
        return None
    pairs = read_tsv(split)[:n]
    encoded = tok.encode_batch([s for s, _ in pairs], add_special_tokens=False)
    sources = [e.ids[: cfg.max_len - 1] + [cfg.eos_id] for e in encoded]
    references = [t for _, t in pairs]
    return TestSet(split.stem, sources, references, lambda ids: tok.decode(ids, skip_special_tokens=False))


def _replace_dir(staging: Path, out: Path) -> None:
    """Move staging to out, replacing an old bundle there."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{time.time_ns()}")
        out.rename(old)
    staging.rename(out)
    if old is not None:
        shutil.rmtree(old)


def build_bundle(
    checkpoint: Path, out: Path, opts: BuildOptions | None = None, log: Callable[[str], None] = lambda _: None
) -> BuildResult:
    """Export, verify and package a checkpoint into the bundle directory `out`."""
    opts = opts or BuildOptions()
    checkpoint, out = Path(checkpoint), Path(out)
    if not checkpoint.is_file():
        raise BundleError(f"checkpoint not found: {checkpoint}")
    if opts.test_split is not None and not opts.test_split.is_file():
        raise BundleError(f"test split not found: {opts.test_split}")
    check_output_dir(out, opts.force)
    language = parse_source_language(opts.source_language)  # ValueError before the export's work
    model, state = load_checkpoint(checkpoint)
    tok_file = tokenizer_path(checkpoint, state)
    tok = load_tokenizer(tok_file)

    def metrics() -> dict[str, Any]:
        if opts.test_split is not None:
            log(f"evaluating {opts.test_split} (first {opts.eval_size} pairs, greedy)")
        return bundle_metrics(model, tok, state, opts.test_split, opts.eval_size)

    source = ModelSource(
        model=model, write_tokenizer=lambda staging: copy_tokenizer(tok_file, staging),
        sources=verification_sources(model, tok, opts.test_split, opts.verify_sources),
        weights_sha256=file_sha256(checkpoint), step=int(state.get("step", 0)), metrics=metrics,
        test_set=lambda: split_test_set(tok, model.cfg, opts.test_split, opts.eval_size),
        manifest={SOURCE_LANGUAGE: language} if language else {})
    return package(source, out, opts, log, name=str(checkpoint))


def package(
    source: ModelSource, out: Path, opts: BuildOptions, log: Callable[[str], None] = lambda _: None,
    name: str = "model",
) -> BuildResult:
    """Export source.model to ONNX, verify the graphs against it and write the bundle `out`."""
    start = time.perf_counter()
    out = Path(out)
    check_output_dir(out, opts.force)
    if opts.cpu_variant and opts.cpu_variant != opts.quantize:
        raise BundleError(f"--cpu-variant {opts.cpu_variant} needs --quantize {opts.cpu_variant}")
    lowering = get_lowering(opts.attention)
    model = source.model
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; a bundle is read by the serving user
    seconds: dict[str, float] = {}
    try:
        log(f"exporting {name} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters)")
        info = export_graphs(model, staging, lowering)
        seconds.update({f"export_{k}": v for k, v in info.seconds.items()})
        variants, host_nodes = {}, {}
        fp32_files = {"encoder": names.ENCODER_FILE, "decoder": names.DECODER_FILE}
        if opts.quantize == INT8_VARIANT:  # for the CPU provider: int8 weights, checked against fp32 below
            log("quantizing the int8 variant")
            write_int8(staging, fp32_files, model.cfg.d_model, reduce_range=opts.int8_reduce_range,
                       share_embedding=not opts.embedding_rows)
            variants[INT8_VARIANT] = dict(INT8_FILES)
        # export/lowering/tied.py: the matrix once, as rows that the lookups gather and the projection's
        # Gemm reads
        tied = 0 if opts.embedding_rows else tie_files(staging, fp32_files, model.cfg.d_model)
        if opts.fp16:  # for the CUDA provider, from the tied graphs: every node checked against its kernels
            for graph, file in FP16_FILES.items():
                to_fp16(staging / fp32_files[graph], staging / file)
                host_nodes[file] = integer_nodes(onnx.load(staging / file))
            variants["fp16"] = dict(FP16_FILES)
        if opts.optimize:
            log(f"optimizing offline (onnxruntime level {OFFLINE_LEVEL_NAME})")
            for file in fp32_files.values():
                optimize_offline(staging / file)
        source.write_tokenizer(staging)
        log("verifying against PyTorch")
        t = time.perf_counter()
        rules = parse_generation(source.manifest.get("generation"))  # format 1: none
        verification: dict[str, Any] = verify_bundle(staging, model, source.sources, rules=rules).as_dict()
        verification["tied_embeddings"] = tied  # lookups that read the output projection (fp32, fp16)
        if opts.fp16:
            verification["fp16"] = verify_fp16(staging, model, source.sources, **FP16_FILES, rules=rules)
        if opts.quantize == INT8_VARIANT:
            verification[INT8_VARIANT] = verify_int8(
                staging, fp32_files, INT8_FILES, model.cfg, source.sources, rules, source.test_set(),
                opts.int8_limits) | {"quantization": quantization(opts.int8_reduce_range,
                                                                  shared=not opts.embedding_rows)}
        seconds["verify"] = round(time.perf_counter() - t, 2)
        log("packing the weights (each tensor once per variant)")
        t = time.perf_counter()
        packed = pack_bundle(staging, variants)  # export/weights.py: verified, or WeightsError
        verification["weights"] = {data_file: report.as_dict() for data_file, report in packed.items()}
        seconds["pack"] = round(time.perf_counter() - t, 2)
        metrics = source.metrics()
        onnx_info = {"opset": info.opset, "ir_version": info.ir_version, "exporter": info.exporter,
                     "attention": info.attention, "kv_cache": info.kv_cache, "dtype": "float32",
                     "optimized": opts.optimize,
                     "optimization_level": OFFLINE_LEVEL_NAME if opts.optimize else None}
        manifest = build_manifest(staging, model.cfg, source.weights_sha256, source.step, onnx_info, metrics,
                                  variants, verification, host_nodes, source.format_version, source.manifest,
                                  weights={f: list(r.before) for f, r in packed.items()},
                                  provider_variants={CPU: opts.cpu_variant} if opts.cpu_variant else None)
        write_manifest(staging, manifest)
        _replace_dir(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    seconds["total"] = round(time.perf_counter() - start, 2)
    return BuildResult(out, manifest, seconds)


def bundle_options(args: argparse.Namespace, **extra: Any) -> BuildOptions:
    """The BuildOptions of the options `add_bundle_options` declared, plus a CLI's own (`extra`)."""
    return BuildOptions(fp16=args.fp16, quantize=args.quantize, cpu_variant=args.cpu_variant,
                        int8_reduce_range=args.int8_reduce_range,
                        int8_limits=Int8Limits(agreement=args.int8_min_agreement),
                        embedding_rows=args.embedding_rows, optimize=args.optimize,
                        force=args.force, attention=args.attention, **extra)


def _share(text: str) -> float:
    """A number from 0 to 1 (argparse's type; argparse names the option in its refusal)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:  # NaN included
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1, got {text!r}")
    return value


def add_bundle_options(ap: argparse.ArgumentParser) -> None:
    """The options both export CLIs share: where to write, which variants, the lowering, threads."""
    from export.lowering.attention import LOWERINGS

    ap.add_argument("--out", type=Path, required=True, help="bundle directory to write")
    ap.add_argument("--fp16", action="store_true", help="also write encoder.fp16.onnx / decoder.fp16.onnx")
    ap.add_argument("--quantize", choices=QUANTIZATIONS,
                    help="also write the CPU provider's int8 variant (encoder.int8.onnx / decoder.int8.onnx)")
    ap.add_argument("--cpu-variant", choices=QUANTIZATIONS,
                    help="make that variant the CPU provider's default (bundle.json provider_variants)")
    ap.add_argument("--int8-reduce-range", action="store_true",
                    help="7-bit int8 weights: for serving on CPUs without VNNI (docs/export.md)")
    ap.add_argument("--int8-min-agreement", type=_share, default=Int8Limits.agreement, metavar="SHARE",
                    help="share of the verification sources whose int8 greedy tokens must equal fp32's "
                         f"(default {Int8Limits.agreement}); near-ties flip under int8 rounding, and a "
                         "random-weight model has them everywhere: 0 holds it to the log-prob drift alone")
    ap.add_argument("--embedding-rows", action="store_true",
                    help="tied embeddings as tables of their own (every variant): the matrix twice on disk")
    ap.add_argument("--optimize", action="store_true", help="onnxruntime offline graph optimization (basic)")
    ap.add_argument("--attention", choices=sorted(LOWERINGS), default="inplace", help="attention lowering")
    ap.add_argument("--force", action="store_true", help="replace an existing bundle at --out")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads for the PyTorch reference runs (tiny ops: 1 is fastest)")
