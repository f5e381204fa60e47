"""The mBART-50 entry: a random-weight `MBartForConditionalGeneration` of mbart-large-50's shape with a
made-up sentencepiece.bpe.model and an `MBart50Tokenizer` over it (en_XX -> de_DE), and the checkpoint's
generation settings.

One SentencePiece unigram model is trained on both made-up languages (bench/families/text.py) to
`Shape.spm_vocab` pieces, then padded in the model file itself with made-up target words of a score below
every learned piece's (appended as ModelProto `pieces` entries in the protobuf wire format: sentencepiece
loads them, never picks them for text), until the tokenizer (fairseq's four specials, the pieces, the 52
language codes, `<mask>`) has the model's vocabulary: 250,000 pieces for mbart-large-50's 250,054.
"""

from __future__ import annotations

import struct
from pathlib import Path

import torch

from bench.families.text import Shape, bart_sizes, corpus, filler, numbered, train_spm
from export.hf.spm_model import pieces_and_scores, precompiled_charsmap

SPM = "sentencepiece.bpe.model"
LANGUAGES = ("en_XX", "de_DE")  # source, target
FULL = Shape(d_model=1024, layers=12, heads=16, d_ff=4096, vocab_size=250054, max_positions=1024)
QUICK = Shape(d_model=64, layers=2, heads=4, d_ff=256, vocab_size=1000, spm_vocab=300, lexicon=800,
              corpus=3000, max_positions=1024)
GENERATION = {  # mbart-large-50's (config.json)
    "bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2,
    "forced_eos_token_id": 2, "num_beams": 5, "max_length": 200, "early_stopping": True}
# keys of mbart-large-50's config.json that transformers no longer reads and CTranslate2's loader does
LEGACY = {"normalize_before": True, "normalize_embedding": True, "add_final_layer_norm": True}
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


def build_tokenizer(root: Path, shape: Shape, seed: int):
    """sentencepiece.bpe.model in root, padded to the model's vocabulary; the MBart50Tokenizer over it."""
    from transformers import MBart50Tokenizer

    spm = root / SPM
    texts = corpus("source", shape, seed) + corpus("target", shape, seed)
    pieces = train_spm(spm, texts, shape.spm_vocab, seed)
    specials = len(MBart50Tokenizer(vocab=pieces_and_scores(spm), src_lang=LANGUAGES[0])) - len(pieces)
    pad_to(spm, pieces, shape, seed, shape.vocab_size - specials)
    tok = MBart50Tokenizer(vocab=pieces_and_scores(spm), _spm_precompiled_charsmap=precompiled_charsmap(spm),
                           src_lang=LANGUAGES[0], tgt_lang=LANGUAGES[1],
                           bos_token="<s>")  # as mbart-large-50 states it (CTranslate2 reads it)
    if len(tok) != shape.vocab_size:
        raise RuntimeError(f"the mBART-50 tokenizer has {len(tok)} entries, not {shape.vocab_size}")
    return tok


def build(root: Path, shape: Shape, seed: int) -> int:
    """The random mBART-50 and its tokenizer saved in root; returns the parameter count."""
    from transformers import GenerationConfig, MBartConfig, MBartForConditionalGeneration

    tok = build_tokenizer(root, shape, seed)
    config = MBartConfig(
        **bart_sizes(shape),
        activation_function="gelu", scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2, forced_eos_token_id=2, tokenizer_class="MBart50Tokenizer", dropout=0.1,
        attention_dropout=0.0, activation_dropout=0.0, **LEGACY)
    torch.manual_seed(seed)
    model = MBartForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(**GENERATION)
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return sum(p.numel() for p in model.parameters())
