"""The default corpus: numbers by shape, every class, disjoint splits, the probe, and the tokenizer."""

from __future__ import annotations

import random
import re
import subprocess
import sys

import pytest
from num2words import num2words

from model.data import CorpusError, read_tsv
from model.tokenizer import train_tokenizer
from textnorm.corpus import build, fill, generate, ordinal_suffix, sentence, word_lists
from textnorm.frames import FRAMES, SLOT
from textnorm.sampling import shaped_number
from textnorm.verbalize import CLASSES, classes, verbalize

NUMBER = re.compile(r"(?<![\w,])(\d{1,3}(?:,\d{3})+|\d+)(st|nd|rd|th|%)?(?![\w])")
TRAINING = {"train", "numbers", "long", "copy"}  # the files training reads
SPLITS = ("train", "valid", "test", "probe", "numbers", "long", "copy")


def old_convention(written: str) -> str:
    """Cardinals, ordinals and integer percentages read with num2words, independently of the corpus code."""

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


def is_round(n: int) -> bool:
    """One significant digit, from 10 on: 20, 7,000,000."""
    return n >= 10 and len(str(n).rstrip("0")) == 1


def has_inner_zeros(n: int) -> bool:
    """A run of two or more zeros between non-zero digits: 1,000,001, 40,050."""
    return re.search(r"[1-9]00+[1-9]", str(n)) is not None


def is_repeated(n: int) -> bool:
    """One digit repeated, three digits or more: 555,555."""
    return len(str(n)) >= 3 and len(set(str(n))) == 1


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    build(out, n_train=3000, n_valid=300, n_test=300, seed=11, n_numbers=300, n_probe=300, n_long=200,
          n_copy=300)
    return {s: read_tsv(out / f"{s}.tsv") for s in SPLITS}


def test_ordinal_suffixes():
    got = {n: ordinal_suffix(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 102, 111, 112, 1003)}
    assert got == {1: "st", 2: "nd", 3: "rd", 4: "th", 11: "th", 12: "th", 13: "th", 21: "st", 22: "nd",
                   23: "rd", 101: "st", 102: "nd", 111: "th", 112: "th", 1003: "rd"}


def test_shaped_numbers_are_round_zero_heavy_and_repeated_at_the_stated_rates():
    rng = random.Random(0)
    values = [shaped_number(rng) for _ in range(20000)]
    rate = {f.__name__: sum(map(f, values)) / len(values) for f in (is_round, has_inner_zeros, is_repeated)}
    assert rate["is_round"] > 0.13 and rate["has_inner_zeros"] > 0.08 and rate["is_repeated"] > 0.035
    trailing = sum(str(n).endswith("00") and not is_round(n) for n in values) / len(values)
    assert trailing > 0.045
    assert max(values) >= 10**11 and min(values) == 0
    assert sum(1000 <= n <= 2099 for n in values) / len(values) > 0.04  # year-like cardinals


def test_train_cardinals_have_the_shapes(small_corpus):
    bare = re.compile(r"(?<![\w$€£.,:()-])(?:\d{1,3}(?:,\d{3})+|\d+)(?=[ !?;]|[.,:]?$|[.,:] )")
    values = [int(m[0].replace(",", "")) for s, _ in small_corpus["train"] for m in bare.finditer(s)]
    assert len(values) > 800
    assert sum(map(is_round, values)) / len(values) > 0.08
    assert sum(map(has_inner_zeros, values)) / len(values) > 0.05
    assert any(is_repeated(n) and n > 10**4 for n in values)
    assert any(re.search(r"\b\d{1,3}(,000)+\b", s) for s, _ in small_corpus["train"])  # 7,000,000
    assert any(re.search(r"\b[1-9]0{5,}\b", s) for s, _ in small_corpus["train"])  # 7000000


def test_every_class_is_in_the_training_split(small_corpus):
    pairs = small_corpus["train"]
    share = {c: sum(c in classes(s) for s, _ in pairs) / len(pairs) for c in CLASSES}
    assert share["cardinal"] > 0.2 and min(share.values()) > 0.04, share
    assert sum(len(classes(s)) >= 2 for s, _ in pairs) / len(pairs) > 0.15  # classes mixed in a sentence


def test_targets_are_the_spoken_form_of_the_sources(small_corpus):
    for split in small_corpus.values():
        for src, tgt in split:
            assert tgt == verbalize(src), src
            assert not re.search(r"\d", tgt), src


def test_frames_read_every_slot_as_its_class():
    words, _ = word_lists(0)
    rng = random.Random(5)
    units = {"length": "measure", "weight": "measure", "volume": "measure", "speed": "measure"}
    for frames in FRAMES.values():
        for frame in frames:
            wanted = {units.get(s, s) for s in SLOT.findall(frame)} - {"thing", "things", "word", "Name"}
            for _ in range(100):
                src = fill(frame, rng, words)
                found = classes(src)
                if "negative" in wanted and "negative" not in found:  # a signed percentage or measure
                    signed = {"percentage", "measure"}
                    found = found - signed | {"negative"} | (wanted & signed)
                assert found == wanted, src


def test_the_probe_holds_the_shapes_uniform_sampling_misses(small_corpus):
    probe = small_corpus["probe"]
    assert probe[:3] == [("We counted 1,000,000 birds.", "We counted one million birds."),
                         ("It costs $5.20 today.", "It costs five dollars and twenty cents today."),
                         ("Meet me at 5:30 pm.", "Meet me at five thirty p m.")]
    values = []
    for src, tgt in probe[7:]:
        if not re.search(r"[$€£]|\d\.\d|\d (?:km|m|ft|mi|kg|g|lb)\b", src):
            assert tgt == old_convention(src), src
            values += [int(m.group(1).replace(",", "")) for m in NUMBER.finditer(src)]
    assert len(values) > 200
    shaped = [n for n in values if n % 10 == 0 or re.search(r"[1-9]0+[1-9]", str(n))
              or re.fullmatch(r"(\d\d?)\1+\d?", str(n))]
    assert len(shaped) / len(values) > 0.95  # trailing or inner zeros, repeated digits (555, 464,646)
    assert sum(map(is_round, values)) / len(values) > 0.3
    assert any(re.fullmatch(r"[1-9](,?000)+th", w.strip(".")) for s, _ in probe for w in s.split())
    assert any(re.fullmatch(r"[1-9]0+%", w.strip(".")) for s, _ in probe for w in s.split())


def test_splits_are_disjoint_and_deterministic(small_corpus, tmp_path):
    sources = {k: {s for s, _ in v} for k, v in small_corpus.items()}
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1:]:
            if not {a, b} <= TRAINING:  # training files may share sentences
                assert not sources[a] & sources[b], (a, b)
    build(tmp_path, n_train=3000, n_valid=300, n_test=300, seed=11, n_numbers=300, n_probe=300,
          n_long=200, n_copy=300)
    assert all(read_tsv(tmp_path / f"{s}.tsv") == small_corpus[s] for s in SPLITS)


def test_held_out_words_never_in_training_split(small_corpus):
    train_words, all_words = word_lists(11)
    held = set(all_words) - set(train_words)
    assert len(held) > 1000
    for split in TRAINING:
        tokens = {w.lower().strip(".,!?;:") for s, _ in small_corpus[split] for w in s.split()}
        assert not held & tokens
    test_tokens = {w.lower().strip(".,!?;:") for s, _ in small_corpus["test"] for w in s.split()}
    assert held & test_tokens  # the test split does contain never-seen words


def test_sentences_are_open_vocabulary_and_natural():
    rng = random.Random(3)
    words, _ = word_lists(0)
    pairs = [sentence(rng, words) for _ in range(1000)]
    fillers = {w for s, _ in pairs for w in re.findall(r"[^\W\d_]+", s)}
    assert len(fillers) > 1500
    assert any(w[0].isupper() for w in fillers) and any(w.isupper() and len(w) > 1 for w in fillers)
    frames = [re.escape(SLOT.sub("\0", f)).replace("\0", ".+") for fs in FRAMES.values() for f in fs]
    natural = re.compile("|".join(frames))
    assert 0.45 < sum(natural.match(s) is not None for s, _ in pairs) / len(pairs) < 0.75


def test_the_long_supplement_is_two_frames_in_a_row(small_corpus):
    """long.tsv: every source is two real sentence frames, one after the other."""
    frames = [re.escape(SLOT.sub("\0", f)).replace("\0", ".+") for fs in FRAMES.values() for f in fs]
    one = "(?:" + "|".join(frames) + ")"
    two = re.compile(f"^{one} {one}$")
    assert len(small_corpus["long"]) == 200
    assert all(two.match(src) for src, _ in small_corpus["long"])
    singles = re.compile(f"^{one}$")
    assert not all(singles.match(src) for src, _ in small_corpus["long"])


def test_the_copy_supplement_makes_up_words_in_several_scripts(small_corpus):
    """copy.tsv: words of no list in Latin, accented Latin, Greek, Cyrillic and kana, some said twice,
    copied unchanged into the target around numbers of the probe's shapes."""
    _, all_words = word_lists(11)
    listed = {w.lower() for w in all_words}
    pairs = small_corpus["copy"]
    words = [w.strip(".,!?;:") for s, _ in pairs for w in s.split()]
    made_up = {w for w in words if w.isalpha() and w.lower() not in listed}
    ranges = (("greek", 0x3B1, 0x3C9), ("cyrillic", 0x430, 0x45F), ("kana", 0x3041, 0x30FA),
              ("accented", 0xE0, 0x17F), ("latin", 0x61, 0x7A))
    scripts = {name for w in made_up for c in w.lower() for name, lo, hi in ranges if lo <= ord(c) <= hi}
    assert scripts == {"greek", "cyrillic", "kana", "accented", "latin"}
    assert len(made_up) > 0.3 * len(set(words))
    for src, tgt in pairs:  # every made-up word is copied verbatim, as often as the source has it
        if "roman" in classes(src):  # a made-up 'XIX' after a listed name is a numeral
            continue
        for w in made_up & set(src.split()):
            assert tgt.split().count(w) == src.split().count(w), (src, tgt)
    assert sum(re.search(r"(?<!\S)(\S+) \1(?!\S)", s) is not None for s, _ in pairs) > 0.05 * len(pairs)

    def shaped_share(split: str) -> float:
        numbers = [int(m[1].replace(",", "")) for s, _ in small_corpus[split] for m in NUMBER.finditer(s)]
        return sum(is_round(n) or has_inner_zeros(n) or is_repeated(n) for n in numbers) / len(numbers)

    assert shaped_share("copy") > 1.5 * shaped_share("train")


def test_cli_writes_every_split(tmp_path):
    cmd = [sys.executable, "-m", "textnorm.corpus", "--out", str(tmp_path), "--train", "40", "--valid", "5",
           "--test", "5", "--probe", "20", "--numbers", "10", "--long", "7", "--copy", "6", "--seed", "3"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    sizes = {s: len(read_tsv(tmp_path / f"{s}.tsv")) for s in SPLITS}
    assert sizes == {"train": 40, "valid": 5, "test": 5, "probe": 20, "numbers": 10, "long": 7, "copy": 6}


def test_tokenizer_round_trips_and_splits_digits(small_corpus):
    tok = train_tokenizer((t for p in small_corpus["train"] for t in p), vocab_size=500)
    texts = [s for s, _ in small_corpus["test"][:200]] + [
        "  Two  spaces, tabs\tand\nnewlines!",
        "Ünïcödé café — naïve «quotes» 東京 🙂",
        "MiXeD CaSe 1,234,567th £3.50 €1,200 (555) 123-4567 5:30 pm 80 km/h",
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


def test_an_unknown_supplement_is_refused_by_name():
    with pytest.raises(ValueError, match="'digits'.*numbers, long, copy"):
        next(generate(1, 0, ["word"], supplement="digits"))


def test_the_alone_supplement_is_written_forms_with_little_around_them():
    """alone.tsv: a written form of a class as the whole input (decades of every century among them:
    `1800s` alone was read as a cardinal), or in a frame of one or two words; deterministic."""
    train_words, _ = word_lists(11)
    pairs = list(generate(3000, 20, train_words, supplement="alone"))
    assert pairs == list(generate(3000, 20, train_words, supplement="alone"))
    assert all(tgt == verbalize(src) for src, tgt in pairs)
    alone = [src for src, _ in pairs if len(classes(src)) == 1 and verbalize(src) != src
             and re.fullmatch(r"\S+(?: \S+)?[.!?:,]?", src) and not any(c.isalpha() for c in src[:1])]
    assert len(alone) > 0.25 * len(pairs)
    found = {c for src, _ in pairs if len(src.split()) <= 3 for c in classes(src)}
    assert found >= set(CLASSES) - {"plain"}
    centuries = {src[:2] for src, _ in pairs if re.fullmatch(r"1\d{2}0s", src)}
    assert len(centuries) >= 8  # 10xx .. 18xx, not only the 1900s
    assert max(len(src.split()) for src, _ in pairs) <= 12
