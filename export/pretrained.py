"""Import a pretrained Hugging Face seq2seq model (Marian / OPUS-MT, M2M100, NLLB) into a verified bundle.

    python -m export.pretrained --model path/to/opus-mt-en-de --out bundles/en-de \\
        [--force] [--attention fused|plain|inplace] [--fp16] [--optimize]

No network: --model is a local directory (config.json, model.safetensors or pytorch_model.bin, the
tokenizer files). The weights map onto model/'s Transformer (export/hf_mapping.py), the tokenizer
onto the bundle's SentencePiece files (export/hf_tokenizer.py), and the bundle is written by the
same export and verification as our own checkpoints (export/build.py `package`), as format_version 2
with the `tokenizer`, `generation` (and `languages`) objects of interface/generation.py. The rules of
the checkpoint's generation settings that change generate's output (bad_words_ids, suppress_tokens,
forced_eos_token_id, renormalize_logits) become `generation`'s suppress_ids, forced_eos_at_limit and
renormalize; verification decodes with them. The bundle's beam search is transformers' own
(`generation.beam_search` "transformers", with the checkpoint's early_stopping), its
begin_suppress_tokens become begin_suppress_ids, and what generate decodes with by default (num_beams,
max_length, min_length, no_repeat_ngram_size, length_penalty, repetition_penalty) becomes
`generation.defaults`: a request that leaves an option unset decodes as transformers' pipeline does.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import export.fused  # noqa: F401  (registers the "fused" lowering)
import export.inplace  # noqa: F401  (registers the "inplace" lowering)
from export.build import (
    BuildOptions,
    BuildResult,
    BundleError,
    ModelSource,
    add_bundle_options,
    bundle_options,
    check_output_dir,
    package,
    verification_sources,
)
from export.export import ExportError
from export.hf_mapping import Pretrained, UnsupportedModel, load_pretrained, read_config
from export.hf_tokenizer import TokenizerMismatch, read_tokenizer
from export.verify import ParityError
from interface.generation import FORMAT_WITH_GENERATION, parse_defaults
from model.config import ModelConfig

# transformers' generation settings worth knowing when comparing outputs (recorded; the rules among
# them, bad_words_ids, suppress_tokens, forced_eos_token_id and renormalize_logits, are applied too)
GENERATION_KEYS = ("num_beams", "max_length", "max_new_tokens", "min_length", "length_penalty",
                   "early_stopping", "bad_words_ids", "suppress_tokens", "begin_suppress_tokens",
                   "forced_bos_token_id", "forced_eos_token_id", "renormalize_logits", "no_repeat_ngram_size",
                   "repetition_penalty", "do_sample")
# generation.defaults (interface/generation.py), named as transformers names them
DEFAULT_KEYS = ("num_beams", "max_length", "min_length", "no_repeat_ngram_size", "length_penalty",
                "repetition_penalty")


def generation_settings(model_dir: Path, hf: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's generation settings as transformers loads them: generation_config.json, else
    config.json (generation/utils.py: GenerationConfig.from_pretrained, config.json as a fallback)."""
    path = model_dir / "generation_config.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else hf


def generation_defaults(settings: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's own generation settings worth recording (GENERATION_KEYS that are set)."""
    return {k: settings[k] for k in GENERATION_KEYS if settings.get(k) is not None}


def _ids(value: Any) -> list[int]:
    """An id or a list of ids (as transformers accepts them) as a list; None as []."""
    return [] if value is None else [value] if isinstance(value, int) else list(value)


def generation_rules(settings: dict[str, Any], cfg: ModelConfig) -> dict[str, Any]:
    """The `generation` rules (interface/generation.py) of what transformers' generate applies from the
    checkpoint's settings: bad_words_ids of single tokens (but [eos], which NoBadWordsLogitsProcessor
    drops) and suppress_tokens -> suppress_ids; forced_eos_token_id = eos -> forced_eos_at_limit;
    renormalize_logits -> renormalize. UnsupportedModel for what the rules cannot state."""
    eos = {cfg.eos_id, *_ids(settings.get("eos_token_id"))}
    bad = settings.get("bad_words_ids") or []
    longer = [b for b in bad if not isinstance(b, list) or len(b) != 1 or not isinstance(b[0], int)]
    if longer:
        raise UnsupportedModel(f"bad_words_ids holds {longer[0]!r}, not a single token: a bundle suppresses "
                               "single ids only (generation.suppress_ids), not sequences of several")
    tokens = _ids(settings.get("suppress_tokens"))
    if eos & set(tokens):
        raise UnsupportedModel(f"suppress_tokens holds the eos id {cfg.eos_id}: generation could never stop")
    suppress = list(dict.fromkeys([b[0] for b in bad if b[0] not in eos] + tokens))
    outside = [i for i in suppress if not isinstance(i, int) or not 0 <= i < cfg.vocab_size]
    if outside:
        raise UnsupportedModel(f"bad_words_ids / suppress_tokens hold {outside[0]!r}, not an id of the "
                               f"model's vocabulary of {cfg.vocab_size}")
    forced = _ids(settings.get("forced_eos_token_id"))
    if forced and forced != [cfg.eos_id]:
        raise UnsupportedModel(f"forced_eos_token_id {settings['forced_eos_token_id']!r} is not the eos id "
                               f"{cfg.eos_id}: a bundle can force only eos at the length limit")
    return {"suppress_ids": suppress, "forced_eos_at_limit": bool(forced),
            "renormalize": settings.get("renormalize_logits") is True}


def generation_search(settings: dict[str, Any], cfg: ModelConfig) -> dict[str, Any]:
    """`generation`'s search and defaults (interface/generation.py) of the checkpoint's settings:
    transformers' beam search with its early_stopping, begin_suppress_tokens -> begin_suppress_ids, and
    the settings of DEFAULT_KEYS that are set -> defaults (max_new_tokens, which wins over max_length in
    generate, as the max_length it means: max_new_tokens + the decoder start). UnsupportedModel for what a
    bundle cannot state."""
    early = settings.get("early_stopping", False)
    if not isinstance(early, bool) and early != "never":
        raise UnsupportedModel(f"early_stopping {early!r} is not true, false or 'never'")
    begin = _ids(settings.get("begin_suppress_tokens"))
    outside = [i for i in begin if not isinstance(i, int) or not 0 <= i < cfg.vocab_size]
    if outside:
        raise UnsupportedModel(f"begin_suppress_tokens holds {outside[0]!r}, not an id of the model's "
                               f"vocabulary of {cfg.vocab_size}")
    defaults = {k: settings[k] for k in DEFAULT_KEYS if settings.get(k) is not None}
    if settings.get("max_new_tokens") is not None:
        defaults["max_length"] = settings["max_new_tokens"] + 1
    try:
        parse_defaults(defaults)
    except ValueError as e:
        raise UnsupportedModel(f"the checkpoint's generation settings: {e}") from None
    return {"beam_search": "transformers", "early_stopping": early, "begin_suppress_ids": begin,
            "defaults": defaults}


def pretrained_source(model_dir: Path, opts: BuildOptions) -> tuple[ModelSource, Pretrained]:
    """The imported model, its tokenizer files and its format-2 manifest objects, ready for `package`."""
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model directory not found: {model_dir}")
    hf = read_config(model_dir)
    model, info = load_pretrained(model_dir)
    settings = generation_settings(model_dir, hf)
    start = settings.get("decoder_start_token_id") if settings is not hf else None
    if start is not None and start != model.cfg.start_id:
        raise UnsupportedModel(f"generation_config.json starts the decoder from {start}, config.json from "
                               f"{model.cfg.start_id}")
    tok = read_tokenizer(model_dir, info.family, model.cfg)
    tok.generation |= generation_rules(settings, model.cfg) | generation_search(settings, model.cfg)
    model.cfg = replace(model.cfg, bos_id=tok.special["bos"], unk_id=tok.special["unk"])
    extra = tok.manifest() | {"pretrained": {
        "family": info.family, "architecture": info.architecture, "model_dir": model_dir.name,
        "weights": list(info.weight_files), "generation_defaults": generation_defaults(settings)}}
    source = ModelSource(
        model=model, write_tokenizer=tok.write,
        sources=verification_sources(model, None, None, opts.verify_sources),
        weights_sha256=info.sha256, manifest=extra, format_version=FORMAT_WITH_GENERATION)
    return source, info


def import_pretrained(model_dir: Path, out: Path, opts: BuildOptions | None = None, log=lambda _: None
                      ) -> BuildResult:
    """Map, export, verify and package a Hugging Face model directory into the bundle directory `out`."""
    opts = opts or BuildOptions()
    model_dir = Path(model_dir)
    check_output_dir(Path(out), opts.force)  # before reading a large checkpoint
    source, info = pretrained_source(model_dir, opts)
    return package(source, Path(out), opts, log, name=f"{model_dir} ({info.architecture})")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(prog="python -m export.pretrained", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="Hugging Face model directory (local)")
    ap.add_argument("--verify-sources", type=int, default=8, help="random sources decoded greedily by both")
    add_bundle_options(ap)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 on bad or unsupported input, 1 on failed verification)."""
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    opts = bundle_options(a, verify_sources=a.verify_sources)
    try:
        result = import_pretrained(a.model, a.out, opts, log=lambda msg: print(msg, file=sys.stderr))
    except (BundleError, FileNotFoundError, UnsupportedModel, TokenizerMismatch, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (ParityError, ExportError) as e:
        print(f"error: {type(e).__name__}: {e} (no bundle written)", file=sys.stderr)
        return 1
    m = result.manifest
    checks = {k: v for k, v in m["verification"].items() if k not in ("cases", "row_past_lens")}
    summary = {"bundle": str(result.bundle_dir), "version": m["version"], "family": m["pretrained"]["family"],
               "bytes": {k: v["bytes"] for k, v in m["files"].items()}, "verification": checks,
               "seconds": result.seconds}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
