"""The families the benchmark builds, one entry each: the real checkpoint whose shape it copies, its full and
quick shapes, its builder, how CTranslate2 is given its text, its languages, and the task prefix its texts
start with. A family is one module with `FULL`, `QUICK` and `build(root, shape, seed) -> parameters`, and
one entry here:

    marian   Helsinki-NLP/opus-mt-en-de  d_model 512, 6 + 6 layers, 8 heads, d_ff 2048, vocabulary 58,101
    bart     facebook/bart-large-cnn     d_model 1024, 12 + 12 layers, 16 heads, d_ff 4096, vocabulary 50,264
    mbart50  facebook/mbart-large-50     d_model 1024, 12 + 12 layers, 16 heads, d_ff 4096, vocabulary 250,054
    t5       t5-base                     d_model 768, 12 + 12 layers, 12 heads of d_kv 64, d_ff 3072,
                                         vocabulary 32,128, relative attention buckets 32, max distance 128
                                         (no learned positions); texts start "translate English to German: "
    pegasus  google/pegasus-large        d_model 1024, 16 + 16 layers, 16 heads, d_ff 4096, vocabulary 96,103
                                         (pegasus-xsum's shape too)

The built directory is kept: a stamp (`STAMP`, written last) names the family, shape and seed it was built
with, and `family_dir` rebuilds only when they differ.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from bench.families import bart, marian, mbart50, pegasus, t5
from bench.families.text import Shape

STAMP = "bench_build.json"  # written last: a directory with it is complete


class Codec(Protocol):
    """CTranslate2's side of a model directory's text: source tokens in, text out."""

    def encode(self, text: str) -> list[str]:
        """The source tokens (special tokens included) CTranslate2 translates."""
        ...

    def decode(self, tokens: list[str]) -> str:
        """The text of generated tokens."""
        ...


class TokenizersCodec:
    """A directory's tokenizer.json (Hugging Face tokenizers, its post-processor's special tokens included;
    for a many-to-many model the source language it was saved with)."""

    def __init__(self, hf_dir: Path) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))

    def encode(self, text: str) -> list[str]:
        """The source tokens CTranslate2 translates."""
        return self.tokenizer.encode(text).tokens

    def decode(self, tokens: list[str]) -> str:
        """The text of generated tokens (special tokens skipped)."""
        ids = [self.tokenizer.token_to_id(t) for t in tokens]
        return self.tokenizer.decode([i for i in ids if i is not None], skip_special_tokens=True)


@dataclass(frozen=True)
class Family:
    """One imported family: a real checkpoint's shape, built with random weights."""

    name: str
    checkpoint: str  # the real checkpoint whose shape and generation settings it has
    full: Shape
    quick: Shape
    build: Callable[[Path, Shape, int], int]  # writes the model directory, returns the parameter count
    codec: Callable[[Path], Codec]
    languages: tuple[str, str] | None = None  # (source, target) codes of a many-to-many model
    prefix: str = ""  # written before every text (T5's task prefix), for every engine alike


FAMILIES = {f.name: f for f in (
    Family("marian", "Helsinki-NLP/opus-mt-en-de", marian.FULL, marian.QUICK, marian.build, marian.Codec),
    Family("bart", "facebook/bart-large-cnn", bart.FULL, bart.QUICK, bart.build, TokenizersCodec),
    Family("mbart50", "facebook/mbart-large-50", mbart50.FULL, mbart50.QUICK, mbart50.build, TokenizersCodec,
           languages=mbart50.LANGUAGES),
    Family("t5", "t5-base", t5.FULL, t5.QUICK, t5.build, TokenizersCodec, prefix=t5.PREFIX),
    Family("pegasus", "google/pegasus-large", pegasus.FULL, pegasus.QUICK, pegasus.build, TokenizersCodec),
)}


def family_dir(root: Path, family: str, shape: Shape, seed: int = 0, log=print) -> Path:
    """The model directory of `family` at root, built unless a complete one of the same family, shape and
    seed is there."""
    want = {"family": family, "shape": asdict(shape), "seed": seed}
    stamp = root / STAMP
    if stamp.is_file() and {k: v for k, v in json.loads(stamp.read_text()).items() if k in want} == want:
        return root
    start = time.perf_counter()
    root.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    params = FAMILIES[family].build(root, shape, seed)
    seconds = time.perf_counter() - start
    stamp.write_text(json.dumps({**want, "parameters": params, "seconds": round(seconds, 1)}) + "\n")
    log(f"built {family} in {root}: {params / 1e6:.1f}M parameters, vocabulary {shape.vocab_size}, "
        f"{seconds:.0f} s")
    return root
