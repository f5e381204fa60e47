"""Byte-level detokenization that never gives a broken character.

A byte-level BPE vocabulary (GPT-2's scheme, as our own models' tokenizers files use) stands for bytes, so a
model can emit a byte sequence that is not UTF-8: half of a character, a stray continuation byte. The
tokenizers library would turn each such sequence into U+FFFD; here the bytes of the generated tokens are
decoded as UTF-8 with every invalid sequence dropped, and a character still incomplete at the end of the
output is dropped too (Python's errors="ignore"). The streamed detokenizer holds an incomplete character back
until its last byte arrives.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Collection, Sequence

from tokenizers import Tokenizer


def byte_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in of each byte -> the byte (bytes_to_unicode, inverted)."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)}
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def is_byte_level(tok: Tokenizer) -> bool:
    """Whether the tokenizer's decoder is (or holds) the ByteLevel decoder."""
    decoder = json.loads(tok.to_str()).get("decoder") or {}
    parts = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
    return any(part.get("type") == "ByteLevel" for part in parts)


class ByteLevelText:
    """Ids -> text of a byte-level tokenizer, invalid UTF-8 dropped."""

    def __init__(self, tok: Tokenizer, skipped: Collection[int]) -> None:
        alphabet = byte_alphabet()
        special = {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
        self._bytes: dict[int, bytes] = {}
        for token, i in tok.get_vocab().items():
            if i in special or i in skipped:
                continue
            if all(c in alphabet for c in token):
                self._bytes[i] = bytes(alphabet[c] for c in token)
            else:  # an added token that is not special: its text as it stands
                self._bytes[i] = token.encode("utf-8")

    def decode(self, ids: Sequence[int]) -> str:
        """The UTF-8 text of the ids' bytes; unknown and special ids skipped, broken sequences dropped."""
        return b"".join(self._bytes.get(i, b"") for i in ids).decode("utf-8", errors="ignore")

    def stream(self) -> Callable[[int], str]:
        """A detokenizer of one output: the text each id completes ("" while a character is incomplete)."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="ignore")
        pieces = self._bytes
        return lambda token_id: decoder.decode(pieces.get(token_id, b""))
