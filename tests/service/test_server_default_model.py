"""The default bundle served on 127.0.0.1: every printable ASCII symbol, other symbols, scripts and emoji
come back as valid UTF-8 without U+FFFD, whole and streamed, and no number word the text never had."""

from __future__ import annotations

import re
import string
from collections.abc import Iterator

import grpc
import pytest

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.server import BackgroundServer
from tests.support import REPO_ROOT
from tests.support.server import MAX_BATCH, server_config

BUNDLE = REPO_ROOT / "artifacts" / "default" / "bundle"
NUMBER_WORDS = {
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "thirty",
    "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "hundred", "thousand", "million", "billion",
    "oh", "point", "minus", "plus", "percent", "degree", "degrees", "dollars", "euros", "pounds", "pence",
    "cents", "half", "quarter", "quarters", "nineties", "hundreds",
}
SCRIPTS = [
    "and 東京 were on the sign", "Tom & Jerry met @home", "named data_final_v.csv", "She typed :-) and <3",
    "Keep the % sign out of it.", "Привет, как дела у Ивана?", "Η Αθήνα είναι όμορφη.", "서울에서 만나요",
    "مرحبا بكم في المدينة", "שלום לכולם כאן", "नमस्ते दोस्तों", "The party was great 🎉🚀 and fun 👍",
    "He wrote § and « quoted » with ™ and ©.", "日本の東京と大阪へ行く", "Say ไทย to them",
]
TEXTS = [f"Keep the {c} sign out of it." for c in string.punctuation] \
    + [f"We met {c}home and {c}{c} there." for c in string.punctuation] + SCRIPTS


@pytest.fixture(scope="module")
def stub() -> Iterator[pb_grpc.TranslatorStub]:
    with BackgroundServer(server_config(BUNDLE)) as srv, grpc.insecure_channel(srv.address) as ch:
        yield pb_grpc.TranslatorStub(ch)


def invented_number_words(source: str, output: str) -> set[str]:
    """Number words (and words of the classes' readings) the output has and the source has not."""
    def words(text: str) -> set[str]:
        return {w.lower() for w in re.findall(r"[^\W\d_]+", text)}
    return (words(output) - words(source)) & NUMBER_WORDS


def test_texts_hold_no_digit():
    assert not any(re.search(r"\d", t) for t in TEXTS if t != "She typed :-) and <3")


def test_symbols_and_scripts_come_back_valid_and_without_invented_number_words(stub):
    results = []
    for start in range(0, len(TEXTS), MAX_BATCH):
        response = stub.Translate(pb.TranslateRequest(texts=TEXTS[start : start + MAX_BATCH]), timeout=120)
        raw = response.SerializeToString()
        assert pb.TranslateResponse.FromString(raw) == response  # proto3 strings parse only as valid UTF-8
        results += response.results
    for text, result in zip(TEXTS, results, strict=True):
        out = result.hypotheses[0].text
        assert "\ufffd" not in out and out.encode("utf-8", errors="strict"), (text, out)
        allowed = {"three"} if "<3" in text else set()
        assert invented_number_words(text, out) <= allowed, (text, out)


@pytest.mark.parametrize("text", SCRIPTS)
def test_streamed_pieces_are_whole_characters(stub, text):
    pieces = [m.piece for m in stub.TranslateStream(pb.TranslateRequest(texts=[text]), timeout=60)
              if m.WhichOneof("event") == "piece"]
    assert all("\ufffd" not in p.text for p in pieces)
    allowed = {"three"} if "<3" in text else set()
    assert invented_number_words(text, "".join(p.text for p in pieces)) <= allowed
