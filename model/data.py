"""Parallel corpus I/O and batching by token count."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import Tensor


class CorpusError(ValueError):
    """A missing or malformed corpus file."""


def read_tsv(path: str | Path) -> list[tuple[str, str]]:
    """Read `source<TAB>target` lines; fail with the file and line number on bad input."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}")
    pairs = []
    with path.open(encoding="utf-8", newline="\n") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                raise CorpusError(
                    f"{path}:{n}: expected 'source<TAB>target' with two non-empty fields, "
                    f"got {len(parts)} field(s): {line[:80]!r}"
                )
            pairs.append((parts[0], parts[1]))
    if not pairs:
        raise CorpusError(f"corpus file is empty: {path}")
    return pairs


@dataclass
class Example:
    """One encoded pair: source ids + eos, target ids + eos (bos is added at batching)."""

    src: list[int]
    tgt: list[int]


def encode_pairs(tok: Tokenizer, pairs: list[tuple[str, str]], eos_id: int, max_len: int) -> list[Example]:
    """Tokenize pairs; drop those longer than max_len tokens on either side."""
    srcs = tok.encode_batch([s for s, _ in pairs], add_special_tokens=False)
    tgts = tok.encode_batch([t for _, t in pairs], add_special_tokens=False)
    out = []
    for s, t in zip(srcs, tgts, strict=True):
        if len(s.ids) + 1 <= max_len and len(t.ids) + 2 <= max_len:
            out.append(Example(s.ids + [eos_id], t.ids + [eos_id]))
    return out


@dataclass
class Batch:
    """Padded tensors: src (B, S), tgt_in = bos + y (B, T), tgt_out = y + eos (B, T)."""

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor

    @property
    def n_tokens(self) -> int:
        """Target tokens that count in the loss."""
        return int((self.tgt_out != 0).sum())

    def to(self, device: torch.device | str) -> Batch:
        """Move to a device."""
        return Batch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device))


def pad(seqs: list[list[int]], pad_id: int) -> Tensor:
    """Right-pad lists of ids into a (B, L) long tensor."""
    out = torch.full((len(seqs), max(map(len, seqs))), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def collate(examples: list[Example], pad_id: int, bos_id: int) -> Batch:
    """Build a Batch from examples."""
    return Batch(
        pad([e.src for e in examples], pad_id),
        pad([[bos_id] + e.tgt[:-1] for e in examples], pad_id),
        pad([e.tgt for e in examples], pad_id),
    )


def token_batches(
    examples: list[Example], max_tokens: int, pad_id: int, bos_id: int, rng: random.Random
) -> Iterator[Batch]:
    """One epoch of batches of at most ~max_tokens padded tokens, grouping similar lengths."""
    order = sorted(range(len(examples)), key=lambda i: (len(examples[i].tgt), rng.random()))
    groups, cur, longest = [], [], 0
    for i in order:
        n = max(len(examples[i].src), len(examples[i].tgt))
        if cur and max(longest, n) * (len(cur) + 1) > max_tokens:
            groups.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        groups.append(cur)
    rng.shuffle(groups)
    for g in groups:
        yield collate([examples[i] for i in g], pad_id, bos_id)
