"""Import a pretrained Hugging Face seq2seq model (Marian / OPUS-MT, M2M100, NLLB, BART, mBART-50, Pegasus,
T5, Flan-T5, mT5) into a verified bundle.

    python -m export.pretrained --model path/to/opus-mt-en-de --out bundles/en-de \\
        [--force] [--attention fused|plain|inplace] [--fp16] [--quantize int8] [--optimize]
        [--task NAME] [--task-prefix NAME=TEXT ...]

No network: --model is a local directory (config.json, model.safetensors or pytorch_model.bin, the
tokenizer files). The weights map onto model/'s Transformer (export/hf/mapping.py), the tokenizer
onto the bundle's SentencePiece files (export/hf/tokenizer.py), and the bundle is written by the
same export and verification as our own checkpoints (export/build.py `package`), as format_version 2
with the `tokenizer`, `generation` (and `languages`) objects of interface/generation.py (and a Marian
tokenizer's source_lang as `source_language`). The rules of the checkpoint's generation settings
that change generate's output (bad_words_ids, suppress_tokens, forced_eos_token_id, renormalize_logits)
become `generation`'s suppress_ids, forced_eos_at_limit and renormalize; verification decodes with
them. The bundle's beam search is transformers' own (`generation.beam_search` "transformers", with
the checkpoint's early_stopping), its begin_suppress_tokens become begin_suppress_ids, and what
generate decodes with by default (num_beams, max_length, min_length, no_repeat_ngram_size,
length_penalty, repetition_penalty) becomes `generation.defaults`: a request that leaves an option
unset decodes as transformers' pipeline does. A BART checkpoint's forced_bos_token_id becomes
`generation.forced_bos_id` (many-to-many models force the request's target language instead).
Task prefixes (T5's "summarize: ", "translate English to German: "): those of config.json's
task_specific_params, and any `--task-prefix NAME=TEXT` (over them), become `generation.tasks` (name ->
ids, export/hf/tokenizer.py `task_prefix_ids`): a request's `task` names one, and its sources are read as
that text followed by the request's. `--task NAME` makes one the default (`generation.task`), read
before every source whose request names no task.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import export.lowering.fused  # noqa: F401  (registers the "fused" lowering)
import export.lowering.inplace  # noqa: F401  (registers the "inplace" lowering)
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
from export.hf.generation import (
    forced_bos,
    generation_defaults,
    generation_rules,
    generation_search,
    generation_settings,
)
from export.hf.mapping import Pretrained, UnsupportedModel, load_pretrained, read_config
from export.hf.tokenizer import TokenizerMismatch, read_tokenizer
from export.verify.base import ParityError
from interface.generation import FORMAT_WITH_GENERATION, NO_TASK


def checkpoint_tasks(hf: dict[str, Any]) -> dict[str, str]:
    """The checkpoint's task prefixes: task name -> the `prefix` of config.json's task_specific_params."""
    tasks = hf.get("task_specific_params") or {}
    prefixes = {name: params.get("prefix") for name, params in tasks.items() if isinstance(params, dict)}
    return {name: prefix for name, prefix in prefixes.items() if isinstance(prefix, str) and prefix.strip()}


def declared_tasks(hf: dict[str, Any], task: str | None, prefixes: dict[str, str] | None) -> dict[str, str]:
    """The bundle's tasks (name -> prefix text): the checkpoint's, then `prefixes` over them; ValueError for a
    bad name, or a default `task` not among them (naming those known)."""
    for name in prefixes or {}:
        if not name or not name.strip() or name == NO_TASK:
            raise ValueError(f"a task name must be a non-empty name other than {NO_TASK!r}, got {name!r}")
    tasks = checkpoint_tasks(hf) | dict(prefixes or {})
    if task is not None and task not in tasks:
        raise ValueError(f"task {task!r} has no prefix in config.json's task_specific_params; known: "
                         f"{', '.join(sorted(tasks)) or 'none'} (or declare it with --task-prefix NAME=TEXT)")
    return tasks


def pretrained_source(model_dir: Path, opts: BuildOptions, task: str | None = None,
                      prefixes: dict[str, str] | None = None) -> tuple[ModelSource, Pretrained]:
    """The imported model, its tokenizer files and its format-2 manifest objects, ready for `package`; the
    tasks of `declared_tasks`, `task` the default; TokenizerMismatch for a given prefix (the default's, or one
    of `prefixes`) that cannot be stated."""
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model directory not found: {model_dir}")
    hf = read_config(model_dir)
    tasks = declared_tasks(hf, task, prefixes)
    model, info = load_pretrained(model_dir)
    settings = generation_settings(model_dir, hf)
    start = settings.get("decoder_start_token_id") if settings is not hf else None
    if start is not None and start != model.cfg.start_id:
        raise UnsupportedModel(f"generation_config.json starts the decoder from {start}, config.json from "
                               f"{model.cfg.start_id}")
    tok = read_tokenizer(model_dir, info.family, model.cfg, tasks, task)
    given = {task, *(prefixes or {})} & set(tok.refused_tasks)
    if given:
        raise TokenizerMismatch(tok.refused_tasks[sorted(given)[0]])
    tok.generation |= generation_rules(settings, model.cfg) | generation_search(settings, model.cfg) | \
        forced_bos(settings, model.cfg, tok.languages is not None)
    model.cfg = replace(model.cfg, bos_id=tok.special["bos"], unk_id=tok.special["unk"])
    described = {"family": info.family, "architecture": info.architecture, "model_dir": model_dir.name,
                 "weights": list(info.weight_files), "generation_defaults": generation_defaults(settings)}
    if tasks:
        described["task_prefixes"] = tasks
    if tok.refused_tasks:
        described["tasks_refused"] = tok.refused_tasks
    extra = tok.manifest() | {"pretrained": described}
    source = ModelSource(
        model=model, write_tokenizer=tok.write,
        sources=verification_sources(model, None, None, opts.verify_sources),
        weights_sha256=info.sha256, manifest=extra, format_version=FORMAT_WITH_GENERATION)
    return source, info


def import_pretrained(model_dir: Path, out: Path, opts: BuildOptions | None = None, log=lambda _: None,
                      task: str | None = None, prefixes: dict[str, str] | None = None) -> BuildResult:
    """Map, export, verify and package a Hugging Face model directory into the bundle directory `out` (with
    the tasks of `pretrained_source`)."""
    opts = opts or BuildOptions()
    model_dir = Path(model_dir)
    check_output_dir(Path(out), opts.force)  # before reading a large checkpoint
    source, info = pretrained_source(model_dir, opts, task, prefixes)
    return package(source, Path(out), opts, log, name=f"{model_dir} ({info.architecture})")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(prog="python -m export.pretrained", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="Hugging Face model directory (local)")
    ap.add_argument("--verify-sources", type=int, default=8, help="random sources decoded greedily by both")
    ap.add_argument("--task", help="the default task: start every source whose request names no task with "
                                   "this task's prefix (T5: summarization, translation_en_to_de, ...)")
    ap.add_argument("--task-prefix", action="append", default=[], metavar="NAME=TEXT",
                    help="declare a task's prefix (T5: 'summarize=summarize: '), over config.json's "
                         "(repeatable)")
    add_bundle_options(ap)
    return ap.parse_args(argv)


def task_arguments(values: list[str]) -> dict[str, str]:
    """--task-prefix NAME=TEXT values as name -> text; ValueError for one without a name."""
    tasks = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--task-prefix takes NAME=TEXT (e.g. 'summarize=summarize: '), got {value!r}")
        tasks[name.strip()] = text
    return tasks


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 on bad or unsupported input, 1 on failed verification)."""
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    opts = bundle_options(a, verify_sources=a.verify_sources)
    try:
        result = import_pretrained(a.model, a.out, opts, log=lambda msg: print(msg, file=sys.stderr),
                                   task=a.task, prefixes=task_arguments(a.task_prefix))
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
