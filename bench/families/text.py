"""The made-up text every family's model is built from and decodes: two languages of random syllables,
Zipf-distributed words, 4 to 22 words a sentence; the SentencePiece models trained on them; the filler
entries that pad a vocabulary to a real checkpoint's size, appended to a trained model's file (`pad_to`).
Everything is seeded.

A real checkpoint's vocabulary (58,101 to 250,054 entries) is far larger than what a tokenizer can learn
from made-up text in a minute, so each family's tokenizer is trained to `Shape.spm_vocab` entries and its
vocabulary padded to the model's with made-up words (`filler`): entries the model embeds and may generate
like any other, that the tokenizer never produces from text.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from pathlib import Path

import sentencepiece

from export.hf.spm_model import pieces_and_scores


@dataclass(frozen=True)
class Shape:
    """The dimensions of a built model and the size of its tokenizer's training."""

    d_model: int = 512
    layers: int = 6  # encoder and decoder, each
    heads: int = 8
    d_ff: int = 2048
    vocab_size: int = 58101  # the model's embedding rows
    spm_vocab: int = 8000  # entries the tokenizer learns (per SentencePiece model)
    lexicon: int = 30000  # made-up words per language
    corpus: int = 60000  # training sentences per language
    max_positions: int = 512


SYLLABLES = {  # the two made-up languages: onsets, vowels, codas
    "source": ("b c d f g h j k l m n p r s t v w y th sh ch st br tr pl", "a e i o u ea ou ai",
               "n s t r l nd ng"),
    "target": ("b d f g h k l m n p r s t w z sch ch st gr kl pf", "a e i o u ei au ie", "n s t r ch ng er"),
}


def bart_sizes(shape: Shape) -> dict[str, int]:
    """The size keywords BartConfig, MBartConfig and PegasusConfig share, of a shape."""
    return {"vocab_size": shape.vocab_size, "d_model": shape.d_model, "encoder_layers": shape.layers,
            "decoder_layers": shape.layers, "encoder_attention_heads": shape.heads,
            "decoder_attention_heads": shape.heads, "encoder_ffn_dim": shape.d_ff,
            "decoder_ffn_dim": shape.d_ff, "max_position_embeddings": shape.max_positions}


def lexicon(language: str, n: int, seed: int) -> list[str]:
    """n distinct made-up words of one language, most frequent first (Zipf rank order)."""
    onsets, vowels, codas = (s.split() for s in SYLLABLES[language])
    rng = random.Random(f"{language}-{seed}")
    words: dict[str, None] = {}
    while len(words) < n:
        syllables = rng.choice((1, 1, 2, 2, 2, 3, 3, 4))
        word = "".join(rng.choice(onsets) + rng.choice(vowels)
                       + (rng.choice(codas) if rng.random() < 0.3 else "") for _ in range(syllables))
        words[word] = None
    return list(words)


def sentences(words: list[str], n: int, seed: int, lengths: tuple[int, int] = (4, 22)) -> list[str]:
    """n sentences of Zipf-distributed words (first letter upper case, a full stop, some commas)."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    out = []
    for _ in range(n):
        chosen = rng.choices(words, weights, k=rng.randint(*lengths))
        text = " ".join(w + ("," if rng.random() < 0.06 else "") for w in chosen).rstrip(",")
        out.append(text[0].upper() + text[1:] + ".")
    return out


def corpus(language: str, shape: Shape, seed: int) -> list[str]:
    """The sentences of one language a tokenizer is trained on."""
    return sentences(lexicon(language, shape.lexicon, seed), shape.corpus, seed)


def source_texts(shape: Shape, n: int, seed: int = 1) -> list[str]:
    """n source-language sentences that the tokenizer was not trained on (another seed)."""
    return sentences(lexicon("source", shape.lexicon, 0), n, 10_000 + seed)


def filler(shape: Shape, seed: int, prefix: str = "\u2581") -> list[str]:
    """Made-up target-language words (with `prefix`, the tokenizer's word-start mark) to pad a vocabulary,
    most frequent first."""
    return [prefix + w for w in lexicon("target", shape.lexicon, seed)]


def numbered(prefix: str, k: int) -> str:
    """The k-th numbered filler entry, for when the made-up words run out (no text has digits)."""
    return f"{prefix}w{k}"


def train_spm(path: Path, texts: list[str], vocab_size: int, seed: int, **ids: int) -> list[str]:
    """A SentencePiece unigram model of the texts at path (its special ids as sentencepiece's defaults, or
    as given: unk_id, bos_id, eos_id, pad_id, -1 for none); returns its pieces in id order."""
    prefix = path.with_name(path.name + ".train")
    sentencepiece.set_random_generator_seed(seed)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_prefix=str(prefix), vocab_size=vocab_size, model_type="unigram",
        character_coverage=1.0, hard_vocab_limit=False, num_threads=2, minloglevel=2, **ids)
    prefix.with_name(prefix.name + ".model").replace(path)
    prefix.with_name(prefix.name + ".vocab").unlink()
    sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


PIECES, SCORE, LENGTH_DELIMITED, FIXED32 = 1, 2, 2, 5  # sentencepiece_model.proto field numbers, wire types


def _varint(n: int) -> bytes:
    """n as a protobuf base-128 varint."""
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def piece_entry(piece: str, score: float) -> bytes:
    """One ModelProto `pieces` field (a SentencePiece of type NORMAL, the default) in the wire format."""
    body = (_varint(1 << 3 | LENGTH_DELIMITED) + _varint(len(piece.encode())) + piece.encode()
            + _varint(SCORE << 3 | FIXED32) + struct.pack("<f", score))
    return _varint(PIECES << 3 | LENGTH_DELIMITED) + _varint(len(body)) + body


def pad_spm(path: Path, words: list[str], score: float) -> None:
    """Append `words` to a SentencePiece model file as pieces of `score`."""
    with path.open("ab") as f:
        f.write(b"".join(piece_entry(w, score) for w in words))


def pad_to(spm: Path, pieces: list[str], shape: Shape, seed: int, rows: int) -> None:
    """Append filler words (then numbered ones) the trained model lacks, below its lowest score, until its
    `pieces` number `rows`."""
    lowest = min(s for _, s in pieces_and_scores(spm))
    known = set(pieces)
    words = [w for w in filler(shape, seed) if w not in known]
    words += [numbered("\u2581", k) for k in range(shape.vocab_size)]
    pad_spm(spm, words[: rows - len(pieces)], lowest - 10.0)
