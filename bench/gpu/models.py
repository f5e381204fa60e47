"""The models bench.gpu measures: the default bundle, or the opus-mt-shaped one materialized from the GPU
kit's skeleton (gpukit/skeleton.py: numpy only, so a host with no torch builds it), each with its
CTranslate2 model of the same weights when one can be had, its texts and how many tokens a decode takes."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.common.workload import DEFAULT_BUNDLE, HELD_OUT, REPO_ROOT, held_out_sources

CHECKPOINT = REPO_ROOT / "artifacts" / "default" / "model.pt"
OPUS_NEW_TOKENS = 32  # random weights rarely emit eos: every decode takes this many steps


@dataclass(frozen=True)
class Model:
    """A bundle, CTranslate2's model of its weights (or None and why), texts and the decode length."""

    name: str
    bundle: Path
    texts: list[str]
    new_tokens: int | None  # None: greedy to eos, at most the bundle's max length
    ct2_dir: Path | None = None
    ct2_vocab: list[str] | None = None  # token strings in our id order
    ct2_skipped: str = ""
    step_bytes: dict[str, int] | None = None  # variant ("base", "fp16") -> bytes a batch-1 step reads


def default_model(work: Path) -> Model:
    """The shipped default bundle; CTranslate2's model converted from its checkpoint where torch is."""
    texts = held_out_sources(HELD_OUT)
    try:
        from bench.engines.ct2 import checkpoint_vocab, convert

        vocab = checkpoint_vocab(CHECKPOINT)
        ct2 = convert(CHECKPOINT, work / "ct2-default", vocab)
    except Exception as exc:  # noqa: BLE001 - optional (no torch on the GPU host): say why
        return Model("default", DEFAULT_BUNDLE, texts, None, ct2_skipped=f"{type(exc).__name__}: {exc}")
    return Model("default", DEFAULT_BUNDLE, texts, None, ct2, vocab)


def make_skeleton(skeleton: Path, quick: bool) -> None:
    """Make the skeleton here (needs torch: the online `make gpu-check` has it), in a child process."""
    code = ("import sys; from pathlib import Path; from gpukit.skeleton_build import build_skeleton; "
            "build_skeleton(Path(sys.argv[1]), Path(sys.argv[1]).with_name('skeleton-work'), "
            "quick=sys.argv[2] == '1')")
    subprocess.run([sys.executable, "-c", code, str(skeleton), "1" if quick else "0"], cwd=REPO_ROOT,
                   check=True)


def opus_model(skeleton: Path, work: Path, log=print) -> Model:
    """The opus-mt-shaped model materialized from `skeleton` into work/opus-mt."""
    from gpukit.skeleton import info, materialize

    out = materialize(skeleton, work / "opus-mt", log=log)
    meta = info(skeleton)
    texts = json.loads((skeleton / meta["texts"]).read_text(encoding="utf-8"))
    vocab = json.loads((out / "ct2" / "shared_vocabulary.json").read_text(encoding="utf-8"))
    return Model("opus-mt", out / "bundle", texts, OPUS_NEW_TOKENS, out / "ct2", vocab,
                 step_bytes=meta["step_bytes"])
