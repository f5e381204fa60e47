"""The tiny task: sentences of the default task with a small vocabulary, and the tiny model's flags."""

from __future__ import annotations

import random
from pathlib import Path

TINY_MODEL_ARGS = [
    "--vocab-size", "300", "--d-model", "32", "--heads", "2", "--encoder-layers", "2",
    "--decoder-layers", "2", "--d-ff", "64", "--dropout", "0.0", "--pre-ln", "--max-len", "96",
    "--max-tokens", "800", "--warmup", "50", "--lr-scale", "2.0", "--eval-size", "40",
]



def tiny_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Short sentences of the default task with a small vocabulary (learnable in seconds)."""
    from model.corpus import cardinal, ordinal

    rng = random.Random(seed)
    words = ["the", "cat", "saw", "Anna", "big", "red", "apples", "on", "day", "we"]
    pairs = []
    for _ in range(n):
        w = rng.sample(words, 2)
        written, spoken = (cardinal if rng.random() < 0.7 else ordinal)(rng)
        pairs.append((f"{w[0]} {written} {w[1]}.", f"{w[0]} {spoken} {w[1]}."))
    return pairs



def write_tsv(path: Path, pairs: list[tuple[str, str]]) -> Path:
    """Write pairs as TSV and return the path."""
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return path
