"""A random-weight model of a chosen shape, exported to a bundle, for engine comparisons.

The default model is small (d_model 192, 2 + 2 layers), so a decoder step is dominated by fixed
costs. To see how the engines compare on another shape (e.g. the d_model 256, 4-head,
3 + 3-layer post-LN model of the project's first engine measurements), this writes a checkpoint
with random weights and the default tokenizer, and exports it (verified) to `<out>/bundle`:

    python -m bench.engines.shaped --out /tmp/shaped
    python -m bench.engines --checkpoint /tmp/shaped/model.pt --bundle /tmp/shaped/bundle

Random weights seldom emit eos, so sentences decode to the model's length limit (`--max-len` - 1
steps) or close to it: a nearly forced-length workload, with the same tokens in every engine
(the engine benchmark counts mismatched sentences).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer

from bench.common.workload import DEFAULT_BUNDLE
from export.build import BuildOptions, build_bundle
from model.checkpoint import save_checkpoint
from model.config import ModelConfig
from model.transformer import Transformer

DEFAULT_TOKENIZER = DEFAULT_BUNDLE.parent / "tokenizer.json"  # the default model's, from any directory


def shaped_checkpoint(out: Path, cfg: ModelConfig, tokenizer: Path = DEFAULT_TOKENIZER, seed: int = 0
                      ) -> Path:
    """Write `<out>/model.pt` (random weights of cfg) beside a copy of the tokenizer; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tokenizer, out / "tokenizer.json")
    torch.manual_seed(seed)
    path = out / "model.pt"
    save_checkpoint(path, Transformer(cfg).eval(), step=0, tokenizer="tokenizer.json", random_weights=True)
    return path


def main(argv: list[str] | None = None) -> int:
    """CLI: checkpoint and verified bundle of the requested shape."""
    ap = argparse.ArgumentParser(prog="python -m bench.engines.shaped", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="directory for model.pt, tokenizer.json, bundle/")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=3, help="encoder layers and decoder layers, each")
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--max-len", type=int, default=48, help="longest source or output (incl. eos)")
    ap.add_argument("--pre-ln", action="store_true", help="pre-LN instead of the paper's post-LN")
    ap.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    a = ap.parse_args(argv)
    vocab = Tokenizer.from_file(str(a.tokenizer)).get_vocab_size()
    cfg = ModelConfig(vocab_size=vocab, d_model=a.d_model, n_heads=a.heads, n_encoder_layers=a.layers,
                      n_decoder_layers=a.layers, d_ff=a.d_ff, max_len=a.max_len, norm_first=a.pre_ln)
    checkpoint = shaped_checkpoint(a.out, cfg, a.tokenizer)
    result = build_bundle(checkpoint, a.out / "bundle", BuildOptions(force=True),
                          log=lambda msg: print(msg, file=sys.stderr))
    print(result.bundle_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
