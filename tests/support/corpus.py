"""The tiny task: sentences of one to three clauses "<word> <number> <word>." whose number (0-99, or an
ordinal 1st-99th) is spelled out, a small vocabulary, and the tiny model's flags. A model of this size
learns it exactly in about a thousand steps (tests/support/tiny.py checks that it did)."""

from __future__ import annotations

import random
from pathlib import Path

TINY_MODEL_ARGS = [
    "--vocab-size", "300", "--d-model", "64", "--heads", "2", "--encoder-layers", "2",
    "--decoder-layers", "2", "--d-ff", "128", "--dropout", "0.0", "--pre-ln", "--max-len", "96",
    "--max-tokens", "800", "--warmup", "50", "--lr-scale", "0.5", "--eval-size", "40",
]
WORDS = ["the", "cat", "saw", "Anna", "big", "red", "apples", "on", "day", "we"]
MAX_CLAUSES = 3


def number(rng: random.Random) -> tuple[str, str]:
    """A (written, spoken) number: a cardinal 0-99 (70%) or an ordinal 1st-99th, its digit count uniform."""
    from num2words import num2words  # the training extra's (a GPU kit's venv has the prebuilt fixtures)

    from textnorm.corpus import ordinal_suffix

    digits = rng.randint(1, 2)
    n = rng.randint(0 if digits == 1 else 10, 10**digits - 1)
    if rng.random() < 0.7:
        return str(n), num2words(n)
    n = max(1, n)
    return f"{n}{ordinal_suffix(n)}", num2words(n, to="ordinal")


def tiny_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """n (source, target) pairs of the tiny task, 1 to MAX_CLAUSES clauses each (learnable in seconds)."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        source, target = [], []
        for _ in range(rng.randint(1, MAX_CLAUSES)):
            first, last = rng.sample(WORDS, 2)
            written, spoken = number(rng)
            source.append(f"{first} {written} {last}.")
            target.append(f"{first} {spoken} {last}.")
        pairs.append((" ".join(source), " ".join(target)))
    return pairs


def write_tsv(path: Path, pairs: list[tuple[str, str]]) -> Path:
    """Write pairs as TSV and return the path."""
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return path
