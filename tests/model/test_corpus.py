"""The default corpus follows num2words, its splits are disjoint, and the tokenizer round-trips."""

from __future__ import annotations

import random
import re

import pytest
from num2words import num2words

from model.corpus import build, ordinal_suffix, sentence, word_lists
from model.data import CorpusError, read_tsv
from model.tokenizer import train_tokenizer

NUMBER = re.compile(r"(?<![\w,])(\d{1,3}(?:,\d{3})+|\d+)(st|nd|rd|th|%)?(?![\w])")


def verbalize(written: str) -> str:
    """An independent re-implementation of the corpus convention, with regular expressions."""

    def one(m: re.Match) -> str:
        n = int(m.group(1).replace(",", ""))
        suffix = m.group(2)
        if suffix == "%":
            return f"{num2words(n)} percent"
        if suffix:
            assert suffix == ordinal_suffix(n)
            return num2words(n, to="ordinal")
        return num2words(n)

    return NUMBER.sub(one, written)


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    build(out, n_train=3000, n_valid=300, n_test=300, seed=11)
    return {s: read_tsv(out / f"{s}.tsv") for s in ("train", "valid", "test")}


def test_ordinal_suffixes():
    got = {n: ordinal_suffix(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 102, 111, 112, 1003)}
    assert got == {1: "st", 2: "nd", 3: "rd", 4: "th", 11: "th", 12: "th", 13: "th", 21: "st", 22: "nd",
                   23: "rd", 101: "st", 102: "nd", 111: "th", 112: "th", 1003: "rd"}


def test_pairs_follow_num2words(small_corpus):
    for split in small_corpus.values():
        for src, tgt in split:
            assert verbalize(src) == tgt, src


def test_numbers_cover_the_range(small_corpus):
    values = [int(m.group(1).replace(",", "")) for s, _ in small_corpus["train"] for m in NUMBER.finditer(s)]
    assert min(values) < 10 and max(values) >= 10**8
    assert any("," in s for s, _ in small_corpus["train"])
    assert any(re.search(r"\d{4,}", s) for s, _ in small_corpus["train"])  # without separators too


def test_splits_are_disjoint_and_deterministic(small_corpus, tmp_path):
    sources = {k: {s for s, _ in v} for k, v in small_corpus.items()}
    assert not sources["train"] & sources["valid"]
    assert not sources["train"] & sources["test"]
    assert not sources["valid"] & sources["test"]
    build(tmp_path, n_train=3000, n_valid=300, n_test=300, seed=11)
    assert read_tsv(tmp_path / "train.tsv") == small_corpus["train"]


def test_held_out_words_never_in_training_split(small_corpus):
    train_words, all_words = word_lists(11)
    held = set(all_words) - set(train_words)
    assert len(held) > 1000
    train_tokens = {w.lower().strip(".,!?;:") for s, _ in small_corpus["train"] for w in s.split()}
    assert not held & train_tokens
    test_tokens = {w.lower().strip(".,!?;:") for s, _ in small_corpus["test"] for w in s.split()}
    assert held & test_tokens  # the test split does contain never-seen words


def test_sentences_are_open_vocabulary():
    rng = random.Random(3)
    words, _ = word_lists(0)
    pairs = [sentence(rng, words) for _ in range(500)]
    fillers = {w for s, _ in pairs for w in re.findall(r"[^\W\d_]+", s)}
    assert len(fillers) > 1500
    assert any(w[0].isupper() for w in fillers) and any(w.isupper() and len(w) > 1 for w in fillers)


def test_tokenizer_round_trips_and_splits_digits(small_corpus):
    tok = train_tokenizer((t for p in small_corpus["train"] for t in p), vocab_size=500)
    texts = [s for s, _ in small_corpus["test"][:200]] + [
        "  Two  spaces, tabs\tand\nnewlines!",
        "Ünïcödé café — naïve «quotes» 東京 🙂",
        "MiXeD CaSe 1,234,567th",
    ]
    for text in texts:
        assert tok.decode(tok.encode(text).ids) == text
    pieces = tok.encode("4217 and 98,765").tokens
    digits = [p for p in pieces if any(c.isdigit() for c in p)]
    assert all(len(p.lstrip("Ġ")) == 1 for p in digits) and len(digits) == 9
    assert [tok.token_to_id(t) for t in ("<pad>", "<s>", "</s>", "<unk>")] == [0, 1, 2, 3]


def test_read_tsv_errors(tmp_path):
    with pytest.raises(CorpusError, match="not found"):
        read_tsv(tmp_path / "missing.tsv")
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\nonly one field\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"bad.tsv:2: expected 'source<TAB>target'"):
        read_tsv(bad)
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="empty"):
        read_tsv(empty)
