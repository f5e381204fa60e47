"""The literal supplement and the held-out near-miss split: near-misses, every printable ASCII symbol,
other symbols, scripts and emoji, copied into the target unless a stated rule reads them."""

from __future__ import annotations

import random
import string
import unicodedata

import pytest

from model.data import read_tsv
from model.evaluate import outside_unchanged
from textnorm.corpus import build, literal_sentence, word_lists
from textnorm.literal import near_miss
from textnorm.verbalize import classes, verbalize


@pytest.fixture(scope="module")
def literal_pairs() -> list[tuple[str, str]]:
    words, _ = word_lists(0)
    rng = random.Random(1)
    return [(s, verbalize(s)) for s in (literal_sentence(rng, words) for _ in range(3000))]


def test_every_printable_ascii_symbol_and_many_scripts_occur(literal_pairs):
    text = "".join(s for s, _ in literal_pairs)
    assert set(string.punctuation) <= set(text)
    scripts = {unicodedata.name(c, "?").split()[0] for c in text if ord(c) > 0x2FF}
    assert {"CYRILLIC", "GREEK", "CJK", "HANGUL", "ARABIC", "HEBREW", "DEVANAGARI", "THAI"} <= scripts
    with_emoji = sum(any(0x1F300 <= ord(c) <= 0x1F9FF for c in s) for s, _ in literal_pairs)
    assert with_emoji > 0.05 * len(literal_pairs)


def test_text_outside_the_classes_is_copied(literal_pairs):
    for src, tgt in literal_pairs:
        assert outside_unchanged(src, tgt), src
        if not classes(src):
            assert tgt == src


@pytest.mark.parametrize(("written", "spoken"), [
    ("10°", "ten°"), ("5 kW", "five kW"), ("3/4/2024", "three/four/two thousand and twenty-four"),
    ("#12", "#twelve"), ("@home", "@home"), ("1990s-era", "nineteen nineties-era"),
])
def test_the_issues_near_misses_read_only_by_the_rules(written, spoken):
    assert verbalize(written) == spoken


def test_near_misses_never_make_the_class_they_resemble():
    rng = random.Random(0)
    drawn = [near_miss(rng, "home") for _ in range(3000)]
    found = {c for d in drawn for c in classes(d)}
    assert not found & {"temperature", "measure", "time24", "isodate", "money"}, found  # 204-1442 is a phone
    assert all("fraction" not in classes(d) for d in drawn if d != "9/11")  # 9/11 is a proper fraction


def test_the_near_miss_split_is_held_out(tmp_path):
    build(tmp_path, n_train=500, n_valid=50, n_test=50, seed=3, n_probe=20, n_literal=500, n_nearmiss=200)
    nearmiss = {s for s, _ in read_tsv(tmp_path / "nearmiss.tsv")}
    assert len(nearmiss) == 200
    for split in ("train", "literal", "test", "valid", "probe"):
        assert not nearmiss & {s for s, _ in read_tsv(tmp_path / f"{split}.tsv")}, split
