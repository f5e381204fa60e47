"""The default corpus, generated offline from a seed: English text normalization.

Written form -> spoken form, the first stage of a speech synthesizer. Numbers are verbalized
with num2words (English); every other character is copied verbatim. Conventions:

- cardinal `4,217` or `4217` (0 .. 10^9) -> `num2words(4217)` = "four thousand, two hundred and
  seventeen";
- ordinal `22nd` (1 .. 10^7) -> `num2words(22, to="ordinal")` = "twenty-second";
- percentage `45%` (0 .. 1000) -> `num2words(45) + " percent"` = "forty-five percent".

Years, dates, amounts and times are left out on purpose: a four-digit year reads differently
from the same cardinal ("1984" -> "nineteen eighty-four"), which is ambiguous without context.

Filler words come from wordfreq's English list (open vocabulary: a share of the words is held
out of the training split, so the model must learn to copy words it has never seen), with
capitalized words and punctuation. Splits are disjoint by source sentence.

    python -m model.corpus --out data/corpus   # writes train.tsv, valid.tsv, test.tsv
"""

from __future__ import annotations

import argparse
import random
import re
from collections.abc import Iterator
from pathlib import Path

from num2words import num2words
from wordfreq import top_n_list

WORD_LIST_SIZE = 30000
HELD_OUT_WORDS = 0.05  # share of the word list never used in the training split
PUNCT_AFTER = [",", ",", ".", "!", "?", ";", ":"]
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")


def word_lists(seed: int = 0) -> tuple[list[str], list[str]]:
    """(training words, all words): alphabetic English words, the held-out share removed."""
    words = [w for w in top_n_list("en", WORD_LIST_SIZE) if _WORD.fullmatch(w)]
    rng = random.Random(seed)
    held = set(rng.sample(words, int(len(words) * HELD_OUT_WORDS)))
    return [w for w in words if w not in held], words


def ordinal_suffix(n: int) -> str:
    """English ordinal suffix: 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 102nd, ..."""
    if 10 <= n % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def _number(rng: random.Random, max_digits: int) -> int:
    """A number whose digit count is uniform in 1..max_digits (so every magnitude is common)."""
    digits = rng.randint(1, max_digits)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def cardinal(rng: random.Random, p_separators: float = 0.5) -> tuple[str, str]:
    """A cardinal 0 .. 10^9, with or without thousands separators."""
    n = 10**9 if rng.random() < 0.01 else _number(rng, 9)
    written = f"{n:,}" if n >= 1000 and rng.random() < p_separators else str(n)
    return written, num2words(n)


def ordinal(rng: random.Random) -> tuple[str, str]:
    """An ordinal 1st .. 10,000,000th."""
    n = max(1, _number(rng, 7))
    return f"{n}{ordinal_suffix(n)}", num2words(n, to="ordinal")


def percentage(rng: random.Random) -> tuple[str, str]:
    """An integer percentage 0% .. 1000%."""
    n = _number(rng, 3) if rng.random() < 0.98 else 1000
    return f"{n}%", f"{num2words(n)} percent"


def _filler(rng: random.Random, words: list[str]) -> str:
    """One open-vocabulary word, sometimes capitalized or upper-cased (names, acronyms)."""
    if rng.random() < 0.5:  # Zipf-like: frequent words often
        w = words[min(int(rng.paretovariate(0.6)) - 1, len(words) - 1)]
    else:  # uniform over the list: rare words as often as any
        w = rng.choice(words)
    r = rng.random()
    return w.capitalize() if r < 0.2 else w.upper() if r < 0.23 else w


def _long_cardinal(rng: random.Random) -> tuple[str, str]:
    """A cardinal written mostly without separators: its magnitude must be read off its digit count."""
    return cardinal(rng, p_separators=0.2)


def sentence(rng: random.Random, words: list[str], numbers_focus: bool = False) -> tuple[str, str]:
    """One (written, spoken) pair: 2-10 words around 1-2 numbers, with punctuation.

    With `numbers_focus` (a curriculum supplement): 0-3 words around 2-3 numbers, most of them
    cardinals without separators, the hardest part of the task.
    """
    if numbers_focus:
        kinds, n_words, n_numbers = [_long_cardinal] * 7 + [ordinal] * 3, rng.randint(0, 3), rng.randint(2, 3)
    else:
        kinds = [cardinal] * 6 + [ordinal] * 3 + [percentage]
        n_words = rng.randint(2, 10)
        n_numbers = 0  # drawn below, after the words, to keep the default corpus's random stream
    items: list[tuple[str, str]] = [(w, w) for w in (_filler(rng, words) for _ in range(n_words))]
    for _ in range(n_numbers or (1 if rng.random() < 0.7 else 2)):
        items.insert(rng.randint(0, len(items)), rng.choice(kinds)(rng))
    src, tgt = [], []
    for i, (s, t) in enumerate(items):
        punct = rng.choice(PUNCT_AFTER) if i < len(items) - 1 and rng.random() < 0.12 else ""
        src.append(s + punct)
        tgt.append(t + punct)
    end = rng.choice([".", ".", ".", "!", "?", ""])
    if src[0] == tgt[0] and rng.random() < 0.8:  # sentence-initial capital on a copied word
        src[0] = tgt[0] = src[0][:1].upper() + src[0][1:]
    return " ".join(src) + end, " ".join(tgt) + end


def generate(
    n: int, seed: int, words: list[str], exclude: set[str] | None = None, numbers_focus: bool = False
) -> Iterator[tuple[str, str]]:
    """n distinct pairs from a seed, skipping sources in `exclude` (keeps splits disjoint)."""
    rng, seen = random.Random(seed), set(exclude or ())
    made = 0
    while made < n:
        src, tgt = sentence(rng, words, numbers_focus)
        if src in seen:
            continue
        seen.add(src)
        made += 1
        yield src, tgt


def write_tsv(path: Path, pairs: Iterator[tuple[str, str]]) -> set[str]:
    """Write source<TAB>target lines; return the sources written."""
    sources = set()
    with path.open("w", encoding="utf-8") as f:
        for src, tgt in pairs:
            f.write(f"{src}\t{tgt}\n")
            sources.add(src)
    return sources


def build(out: Path, n_train: int, n_valid: int, n_test: int, seed: int, n_numbers: int = 0) -> None:
    """Write the three disjoint splits under `out` (+ numbers.tsv, a number-focused training supplement)."""
    out.mkdir(parents=True, exist_ok=True)
    train_words, all_words = word_lists(seed)
    held = write_tsv(out / "test.tsv", generate(n_test, seed + 2, all_words))
    held |= write_tsv(out / "valid.tsv", generate(n_valid, seed + 1, all_words, held))
    write_tsv(out / "train.tsv", generate(n_train, seed, train_words, held))
    if n_numbers:
        write_tsv(out / "numbers.tsv", generate(n_numbers, seed + 3, train_words, held, numbers_focus=True))


def main() -> None:
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("data/corpus"))
    ap.add_argument("--train", type=int, default=400_000)
    ap.add_argument("--valid", type=int, default=2_000)
    ap.add_argument("--test", type=int, default=2_000)
    ap.add_argument("--numbers", type=int, default=0, help="pairs of the number-focused supplement")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    build(a.out, a.train, a.valid, a.test, a.seed, a.numbers)
    print(f"wrote {a.train}/{a.valid}/{a.test} pairs to {a.out}")


if __name__ == "__main__":
    main()
