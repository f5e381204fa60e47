"""Benchmark inputs: held-out sources, a mixed-length workload, and sources of exact token lengths.

Everything is deterministic from a seed. Lengths are counted with the bundle's own tokenizer as
the service counts them (tokenizer ids + eos) and capped at the bundle's max_len.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

from service.runtime.model.bundle import Bundle, load_bundle

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = REPO_ROOT / "artifacts" / "default" / "bundle"
HELD_OUT = REPO_ROOT / "artifacts" / "default" / "test_sample.tsv"
PAUSE_S = 0.3  # between two timed engines or servers: ONNX Runtime's idle threads stop spinning
# (sentences joined into one text, share of the texts): mostly single sentences, some long texts
MIX: tuple[tuple[int, float], ...] = ((1, 0.70), (2, 0.15), (4, 0.10), (8, 0.05))


def held_out_sources(path: Path = HELD_OUT) -> list[str]:
    """The source column of a TSV of held-out pairs (blank lines skipped)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    sources = [line.split("\t", 1)[0].strip() for line in lines]
    sources = [s for s in sources if s]
    if not sources:
        raise ValueError(f"no source sentences in {path}")
    return sources


class Lengths:
    """Source lengths as the service counts them (tokenizer ids + eos), and the bundle's limit."""

    def __init__(self, bundle: Bundle | Path) -> None:
        self.bundle = bundle if isinstance(bundle, Bundle) else load_bundle(bundle, check_hashes=False)
        self.tokenizer = Tokenizer.from_file(str(self.bundle.tokenizer_path))
        self.max_len = self.bundle.max_len
        self.eos = self.bundle.special.eos

    def ids(self, text: str) -> list[int]:
        """Source ids of a text: tokenizer ids + eos."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids + [self.eos]

    def __call__(self, text: str) -> int:
        """Source length of a text in tokens (eos included)."""
        return len(self.ids(text))


def mixed_texts(sources: Sequence[str], n: int, lengths: Lengths, seed: int = 0,
                mix: Sequence[tuple[int, float]] = MIX) -> list[str]:
    """n texts: each joins k random sources (k drawn from `mix`), dropping sources past max_len."""
    rng = random.Random(seed)
    sizes, weights = zip(*mix, strict=True)
    out = []
    for _ in range(n):
        k = rng.choices(sizes, weights)[0]
        parts = [rng.choice(sources)]
        for _ in range(k - 1):
            candidate = rng.choice(sources)
            if lengths(" ".join([*parts, candidate])) > lengths.max_len:
                break
            parts.append(candidate)
        text = " ".join(parts)
        if lengths(text) <= lengths.max_len:
            out.append(text)
    if not out:
        raise ValueError("every source is longer than the model's max_len")
    return out


def sources_of_length(sources: Sequence[str], tokens: int, count: int, lengths: Lengths,
                      seed: int = 0) -> list[list[int]]:
    """`count` sources of exactly `tokens` ids (eos included): random sentences joined, then cut."""
    if not 2 <= tokens <= lengths.max_len:
        raise ValueError(f"tokens must be within 2 .. {lengths.max_len}, got {tokens}")
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = [rng.choice(sources)]
        while len(ids := lengths.ids(" ".join(parts))) < tokens:
            parts.append(rng.choice(sources))
        out.append(ids[: tokens - 1] + [lengths.eos])
    return out
