"""Text <-> token ids of a bundle, behind one Protocol: a Hugging Face tokenizers file (our own models) or
SentencePiece models with a vocabulary (imported Marian / M2M100 / NLLB checkpoints).

Both give the ids of a text's pieces only: the Runner adds the source prefix (a language id) and suffix (eos)
of the bundle's `generation` / `languages` (interface/generation.py). Decoding skips special tokens (and
language ids), as transformers' decode(..., skip_special_tokens=True) does.

SentencePiece, as transformers' MarianTokenizer / M2M100Tokenizer with the same files: the text is split at
the strings of the special tokens (pad, bos, eos, unk, languages: they stand for their ids, as transformers'
added tokens do), a leading `>>xx<<` is one piece when the vocabulary has such codes (multilingual Marian),
the source model splits the rest into pieces and `vocab` maps them to ids (a missing piece is unk). Decoding
maps ids to pieces through the inverted vocab (an id without a piece is skipped), the target model joins them
with decode_pieces, and "▁" left in pieces the model does not know becomes a space, then surrounding
whitespace is stripped (Marian's convert_tokens_to_string; transformers 5's MarianTokenizer.decode uses the
source model unless use_source_tokenizer=False).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Protocol

import sentencepiece
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from interface.generation import TokenizerSpec
from service.domain.errors import BundleError
from service.runtime.model.bytelevel import ByteLevelText, is_byte_level

SPACE = "\u2581"  # SentencePiece's word-boundary mark
INCOMPLETE = "\ufffd"  # what decoding gives for bytes of a character still incomplete


class TextTokenizer(Protocol):
    """A bundle's tokenizer: text -> piece ids, ids -> text (whole, or streamed token by token)."""

    vocab_size: int  # every id it gives is below this
    longest_token: int  # characters of its longest vocabulary entry

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text's pieces (no special tokens added)."""
        ...

    def encode_target(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each target-language text's pieces (no special tokens added): what the model
        generates for it (a target prefix, a scored translation, a suppressed word)."""
        ...

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where each id of encode([text])[0] stands in `text`: (start, end) str indices, one per id."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of generated ids, special tokens skipped."""
        ...

    def token(self, token_id: int) -> str:
        """The vocabulary string of an id ("" for none)."""
        ...

    def stream(self) -> Callable[[int], str]:
        """A detokenizer of one output: fed each generated id, it returns the text that id adds
        ("" while none is complete); the pieces add up to decode() of all ids."""
        ...


class JsonTokenizer:
    """A Hugging Face tokenizers file (tokenizer.json), as our own models' bundles have; a byte-level one
    decodes through ByteLevelText (service/runtime/model/bytelevel.py): never a broken character."""

    def __init__(self, path: Path, skipped: Collection[int] = ()) -> None:
        self._tok = Tokenizer.from_file(str(path))
        self._tok.no_padding()  # each text's own ids, whatever the file says (a saved padding would pad them)
        self._tok.no_truncation()
        self._skipped = frozenset(skipped)  # language ids, skipped even when the file does not mark them
        self._bytes = ByteLevelText(self._tok, self._skipped) if is_byte_level(self._tok) else None
        vocab = self._tok.get_vocab()
        self.vocab_size = max(vocab.values(), default=-1) + 1
        self.longest_token = max((len(token) for token in vocab), default=1)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text's pieces (no special tokens added)."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def encode_target(self, texts: Sequence[str]) -> list[list[int]]:
        """One tokenizer for both sides: as encode."""
        return self.encode(texts)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The tokenizers library's character offsets of the text's ids."""
        return [tuple(o) for o in self._tok.encode(text, add_special_tokens=False).offsets]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of generated ids, special tokens skipped (byte-level: invalid UTF-8 dropped)."""
        if self._bytes:
            return self._bytes.decode(ids)
        kept = [i for i in ids if i not in self._skipped] if self._skipped else list(ids)
        return self._tok.decode(kept, skip_special_tokens=True)

    def token(self, token_id: int) -> str:
        """The vocabulary string of an id ("" for none)."""
        return self._tok.id_to_token(token_id) or ""

    def stream(self) -> Callable[[int], str]:
        """The tokenizers library's DecodeStream of one output (byte-level: ByteLevelText's stream)."""
        if self._bytes:
            return self._bytes.stream()
        stream, tok, skipped = DecodeStream(skip_special_tokens=True), self._tok, self._skipped
        return lambda token_id: "" if token_id in skipped else stream.step(tok, token_id) or ""


class SentencePieceTokenizer:
    """SentencePiece source and target models with a vocabulary (piece -> id) of the model's ids."""

    def __init__(self, source: Path, target: Path, vocab: Path, unk: int, special: Collection[int]) -> None:
        self._source = sentencepiece.SentencePieceProcessor(model_file=str(source))
        same = target.resolve() == source.resolve()
        self._target = self._source if same else sentencepiece.SentencePieceProcessor(model_file=str(target))
        self._ids = _read_vocab(vocab)
        self._pieces = {i: piece for piece, i in self._ids.items()}
        self._unk, self._skipped = unk, frozenset(special)
        self._special = {piece: i for i in self._skipped if (piece := self._pieces.get(i))}
        longest_first = "|".join(map(re.escape, sorted(self._special, key=len, reverse=True)))
        self._split = re.compile(f"({longest_first})") if longest_first else None
        self._codes = any(p.startswith(">>") and p.endswith("<<") for p in self._ids)
        self.vocab_size = max(self._ids.values(), default=-1) + 1
        self.longest_token = max((len(piece) for piece in self._ids), default=1)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text's pieces (no special tokens added)."""
        return [self._encode(text) for text in texts]

    def encode_target(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text's pieces through the target model (transformers' text_target)."""
        return [self._encode(text, self._target) for text in texts]

    def _encode(self, text: str, model: sentencepiece.SentencePieceProcessor | None = None) -> list[int]:
        """Ids of one text: special-token strings as their ids, the rest through `model` (the source's)."""
        return [i for i, _ in self._pieces_of(text, model or self._source)]

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where the source model's pieces (and the special-token strings) stand in the text."""
        return [span for _, span in self._pieces_of(text, self._source)]

    def _pieces_of(self, text: str, model: sentencepiece.SentencePieceProcessor
                   ) -> list[tuple[int, tuple[int, int]]]:
        """(id, (start, end)) of each piece of the text, as _encode splits it."""
        out: list[tuple[int, tuple[int, int]]] = []
        at = 0
        for part in self._split.split(text) if self._split else [text]:
            base, at = at, at + len(part)
            if part in self._special:
                out.append((self._special[part], (base, at)))
                continue
            if self._codes and part.startswith(">>") and (end := part.find("<<")) != -1:  # a language code
                out.append((self._ids.get(part[: end + 2], self._unk), (base, base + end + 2)))
                base, part = base + end + 2, part[end + 2 :]
            if part:
                chars = _char_index(part)
                out += [(self._ids.get(p.piece, self._unk), (base + chars[p.begin], base + chars[p.end]))
                        for p in model.encode(part, out_type="proto").pieces]
        return out

    def decode(self, ids: Sequence[int]) -> str:
        """Text of generated ids, special tokens (and ids without a piece) skipped."""
        return self._text([self._pieces[i] for i in ids if i not in self._skipped and i in self._pieces])

    def _text(self, pieces: list[str]) -> str:
        """The target model's text of pieces."""
        return self._target.decode_pieces(pieces).replace(SPACE, " ").strip()

    def token(self, token_id: int) -> str:
        """The vocabulary string of an id ("" for none)."""
        return self._pieces.get(token_id, "")

    def stream(self) -> Callable[[int], str]:
        """Decodes the pieces so far at each id and returns what extends the text given out; trailing
        whitespace (stripped unless more follows) and incomplete characters wait."""
        pieces: list[str] = []
        given = [""]

        def step(token_id: int) -> str:
            """The text this id adds."""
            if token_id in self._skipped or token_id not in self._pieces:
                return ""
            pieces.append(self._pieces[token_id])
            text = self._text(pieces).rstrip(INCOMPLETE)
            if len(text) <= len(given[0]) or not text.startswith(given[0]):
                return ""
            new, given[0] = text[len(given[0]):], text
            return new

        return step


def _char_index(text: str) -> list[int]:
    """For each UTF-8 byte offset of text (and its end), the index of the character it falls in."""
    index = [0] * (len(text.encode("utf-8", errors="surrogatepass")) + 1)
    at = 0
    for i, c in enumerate(text):
        width = len(c.encode("utf-8", errors="surrogatepass"))
        index[at : at + width] = [i] * width
        at += width
    index[at:] = [len(text)] * (len(index) - at)
    return index


def _read_vocab(path: Path) -> dict[str, int]:
    """A vocabulary file: a JSON object of piece -> id; BundleError otherwise."""
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"vocabulary {path} cannot be read: {e}") from None
    if not isinstance(vocab, dict) or not all(isinstance(i, int) and i >= 0 for i in vocab.values()):
        raise BundleError(f"vocabulary {path} must be a JSON object of piece -> id (ids >= 0)")
    return vocab


def load_tokenizer(spec: TokenizerSpec, root: Path, unk: int, special: Collection[int],
                   languages: Collection[int] = ()) -> TextTokenizer:
    """The tokenizer a bundle's `tokenizer` object describes (files relative to root); `special`:
    ids decoding skips (with the language ids) and whose strings in a text stand for them."""
    if spec.kind == "tokenizers":
        return JsonTokenizer(root / spec.file, languages)
    return SentencePieceTokenizer(root / spec.source_model, root / spec.target_model, root / spec.vocab, unk,
                                  {*special, *languages})
