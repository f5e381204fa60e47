"""The default corpus, generated offline from a seed: English text normalization.

Written form -> spoken form, the first stage of a speech synthesizer. The classes (cardinal,
ordinal, percentage, decimal, money, year, date, time, measure, phone) and their conventions are
in textnorm/verbalize.py, which also makes every target: target = verbalize(source). Numbers are drawn
by shape (textnorm/sampling.py), not only uniformly.

Sentences are of two kinds: 60% real sentence frames (textnorm/frames.py: "It costs $5.20 today.",
"The meeting moved to 5:30 pm on May 21."), a quarter of them two frames in a row; 40% word salad
as before: 2-10 filler words from wordfreq's English list around 1-3 written forms of any class,
with punctuation. A share of the filler words is held out of the training split (never a word the
frames write themselves, a month, a unit or am/pm), so the model must learn to copy words it has
never seen. Splits are disjoint by source sentence.

    python -m textnorm.corpus --out data/corpus   # writes train.tsv, valid.tsv, test.tsv, probe.tsv

probe.tsv holds the shapes uniform sampling misses (round numbers, trailing and inner zeros,
repeated digits, round ordinals and percentages, zero cents and decimals), disjoint from train.
"""

from __future__ import annotations

import argparse
import random
import re
import string
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

from num2words import num2words
from wordfreq import top_n_list

from textnorm.alone import alone_sentence
from textnorm.everyday import DRAW_ALL, roman_numeral
from textnorm.frames import FRAMES, SLOT, THINGS, frame_vocabulary
from textnorm.literal import literal_items
from textnorm.sampling import (
    DRAW,
    draw_measure,
    draw_year,
    filler_word,
    ordinal_suffix,
    pick,
    probe_number,
    shaped_number,
    with_separators,
)
from textnorm.verbalize import MONTHS, ROMAN_NAMES, ROMAN_NOUNS, UNITS, YEAR_CONTEXT, verbalize

__all__ = ["build", "cardinal", "generate", "ordinal", "ordinal_suffix", "probe", "sentence", "word_lists"]

WORD_LIST_SIZE = 30000
HELD_OUT_WORDS = 0.05  # share of the word list never used in the training split
PUNCT_AFTER = [",", ",", ".", "!", "?", ";", ":"]
P_FRAME, P_TWO_FRAMES = 0.6, 0.25
FRAME_CLASSES = {"cardinal": 16, "ordinal": 9, "percentage": 8, "decimal": 8, "money": 11, "year": 9,
                 "date": 7, "time": 7, "measure": 9, "phone": 7, "mixed": 13, "temperature": 7, "negative": 7,
                 "decade": 7, "fraction": 8, "time24": 7, "isodate": 6, "roman": 6}
SALAD_CLASSES = {"cardinal": 34, "ordinal": 12, "percentage": 8, "decimal": 8, "money": 9, "year": 7,
                 "date": 5, "time": 6, "measure": 7, "phone": 6, "temperature": 6, "negative": 6, "decade": 6,
                 "fraction": 7, "time24": 6, "isodate": 5, "roman": 5}
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")
Sampler = Callable[[random.Random], str]
# The training supplements, each written to <name>.tsv from its own seed (the corpus seed + this offset).
SUPPLEMENTS = {"numbers": 3, "long": 5, "copy": 6, "literal": 7, "alone": 9}
NEARMISS_SEED = 8  # the held-out near-miss split (nearmiss.tsv): the corpus seed + this
# Letters of the scripts real text mixes in (weight, letters): the copy supplement's made-up words
# teach the model to copy byte sequences the word list holds only a few times.
SCRIPTS: dict[str, tuple[int, str]] = {
    "latin": (30, string.ascii_lowercase),
    "accented": (30, "àáâãäåæçèéêëìíîïðñòóôõöøùúûüýþÿß"
                 + "".join(c for c in map(chr, range(0x100, 0x180)) if c.islower())),
    "greek": (15, "αβγδεζηθικλμνξοπρστυφχψω"),
    "cyrillic": (15, "абвгдежзийклмнопрстуфхцчшщъыьэюяёіїєў"),
    "kana": (5, "".join(map(chr, range(0x3041, 0x3097))) + "".join(map(chr, range(0x30A1, 0x30FB)))),
}
SCRIPT_WEIGHTS = {name: weight for name, (weight, _) in SCRIPTS.items()}


def reserved_words() -> set[str]:
    """Words the generator writes itself: never held out of the training split."""
    listed = {w.lower() for w in (*ROMAN_NAMES, *ROMAN_NOUNS)}
    listed |= {roman_numeral(n).lower() for n in range(1, 100)}  # 'vi', 'xl' are words of the list too
    return (frame_vocabulary() | {m.lower() for m in MONTHS} | set(UNITS) | {"am", "pm", *YEAR_CONTEXT}
            | listed)


def word_lists(seed: int = 0) -> tuple[list[str], list[str]]:
    """(training words, all words): alphabetic English words, the held-out share removed."""
    words = [w for w in top_n_list("en", WORD_LIST_SIZE) if _WORD.fullmatch(w)]
    rng, reserved = random.Random(seed), reserved_words()
    held = set(rng.sample([w for w in words if w not in reserved], int(len(words) * HELD_OUT_WORDS)))
    return [w for w in words if w not in held], words


def cardinal(rng: random.Random, p_separators: float = 0.5) -> tuple[str, str]:
    """A (written, spoken) cardinal 0 .. 10^9, its digit count uniform (the tiny test task's numbers)."""
    if rng.random() < 0.01:
        n = 10**9
    else:
        digits = rng.randint(1, 9)
        n = rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)
    written = f"{n:,}" if n >= 1000 and rng.random() < p_separators else str(n)
    return written, num2words(n)


def ordinal(rng: random.Random) -> tuple[str, str]:
    """A (written, spoken) ordinal 1st .. 9,999,999th, its digit count uniform."""
    digits = rng.randint(1, 7)
    n = max(1, rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1))
    return f"{n}{ordinal_suffix(n)}", num2words(n, to="ordinal")


def fill(frame: str, rng: random.Random, words: list[str], samplers: dict[str, Sampler] | None = None) -> str:
    """The frame with every slot drawn (`samplers` overrides the class samplers)."""
    draw = {**DRAW_ALL, "year": draw_year, **(samplers or {})}

    def slot(m: re.Match) -> str:
        name = m[1]
        if name in draw:
            return draw[name](rng)
        if name in ("length", "weight", "volume", "speed"):
            return draw_measure(rng, name)
        if name in ("thing", "things"):
            return rng.choice(THINGS)[name == "things"]
        w = rng.choice(words)  # uniform: a rare word is a plausible name or noun
        return w.capitalize() if name == "Name" else w

    return SLOT.sub(slot, frame)


def frame_sentence(rng: random.Random, words: list[str], two: bool = False) -> str:
    """One or two real sentence frames with their slots drawn (always two if `two`)."""
    n = 2 if two or rng.random() < P_TWO_FRAMES else 1
    return " ".join(fill(rng.choice(FRAMES[pick(rng, FRAME_CLASSES)]), rng, words) for _ in range(n))


def _punctuated(rng: random.Random, items: list[str]) -> list[str]:
    """The items, some of them (not the last) followed by a punctuation mark."""
    return [w + (rng.choice(PUNCT_AFTER) if i < len(items) - 1 and rng.random() < 0.12 else "")
            for i, w in enumerate(items)]


def salad_sentence(rng: random.Random, words: list[str], numbers_focus: bool = False) -> str:
    """Filler words around written forms of any class, with punctuation.

    With `numbers_focus` (a curriculum supplement): 0-3 words around 2-3 written forms, most of
    them cardinals without separators, the hardest part of the task.
    """
    if numbers_focus:
        n_words, n_items, weights = rng.randint(0, 3), rng.randint(2, 3), {**SALAD_CLASSES, "cardinal": 150}
    else:
        n_words, weights = rng.randint(2, 10), SALAD_CLASSES
        n_items = 1 if rng.random() < 0.6 else 2 if rng.random() < 0.8 else 3
    items = [filler_word(rng, words) for _ in range(n_words)]
    for _ in range(n_items):
        kind = pick(rng, weights)
        item = DRAW[kind](rng, 0.2) if kind == "cardinal" and numbers_focus else DRAW_ALL[kind](rng)
        items.insert(rng.randint(0, len(items)), item)
    out = _punctuated(rng, items)
    if not out[0][:1].isdigit() and rng.random() < 0.8:  # sentence-initial capital
        out[0] = out[0][:1].upper() + out[0][1:]
    return " ".join(out) + rng.choice([".", ".", ".", "!", "?", ""])


@cache
def _listed() -> frozenset[str]:
    """Every word of the list, held-out ones included (made-up words are none of them)."""
    return frozenset(w.lower() for w in top_n_list("en", WORD_LIST_SIZE)) | reserved_words()


def made_up_word(rng: random.Random) -> str:
    """A word of 1-9 letters no list holds: Latin with accents mixed in, or Greek, Cyrillic, kana."""
    script = pick(rng, SCRIPT_WEIGHTS)
    letters = SCRIPTS[script][1]
    if script == "latin":  # accents here and there, as in names
        letters = letters * 6 + SCRIPTS["accented"][1]
    while (w := "".join(rng.choice(letters) for _ in range(rng.randint(1, 9)))) in _listed():
        pass
    r = rng.random()
    return w.capitalize() if r < 0.25 else w.upper() if r < 0.35 else w


def copy_sentence(rng: random.Random, words: list[str]) -> str:
    """Word salad for the copy supplement: half the words made up, some said twice ("the the"), around
    1-3 written forms whose numbers are mostly of the probe's shapes, without separators half the time."""
    n_words = rng.randint(2, 8)
    fillers = [made_up_word(rng) if rng.random() < 0.5 else filler_word(rng, words) for _ in range(n_words)]
    items = [w for f in fillers for w in ([f, f] if rng.random() < 0.08 else [f])]
    shaped = probe_samplers()
    for _ in range(rng.randint(1, 3)):
        kind = pick(rng, SALAD_CLASSES)
        if kind == "cardinal":
            item = with_separators(probe_number(rng) if rng.random() < 0.5 else shaped_number(rng), rng)
        elif kind in shaped and rng.random() < 0.5:
            item = shaped[kind](rng)
        else:
            item = DRAW_ALL[kind](rng)
        items.insert(rng.randint(0, len(items)), item)
    return " ".join(_punctuated(rng, items)) + rng.choice([".", ".", "!", "?", ""])


def literal_sentence(rng: random.Random, words: list[str]) -> str:
    """Filler words around 1-3 items the rules copy (literal.py), a written form of a class in 40%."""
    items = [filler_word(rng, words) for _ in range(rng.randint(1, 8))]
    extra = literal_items(rng, words, rng.randint(1, 3))
    if rng.random() < 0.4:
        extra.append(DRAW_ALL[pick(rng, SALAD_CLASSES)](rng))
    for item in extra:
        items.insert(rng.randint(0, len(items)), item)
    out = _punctuated(rng, items)
    if rng.random() < 0.7:
        out[0] = out[0][:1].upper() + out[0][1:]
    return " ".join(out) + rng.choice([".", ".", "!", "?", ""])


def sentence(rng: random.Random, words: list[str], supplement: str | None = None) -> tuple[str, str]:
    """One (written, spoken) pair: a frame sentence or word salad, or a training supplement's
    (SUPPLEMENTS): "numbers" number-focused salad, "long" two frames in a row (the long outputs,
    where most errors were), "copy" `copy_sentence`, "literal" `literal_sentence`, "alone"
    `alone_sentence`."""
    if supplement == "alone":
        src = alone_sentence(rng, words)
    elif supplement == "copy":
        src = copy_sentence(rng, words)
    elif supplement == "literal":
        src = literal_sentence(rng, words)
    elif supplement == "long":
        src = frame_sentence(rng, words, two=True)
    elif supplement != "numbers" and rng.random() < P_FRAME:
        src = frame_sentence(rng, words)
    else:
        src = salad_sentence(rng, words, supplement == "numbers")
    return src, verbalize(src)


# ----- the probe: shapes uniform sampling misses ------------------------------------------------
PROBE_FRAMES = {
    "cardinal": ("We counted {cardinal} {things}.", "There are {cardinal} {things} here.",
                 "The total was {cardinal}.", "{Name} sold {cardinal} {things}."),
    "ordinal": ("It was the {ordinal} {thing}.", "She finished {ordinal}.", "The {ordinal} visitor won."),
    "percentage": ("Prices rose {percentage} this year.", "The battery is at {percentage}."),
    "money": ("It costs {money} today.", "{Name} paid {money} for the {thing}."),
    "decimal": ("The ratio was {decimal}.",),
    "measure": ("The trail is {length} long.", "The box weighs {weight}."),
}
PROBE_EXAMPLES = ("We counted 1,000,000 birds.", "It costs $5.20 today.", "Meet me at 5:30 pm.",
                  "Pi is 3.14 roughly.", "Born in 1984 in Ohio.", "Call 555-0142 now.",
                  "We counted 1984 birds.")


def _round(rng: random.Random, max_digits: int) -> int:
    """One significant digit: 20, 300, 1,000,000."""
    return rng.randint(1, 9) * 10 ** rng.randint(1, max_digits - 1)


@cache
def probe_samplers() -> dict[str, Sampler]:
    """Samplers of the probe's shapes, by slot (one shared dict: read it, never change it)."""
    def ordinal_(r: random.Random) -> str:
        n = _round(r, 9) if r.random() < 0.7 else probe_number(r, 9)
        return with_separators(n, r) + ordinal_suffix(n)

    def money_(r: random.Random) -> str:
        amount = with_separators(probe_number(r, 7), r, 0.8)
        return f"{r.choice('$€£')}{amount}{r.choice(['', '', '.00', '.50', '.05'])}"

    return {
        "cardinal": lambda r: with_separators(probe_number(r), r),
        "ordinal": ordinal_,
        "percentage": lambda r: f"{r.choice([0, 100, 1000]) if r.random() < 0.2 else _round(r, 3)}%",
        "money": money_,
        "decimal": lambda r: f"{r.choice([0, 1, 10, 100, 1000])}.{r.choice(['0', '00', '05', '50', '005'])}",
        "length": lambda r: f"{with_separators(probe_number(r, 6), r)} {r.choice(['km', 'm', 'ft', 'mi'])}",
        "weight": lambda r: f"{with_separators(probe_number(r, 6), r)} {r.choice(['kg', 'g', 'lb'])}",
    }


def probe(n: int, seed: int, words: list[str], exclude: set[str] | None = None) -> Iterator[tuple[str, str]]:
    """n distinct probe pairs (the task's own examples first), skipping sources in `exclude`."""
    rng, seen, samplers = random.Random(seed), set(exclude or ()), probe_samplers()
    weights = {"cardinal": 50, "ordinal": 20, "percentage": 12, "money": 8, "decimal": 4, "measure": 6}
    made = 0
    for src in PROBE_EXAMPLES:
        if made < n and src not in seen:
            seen.add(src)
            made += 1
            yield src, verbalize(src)
    while made < n:
        src = fill(rng.choice(PROBE_FRAMES[pick(rng, weights)]), rng, words, samplers)
        if src not in seen:
            seen.add(src)
            made += 1
            yield src, verbalize(src)


# ----- splits -----------------------------------------------------------------------------------
def generate(
    n: int, seed: int, words: list[str], exclude: set[str] | None = None, supplement: str | None = None,
) -> Iterator[tuple[str, str]]:
    """n distinct pairs from a seed, skipping sources in `exclude` (keeps splits disjoint)."""
    if supplement is not None and supplement not in SUPPLEMENTS:
        raise ValueError(f"unknown supplement {supplement!r}; one of {', '.join(SUPPLEMENTS)}")
    rng, seen = random.Random(seed), set(exclude or ())
    made = 0
    while made < n:
        src, tgt = sentence(rng, words, supplement)
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


def build(out: Path, n_train: int, n_valid: int, n_test: int, seed: int, n_numbers: int = 0,
          n_probe: int = 400, n_long: int = 0, n_copy: int = 0, n_literal: int = 0,
          n_nearmiss: int = 0, n_alone: int = 0) -> None:
    """Write the disjoint splits under `out`: test, valid, probe, nearmiss, train (+ the supplements
    numbers.tsv, long.tsv, copy.tsv, literal.tsv and alone.tsv)."""
    out.mkdir(parents=True, exist_ok=True)
    train_words, all_words = word_lists(seed)
    held = write_tsv(out / "test.tsv", generate(n_test, seed + 2, all_words))
    held |= write_tsv(out / "valid.tsv", generate(n_valid, seed + 1, all_words, held))
    if n_probe:
        held |= write_tsv(out / "probe.tsv", probe(n_probe, seed + 4, all_words, held))
    if n_nearmiss:
        nearmiss = generate(n_nearmiss, seed + NEARMISS_SEED, all_words, held, "literal")
        held |= write_tsv(out / "nearmiss.tsv", nearmiss)
    write_tsv(out / "train.tsv", generate(n_train, seed, train_words, held))
    counts = {"numbers": n_numbers, "long": n_long, "copy": n_copy, "literal": n_literal, "alone": n_alone}
    for name, offset in SUPPLEMENTS.items():
        if counts[name]:
            write_tsv(out / f"{name}.tsv", generate(counts[name], seed + offset, train_words, held, name))


def main() -> None:
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("data/corpus"))
    ap.add_argument("--train", type=int, default=400_000)
    ap.add_argument("--valid", type=int, default=2_000)
    ap.add_argument("--test", type=int, default=2_000)
    ap.add_argument("--probe", type=int, default=400, help="pairs of the number-shape probe (0: none)")
    ap.add_argument("--numbers", type=int, default=0, help="pairs of the number-focused supplement")
    ap.add_argument("--long", type=int, default=0, help="pairs of the two-frame supplement")
    ap.add_argument("--copy", type=int, default=0, help="pairs of the copy supplement (made-up words)")
    ap.add_argument("--literal", type=int, default=0,
                    help="pairs of the literal supplement (near-misses, symbols)")
    ap.add_argument("--alone", type=int, default=0,
                    help="pairs of the alone supplement (a written form alone or in a short frame)")
    ap.add_argument("--nearmiss", type=int, default=0, help="pairs of the held-out near-miss split (0: none)")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    build(a.out, a.train, a.valid, a.test, a.seed, a.numbers, a.probe, a.long, a.copy, a.literal, a.nearmiss,
          a.alone)
    print(f"wrote {a.train}/{a.valid}/{a.test}/{a.probe} train/valid/test/probe pairs to {a.out}"
          + (f" and {a.numbers} to numbers.tsv" if a.numbers else "")
          + (f" and {a.long} to long.tsv" if a.long else "")
          + (f" and {a.copy} to copy.tsv" if a.copy else "")
          + (f" and {a.literal} to literal.tsv" if a.literal else "")
          + (f" and {a.alone} to alone.tsv" if a.alone else "")
          + (f" and {a.nearmiss} to nearmiss.tsv" if a.nearmiss else ""))


if __name__ == "__main__":
    main()
