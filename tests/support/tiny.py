"""The tiny model's fixtures, built once: its corpus, checkpoint, bundles (both KV-cache layouts, and one
with the int8 variant) and the texts the tests decode; and the same fixtures prebuilt into a directory
for a host without PyTorch.

`python -m tests.support.tiny OUT` writes OUT/tiny, OUT/tiny-concat, OUT/tiny-int8 (bundles) and
OUT/texts.json; the GPU kit ships them (gpukit/build.py), and with TRANSLATOR_TEST_FIXTURES=OUT the
fixtures of tests/conftest.py read them instead of training and exporting (which needs torch and the
corpus' word lists).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from tests.support.corpus import TINY_MODEL_ARGS, tiny_pairs, write_tsv

PREBUILT_ENV = "TRANSLATOR_TEST_FIXTURES"
BUNDLES = {"tiny": {}, "tiny-concat": {"attention": "fused", "verify_sources": 4},  # name -> BuildOptions
           "tiny-int8": {"quantize": "int8", "cpu_variant": "int8", "verify_sources": 4}}
TEXTS_FILE = "texts.json"


def write_corpus(out: Path) -> dict[str, Path]:
    """train/valid TSV files of the tiny task."""
    return {"train": write_tsv(out / "train.tsv", tiny_pairs(400, 0)),
            "valid": write_tsv(out / "valid.tsv", tiny_pairs(40, 1))}


def train_checkpoint(corpus: dict[str, Path], out: Path) -> Path:
    """A tiny model trained for a few hundred steps; returns the path of its last.pt."""
    from model.train import parse_args, train

    args = parse_args(["--train", str(corpus["train"]), "--valid", str(corpus["valid"]), "--out", str(out),
                       "--max-steps", "150", "--eval-every", "150", *TINY_MODEL_ARGS])
    train(args)
    return out / "last.pt"


def export_bundle(checkpoint: Path, out: Path, name: str) -> Path:
    """The checkpoint exported, verified and packed into bundle `name` of BUNDLES (with the fp16 variant)."""
    import torch

    from export.build import BuildOptions, build_bundle

    torch.set_num_threads(1)
    build_bundle(checkpoint, out, BuildOptions(fp16=True, **BUNDLES[name]))
    return out


def texts() -> list[str]:
    """Sources of the tiny task of clearly different lengths."""
    pairs = tiny_pairs(12, 7)
    long = f"{pairs[1][0]} {pairs[2][0]} {pairs[3][0]}"
    return [pairs[0][0], long, "we 5", pairs[4][0], f"{pairs[5][0]} 90"]


def prebuilt(name: str) -> Path | None:
    """Prebuilt fixture `name` (a bundle, or TEXTS_FILE) under $TRANSLATOR_TEST_FIXTURES; None when unset."""
    root = os.environ.get(PREBUILT_ENV)
    if not root:
        return None
    path = Path(root) / name
    if not path.exists():
        raise FileNotFoundError(f"{PREBUILT_ENV}={root} has no {name} (made by python -m tests.support.tiny)")
    return path


def prebuild(out: Path) -> Path:
    """Write every prebuilt fixture into out (created; must not exist)."""
    out.mkdir(parents=True)
    work = out / ".work"
    (work / "corpus").mkdir(parents=True)
    checkpoint = train_checkpoint(write_corpus(work / "corpus"), work / "run")
    for name in BUNDLES:
        export_bundle(checkpoint, out / name, name)
    (out / TEXTS_FILE).write_text(json.dumps(texts(), ensure_ascii=False), encoding="utf-8")
    shutil.rmtree(work)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.support.tiny OUT")
    print(prebuild(Path(sys.argv[1])))
