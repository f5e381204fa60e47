"""The bundle tokenizers (service/runtime/model/tokenization.py) give the ids and text of transformers'
tokenizers of the same files: MarianTokenizer and M2M100Tokenizer over tiny SentencePiece models,
NllbTokenizer and BART's byte-level BPE through their tokenizers files; and the tokenizers file of our
own bundles as the library does, but for a broken byte sequence, which is dropped."""

from __future__ import annotations

import json
import random
import unicodedata
import warnings

import pytest
from tokenizers import Tokenizer

from service.domain.types import DecodeOptions
from service.runtime.model.tokenization import JsonTokenizer, SentencePieceTokenizer
from service.runtime.runner import Runner
from tests.support.pretrained import (
    UNKNOWN,
    hard_texts,
    m2m100_tokenizer,
    pieces_of,
    sentences,
    train_sentencepiece,
    vocabulary,
    write_format2_bundle,
)

MARIAN_SPECIAL = ["</s>", "<unk>", "<pad>"]


@pytest.fixture(scope="module")
def marian(marian_bundle):
    """transformers' MarianTokenizer of the Marian-like bundle's files."""
    from transformers import MarianTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses" (only for its normalize())
        return MarianTokenizer(str(marian_bundle / "source.spm"), str(marian_bundle / "target.spm"),
                               str(marian_bundle / "vocab.json"))


def random_ids(vocab: dict[str, int], n: int, seed: int) -> list[list[int]]:
    """Id sequences of every kind of vocabulary entry, special tokens included."""
    rng, ids = random.Random(seed), sorted(set(vocab.values()))
    return [[rng.choice(ids) for _ in range(rng.randint(0, 14))] for _ in range(n)]


def streamed(runner: Runner, ids: list[int]) -> str:
    """The pieces a runner's tokenizer streams for ids, joined."""
    step = runner.tokenizer.stream()
    return "".join(step(i) for i in ids)


# ----- our own bundles: the tokenizers file, as the library but for broken UTF-8 -------------------
def test_tokenizers_file_behaves_as_the_tokenizers_library(runner, texts):
    raw = Tokenizer.from_file(str(runner.bundle.tokenizer_path))
    tok = runner.tokenizer
    assert isinstance(tok, JsonTokenizer)
    assert tok.encode(texts) == [e.ids for e in raw.encode_batch(texts, add_special_tokens=False)]
    assert runner.encode_texts(texts) == [[*e.ids, runner.special.eos] for e in raw.encode_batch(texts)]
    for ids in random_ids(raw.get_vocab(), 50, 0):  # byte-level: a broken sequence is dropped, not U+FFFD
        assert tok.decode(ids) == raw.decode(ids, skip_special_tokens=True).replace("\ufffd", "")
        assert streamed(runner, ids) == tok.decode(ids)
    assert [tok.token(i) for i in range(5)] == [raw.id_to_token(i) for i in range(5)]
    assert tok.vocab_size == raw.get_vocab_size() and tok.longest_token == max(map(len, raw.get_vocab()))


# ----- Marian: source and target SentencePiece models, one vocab.json --------------------------------
def test_marian_sources_are_marian_tokenizer_ids(marian_runner, marian):
    texts = [t for t in hard_texts(300, 0, extra=MARIAN_SPECIAL) if t.strip()]
    assert isinstance(marian_runner.tokenizer, SentencePieceTokenizer)
    got = marian_runner.encode_texts(texts)  # pieces + the bundle's source_suffix [0] (Marian's eos)
    want = [marian(t).input_ids for t in texts]
    assert got == want
    unk = marian_runner.special.unk
    assert sum(ids.count(unk) for ids in got) > 20  # unknown characters were there
    assert any(marian_runner.special.pad in ids for ids in got)  # a special token's string was


def test_marian_text_is_marian_tokenizer_text(marian_runner, marian):
    vocab = json.loads((marian_runner.bundle.path / "vocab.json").read_text())
    sources = marian_runner.encode_texts([t for t in hard_texts(100, 1) if t.strip()])
    for ids in [*random_ids(vocab, 300, 1), *sources]:
        want = marian.decode(ids, skip_special_tokens=True, use_source_tokenizer=False)  # the target model
        assert marian_runner.decode_tokens(ids) == want
        assert streamed(marian_runner, ids) == want  # no byte pieces here: nothing incomplete at the end
    assert marian_runner.tokenizer.token(vocab["<pad>"]) == "<pad>"


def test_multilingual_marian_language_code_is_one_piece(tmp_path):
    from transformers import MarianTokenizer

    codes = [">>de<<", ">>fr<<"]
    spm = train_sentencepiece(tmp_path / "m.spm", sentences(300, 3), user_pieces=codes)
    vocab = vocabulary(pieces_of([spm]), ["</s>", "<unk>"], ["<pad>"], seed=2)
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    ours = SentencePieceTokenizer(spm, spm, tmp_path / "vocab.json", vocab["<unk>"],
                                  [vocab[s] for s in MARIAN_SPECIAL])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        marian = MarianTokenizer(str(spm), str(spm), str(tmp_path / "vocab.json"))
    texts = [">>de<< the cat", ">>fr<<Anna 12", ">>xx<< we", "the >>de<< cat", ">>de<<"]
    assert [ids + [vocab["</s>"]] for ids in ours.encode(texts)] == [marian(t).input_ids for t in texts]


# ----- M2M100: one SentencePiece model, language tokens after the vocabulary ------------------------
def test_m2m100_sources_are_m2m100_tokenizer_ids(m2m_runner, m2m_files):
    tok = m2m100_tokenizer(m2m_files["vocab"], m2m_files["spm"])
    texts = [t for t in hard_texts(120, 2, extra=["</s>", "<unk>", "__de__", *UNKNOWN]) if t.strip()]
    for source in ("en", "de", "ja"):
        tok.src_lang = source
        prefix = m2m_runner.resolve(DecodeOptions(source_language=source, target_language="en")).source_prefix
        assert m2m_runner.encode_texts(texts, prefix) == [tok(t).input_ids for t in texts]


def test_m2m100_text_is_m2m100_tokenizer_text(m2m_runner, m2m_files):
    tok = m2m100_tokenizer(m2m_files["vocab"], m2m_files["spm"])
    for ids in random_ids(tok.get_vocab(), 300, 3):  # language tokens, bos, eos, pad, unk included
        want = tok.decode(ids, skip_special_tokens=True)
        assert m2m_runner.decode_tokens(ids) == want == streamed(m2m_runner, ids)


# ----- NLLB: a tokenizers file with language tokens ---------------------------------------------------
def test_nllb_tokenizers_file_with_languages_gives_nllb_tokenizer_ids(tmp_path, tiny_bundle):
    from transformers import NllbTokenizer

    spm = train_sentencepiece(tmp_path / "bpe.model", sentences(300, 4), model_type="bpe")
    vocab = vocabulary(pieces_of([spm]), ["<s>", "<pad>", "</s>", "<unk>"], [], seed=3)
    codes = ["eng_Latn", "deu_Latn", "fra_Latn"]
    nllb = NllbTokenizer(vocab=vocab, additional_special_tokens=codes)
    nllb.save_pretrained(tmp_path / "nllb")
    ids = {c: nllb.convert_tokens_to_ids(c) for c in codes}
    files = {"tokenizer.json": (tmp_path / "nllb/tokenizer.json").read_bytes()}
    bundle = write_format2_bundle(
        tiny_bundle, tmp_path / "bundle", files, {"kind": "tokenizers", "file": "tokenizer.json"},
        generation={"decoder_start_id": 2, "source_suffix": [2]}, drop=(),
        languages={"codes": ids, "source_prefix": True, "forced_target": True},
        special={"pad": 1, "bos": 0, "eos": 2, "unk": 3})
    runner = Runner(bundle, providers=["CPUExecutionProvider"])
    texts = [t for t in hard_texts(80, 4, extra=["</s>", "deu_Latn"]) if t.strip()]
    for source in codes:
        nllb.src_lang = source
        options = runner.resolve(DecodeOptions(source_language=source, target_language="fra_Latn"))
        assert runner.encode_texts(texts, options.source_prefix) == [nllb(t).input_ids for t in texts]
    for out in random_ids(nllb.get_vocab(), 100, 4):
        want = nllb.decode(out, skip_special_tokens=True)
        assert runner.decode_tokens(out) == want
        assert streamed(runner, out) == want or "\ufffd" in want
    assert runner.decode_tokens([ids["deu_Latn"], *runner.encode_texts(["the cat"])[0]]) == "the cat"


def test_bart_byte_level_file_gives_bart_tokenizer_ids_text_and_stream(tmp_path, tiny_bundle):
    """BART's tokenizers file, saved with padding set (transformers leaves it set after padding=True): the
    source is <s> (generation.source_prefix) + the text's own ids + </s>, text and stream as BART's decode."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import BartTokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(sentences(300, 4), vocab_size=290, show_progress=False,  # tiny_bundle: 300
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
    bpe.save_model(str(tmp_path))
    bart = BartTokenizer(vocab=str(tmp_path / "vocab.json"), merges=str(tmp_path / "merges.txt"))
    raw = Tokenizer.from_str(bart.backend_tokenizer.to_str())
    raw.enable_padding(pad_id=1, pad_token="<pad>", length=40)
    bundle = write_format2_bundle(
        tiny_bundle, tmp_path / "bundle", {"tokenizer.json": raw.to_str().encode()},
        {"kind": "tokenizers", "file": "tokenizer.json"}, drop=("tokenizer.json",),
        generation={"decoder_start_id": 2, "source_suffix": [2], "source_prefix": [0]},
        special={"pad": 1, "bos": 0, "eos": 2, "unk": 3})
    runner = Runner(bundle, providers=["CPUExecutionProvider"])
    texts = [t for t in hard_texts(80, 4, extra=["</s>", "<s>"]) if t.strip()] + ["héllo 日本!", "the  cat"]
    assert runner.encode_texts(texts) == [bart(t).input_ids for t in texts]
    for out in random_ids(bart.get_vocab(), 100, 4):
        want = bart.decode(out, skip_special_tokens=True)
        assert runner.decode_tokens(out) == want or "\ufffd" in want
        assert streamed(runner, out) == runner.decode_tokens(out)
    assert runner.decode_tokens([0, *runner.encode_texts(["the cat"])[0]]) == "the cat"


# ----- spans: where each source id stands in the text ----------------------------------------------
def check_spans(tok, texts: list[str], surface) -> None:
    """Every text's spans: one per id of encode, in order within the text, each covering the id's surface
    (`surface(id)`: its piece as the text spells it, None where that cannot be said: unk, a bare ▁), where
    the tokenizer's normalization leaves the text as it is."""
    checked = 0
    for text, ids in zip(texts, tok.encode(texts), strict=True):
        spans = tok.spans(text)
        assert len(spans) == len(ids), text
        assert all(0 <= s <= e <= len(text) for s, e in spans)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), (text, spans)
        for i, (s, e) in zip(ids, spans, strict=True):
            want = surface(i)
            if want is not None and unicodedata.normalize("NFKC", text) == text:  # "№" reads "No", "ﬁ" "fi"
                assert text[s:e].replace("\u2581", " ").strip() == want, (text, i, text[s:e], want)
                checked += 1
    assert checked > 3 * len(texts)


def test_sentencepiece_spans_cover_each_piece(marian_runner, marian):
    """Texts of accented, CJK and unknown characters: the ids' spans cover the pieces MarianTokenizer gives
    (byte offsets turned into characters)."""
    texts = [t for t in hard_texts(40, 5, MARIAN_SPECIAL) if t.strip()]
    texts += ["Héllo wörld — 5,20 € ok", "¿Qué? 日本語"]
    pieces = {i: p for p, i in marian.get_vocab().items()}
    unk = marian.convert_tokens_to_ids("<unk>")

    def surface(i: int) -> str | None:
        piece = pieces[i].replace("\u2581", " ").strip()
        return None if i == unk or not piece else piece

    check_spans(marian_runner.tokenizer, texts, surface)


def test_tokenizers_file_spans_cover_each_token(runner, texts):
    """Our own bundles' tokenizers file: each id's span holds that token's text."""
    tok = runner.tokenizer

    def surface(i: int) -> str | None:
        return tok.decode([i]).strip() or None

    check_spans(tok, [*texts, "Pay 5 apples, 20 red."], surface)
