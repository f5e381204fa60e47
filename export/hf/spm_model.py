"""A SentencePiece model file read without sentencepiece's protobuf module (which needs a newer protobuf
than the one pinned): its pieces and scores through sentencepiece's processor, its normalizer's
precompiled charsmap from the protobuf wire format (ModelProto field 3 normalizer_spec, field 2
precompiled_charsmap). Used to build an mBART-50 tokenizer from a bare sentencepiece.bpe.model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import sentencepiece

NORMALIZER_SPEC, PRECOMPILED_CHARSMAP = 3, 2  # field numbers in sentencepiece_model.proto
LENGTH_DELIMITED = 2  # the wire type of bytes and embedded messages


def _varint(data: bytes, i: int) -> tuple[int, int]:
    """(value, next index) of the base-128 varint at data[i]."""
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def wire_fields(data: bytes) -> Iterator[tuple[int, int, bytes | int | None]]:
    """(field number, wire type, value) of each field of a protobuf message: an int for varints, the
    bytes of length-delimited fields, None for fixed-width ones."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            yield number, wire, value
        elif wire == LENGTH_DELIMITED:
            n, i = _varint(data, i)
            yield number, wire, data[i : i + n]
            i += n
        elif wire in (1, 5):  # fixed 64 / 32 bits
            i += 8 if wire == 1 else 4
            yield number, wire, None
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} in a SentencePiece model")


def precompiled_charsmap(path: Path) -> bytes:
    """The normalizer's precompiled charsmap of a SentencePiece model (b"" when it has none)."""
    spec = next((v for n, w, v in wire_fields(Path(path).read_bytes())
                 if n == NORMALIZER_SPEC and w == LENGTH_DELIMITED), b"")
    return next((v for n, w, v in wire_fields(spec) if n == PRECOMPILED_CHARSMAP and w == LENGTH_DELIMITED),
                b"")


def pieces_and_scores(path: Path) -> list[tuple[str, float]]:
    """Every piece of a SentencePiece model with its score, in id order."""
    sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
    return [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
