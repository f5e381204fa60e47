"""Byte-level detokenization (service/runtime/model/bytelevel.py): the bytes of the generated tokens become
UTF-8 text with every broken sequence dropped, whole or streamed, never U+FFFD."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from service.runtime.model.bytelevel import byte_alphabet, is_byte_level
from service.runtime.model.tokenization import JsonTokenizer
from tests.support import REPO_ROOT

TOKENIZER = REPO_ROOT / "artifacts" / "default" / "tokenizer.json"


@pytest.fixture(scope="module")
def tok() -> JsonTokenizer:
    return JsonTokenizer(TOKENIZER)


@pytest.fixture(scope="module")
def byte_ids() -> dict[int, int]:
    """byte -> the id of the token that stands for that one byte."""
    raw, alphabet = Tokenizer.from_file(str(TOKENIZER)), byte_alphabet()
    return {b: raw.token_to_id(c) for c, b in alphabet.items()}


def ids_of(data: bytes, byte_ids: dict[int, int]) -> list[int]:
    """One single-byte token per byte."""
    return [byte_ids[b] for b in data]


def stream(tok: JsonTokenizer, ids: list[int]) -> list[str]:
    """What the streamed detokenizer gives for each id."""
    step = tok.stream()
    return [step(i) for i in ids]


def test_the_alphabet_is_gpt2s_one_printable_character_per_byte():
    alphabet = byte_alphabet()
    assert sorted(alphabet.values()) == list(range(256))
    assert alphabet["a"] == ord("a") and alphabet["Ġ"] == ord(" ") and alphabet["Ċ"] == ord("\n")
    assert is_byte_level(Tokenizer.from_file(str(TOKENIZER)))


@pytest.mark.parametrize(("data", "text"), [
    ("東京 ok".encode(), "東京 ok"),
    (b"\xe6\x9d ok", " ok"),  # the first two bytes of 東, then text
    (b"a\xe4" + "京".encode(), "a京"),  # a lone lead byte
    (b"\xbf\xbfTom & Jerry", "Tom & Jerry"),  # stray continuation bytes
    ("🎉".encode()[:3], ""),  # an emoji cut short at the end
    (b"\xc0\xafx\xed\xa0\x80y", "xy"),  # an overlong slash and a surrogate are not UTF-8
    (b"\xf4\x90\x80\x80z", "z"),  # above U+10FFFF
])
def test_broken_sequences_are_dropped_and_the_rest_kept(tok, byte_ids, data, text):
    ids = ids_of(data, byte_ids)
    assert tok.decode(ids) == text
    assert "".join(stream(tok, ids)) == text


def test_the_stream_holds_a_character_back_until_its_last_byte(tok, byte_ids):
    assert stream(tok, ids_of("a東🎉".encode(), byte_ids)) == ["a", "", "", "東", "", "", "", "🎉"]


def test_special_tokens_are_skipped(tok, byte_ids):
    ids = [1, *ids_of(b"ab", byte_ids), 3, 0, *ids_of(b"c", byte_ids), 2]
    assert tok.decode(ids) == "abc" and "".join(stream(tok, ids)) == "abc"
