"""The tiny model's fixtures, built once: its corpus, checkpoint, bundles (both KV-cache layouts, and one
with the int8 variant) and the texts the tests decode; and the same fixtures prebuilt into a directory
for a host without PyTorch.

The model is trained until it has learnt its task with a margin (`train_checkpoint`): every validation
pair decoded exactly by greedy search, and at every greedy step the chosen token ahead of the runner-up
by at least MIN_MARGIN nats, far more than the last bits in which CPU kernels (AVX2, AVX-512, VNNI) or
the int8 and fp16 variants move a log-prob. So no test that decodes the validation sources, the texts of
`texts()` among them, hangs on a near-tie. A model that does not get there within MAX_STEPS stops the
build with FixtureError and its figures.

`python -m tests.support.tiny OUT` writes OUT/tiny, OUT/tiny-concat, OUT/tiny-int8 (bundles) and
OUT/texts.json; the GPU kit ships them (gpukit/build.py), and with TRANSLATOR_TEST_FIXTURES=OUT the
fixtures of tests/conftest.py read them instead of training and exporting (which needs torch and the
corpus' word lists).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.corpus import TINY_MODEL_ARGS, tiny_pairs, write_tsv

PREBUILT_ENV = "TRANSLATOR_TEST_FIXTURES"
BUNDLES = {"tiny": {}, "tiny-concat": {"attention": "fused", "verify_sources": 4},  # name -> BuildOptions
           "tiny-int8": {"quantize": "int8", "cpu_variant": "int8", "verify_sources": 4}}
TEXTS_FILE = "texts.json"
PREBUILT_NAMES = (*BUNDLES, TEXTS_FILE)  # what `prebuild` writes into its directory
TRAIN_PAIRS, VALID_PAIRS = 4000, 40
MIN_MARGIN = 1.0  # nats: the least lead of each greedy token over the runner-up on the validation pairs
FIRST_STEPS, MORE_STEPS, MAX_STEPS = 600, 150, 3000  # training steps: first check, between checks, cap


class FixtureError(RuntimeError):
    """The tiny model did not learn its task with the margin the tests rely on."""


@dataclass(frozen=True)
class Fitness:
    """How well a checkpoint solves the validation pairs under greedy search."""

    exact: int  # pairs decoded exactly
    pairs: int
    margin: float  # the least lead (nats) of a greedy token over the runner-up, over every step of every pair
    worst: str  # the source of that step

    @property
    def solved(self) -> bool:
        """Every pair exact, every step with at least MIN_MARGIN of lead."""
        return self.exact == self.pairs and self.margin >= MIN_MARGIN

    def __str__(self) -> str:
        return (f"exact match {self.exact}/{self.pairs}, least greedy margin {self.margin:.3f} nats "
                f"(at least {MIN_MARGIN} wanted; on {self.worst!r})")


def valid_pairs() -> list[tuple[str, str]]:
    """The validation pairs: what the model must solve, and where the tests' texts come from."""
    return tiny_pairs(VALID_PAIRS, 1)


def write_corpus(out: Path) -> dict[str, Path]:
    """train/valid TSV files of the tiny task."""
    return {"train": write_tsv(out / "train.tsv", tiny_pairs(TRAIN_PAIRS, 0)),
            "valid": write_tsv(out / "valid.tsv", valid_pairs())}


def fitness(checkpoint: Path, pairs: list[tuple[str, str]]) -> Fitness:
    """Greedy-decode the sources of pairs with the checkpoint (PyTorch, one batch) and measure Fitness."""
    import torch

    from model.checkpoint import load_checkpoint, tokenizer_path
    from model.data import pad
    from model.tokenizer import load_tokenizer
    from model.transformer import padding_mask

    model, state = load_checkpoint(checkpoint)
    model.eval()
    tok, cfg = load_tokenizer(tokenizer_path(checkpoint, state)), model.cfg
    encoded = tok.encode_batch([s for s, _ in pairs], add_special_tokens=False)
    src = pad([e.ids + [cfg.eos_id] for e in encoded], cfg.pad_id)
    mask = padding_mask(src, cfg.pad_id)
    rows = len(pairs)
    out: list[list[int]] = [[] for _ in range(rows)]
    margin = torch.full((rows,), math.inf)
    done = torch.zeros(rows, dtype=torch.bool)
    with torch.inference_mode():
        cross, past = model.cross_kv(model.encode(src, mask)), None
        token = torch.full((rows, 1), cfg.start_id, dtype=torch.long)
        for _ in range(cfg.max_len - 1):
            logp, past, _ = model.decode(token, cross, mask, past)
            top = logp[:, -1].topk(2)
            lead = top.values[:, 0] - top.values[:, 1]
            margin = torch.where(done, margin, torch.minimum(margin, lead))
            token = top.indices[:, :1]
            for i in (~done).nonzero().flatten().tolist():
                if token[i, 0] != cfg.eos_id:
                    out[i].append(int(token[i, 0]))
            done |= token[:, 0] == cfg.eos_id
            if done.all():
                break
    exact = sum(bool(d) and tok.decode(o, skip_special_tokens=False) == t
                for o, d, (_, t) in zip(out, done.tolist(), pairs, strict=True))
    worst = int(margin.argmin())
    return Fitness(exact, rows, float(margin[worst]), pairs[worst][0])


def train_checkpoint(corpus: dict[str, Path], out: Path) -> Path:
    """The tiny model trained until it solves the validation pairs with MIN_MARGIN (checked every
    MORE_STEPS steps from FIRST_STEPS); returns the path of its last.pt, or raises FixtureError."""
    from model.data import read_tsv
    from model.train import parse_args, train

    pairs = read_tsv(corpus["valid"])
    steps = FIRST_STEPS
    while True:  # each call resumes from out/last.pt
        train(parse_args(["--train", str(corpus["train"]), "--valid", str(corpus["valid"]), "--out", str(out),
                          "--max-steps", str(steps), "--eval-every", str(MAX_STEPS), "--threads", "1",
                          *TINY_MODEL_ARGS]))
        fit = fitness(out / "last.pt", pairs)
        if fit.solved:
            print(f"tiny model: {fit} after {steps} steps", file=sys.stderr)
            return out / "last.pt"
        if steps >= MAX_STEPS:
            raise FixtureError(f"the tiny model did not learn its task in {steps} steps: {fit}. The tests "
                               "rely on it (tests/support/tiny.py); check training on this machine")
        steps += MORE_STEPS


def export_bundle(checkpoint: Path, out: Path, name: str) -> Path:
    """The checkpoint exported, verified on the validation pairs and packed into bundle `name` of BUNDLES
    (with the fp16 variant)."""
    import torch

    from export.build import BuildOptions, build_bundle

    torch.set_num_threads(1)
    out.parent.mkdir(parents=True, exist_ok=True)
    split = write_tsv(out.parent / f"{name}.valid.tsv", valid_pairs())
    build_bundle(checkpoint, out, BuildOptions(fp16=True, test_split=split, eval_size=VALID_PAIRS,
                                               **BUNDLES[name]))
    return out


def texts() -> list[str]:
    """Five validation sources of clearly different lengths: a middling one, the longest, the shortest,
    and two more (their greedy steps were checked for margin)."""
    sources = sorted({s for s, _ in valid_pairs()}, key=lambda s: (len(s), s))
    n = len(sources)
    return [sources[n // 2], sources[-1], sources[0], sources[n // 4], sources[3 * n // 4]]


def prebuilt(name: str) -> Path | None:
    """Prebuilt fixture `name` (a bundle, or TEXTS_FILE) under $TRANSLATOR_TEST_FIXTURES; None when unset."""
    root = os.environ.get(PREBUILT_ENV)
    if not root:
        return None
    path = Path(root) / name
    if not path.exists():
        raise FileNotFoundError(f"{PREBUILT_ENV}={root} has no {name} (made by python -m tests.support.tiny)")
    return path


def lay_out(out: Path, bundles: dict[str, Path], move: bool = False) -> Path:
    """The prebuilt fixtures' directory: each bundle of BUNDLES under its name (moved, or copied) and the
    texts; out is created (it must not exist or be empty)."""
    if set(bundles) != set(BUNDLES):
        raise ValueError(f"the fixtures are the bundles {', '.join(BUNDLES)}, not {', '.join(bundles)}")
    out.mkdir(parents=True, exist_ok=True)
    for name, bundle in bundles.items():
        (shutil.move if move else shutil.copytree)(bundle, out / name)
    (out / TEXTS_FILE).write_text(json.dumps(texts(), ensure_ascii=False), encoding="utf-8")
    return out


def prebuild(out: Path) -> Path:
    """Write every prebuilt fixture into out (created; must not exist)."""
    out.mkdir(parents=True)
    work = out / ".work"
    (work / "corpus").mkdir(parents=True)
    checkpoint = train_checkpoint(write_corpus(work / "corpus"), work / "run")
    bundles = {name: export_bundle(checkpoint, work / "bundles" / name, name) for name in BUNDLES}
    lay_out(out, bundles, move=True)
    shutil.rmtree(work)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.support.tiny OUT")
    print(prebuild(Path(sys.argv[1])))
