"""The corpus's alone supplement (textnorm/corpus.py, `--alone`): a written form of any class as the whole
input, two side by side, or in a frame of one or two words, so that a form read right inside a sentence
is read right alone too (a decade alone was read as a cardinal: `1800s` -> "one thousand, eight
hundreds"). Every class about equally often, decades of every century, the probe's number shapes for
half of the cardinals, and a tenth of items the rules copy (textnorm/literal.py)."""

from __future__ import annotations

import random

from textnorm.everyday import DRAW_ALL
from textnorm.literal import literal_items
from textnorm.sampling import filler_word, pick, probe_number, shaped_number, with_separators

# The alone supplement: every class about equally often (the decade a little more: `1800s` alone was
# read as a cardinal), each written form the whole input or in a frame of one or two words.
ALONE_CLASSES = {kind: 6 for kind in DRAW_ALL} | {"decade": 10, "cardinal": 8, "measure": 8}
ALONE_BEFORE = ("the", "The", "in the", "In the", "since the", "by", "at", "to", "about", "only", "and", "or",
                "from", "was", "is", "on")
ALONE_AFTER = ("saw", "were", "was", "is", "left", "now", "then", "again", "ago", "today", "only", "later",
               "each", "in total", "or so")


def alone_form(rng: random.Random, words: list[str]) -> str:
    """One written form of any class (a probe shape for half of the cardinals, a decade of any century
    1000-2090 for half of the decades), or in 10% an item the
    rules copy (textnorm/literal.py: `10°`, `#12`, `1990s-era`, a symbol, a word of another script)."""
    if rng.random() < 0.1:
        return literal_items(rng, words, 1)[0]
    kind = pick(rng, ALONE_CLASSES)
    if kind == "decade" and rng.random() < 0.5:  # every century's decades (draw_decade: mostly 1900-2020)
        return f"{rng.randint(100, 209)}0s"
    if kind == "cardinal" and rng.random() < 0.5:
        return with_separators(probe_number(rng) if rng.random() < 0.5 else shaped_number(rng), rng)
    return DRAW_ALL[kind](rng)


def alone_sentence(rng: random.Random, words: list[str]) -> str:
    """A written form with nothing around it (`1800s`, `5.0 m`, `Chapter IV`, `06:05`): alone in 50%
    (a final mark in a fifth of them), two forms side by side in 15% (`1800s, 1900s`), and a short
    frame of one or two words before or after it (`the 1800s`, `1800s saw`, `only 3/4`) in 35%."""
    r = rng.random()
    form = alone_form(rng, words)
    if r < 0.5:
        return form + (rng.choice([".", ".", "!", "?", ":", ","]) if rng.random() < 0.2 else "")
    if r < 0.65:
        return f"{form}{rng.choice([',', ',', '', ' and', ' or', ' to', ';'])} {alone_form(rng, words)}"
    before = rng.choice(ALONE_BEFORE) if rng.random() < 0.7 else filler_word(rng, words)
    after = rng.choice(ALONE_AFTER) if rng.random() < 0.7 else filler_word(rng, words)
    s = rng.random()
    text = f"{before} {form}" if s < 0.4 else f"{form} {after}" if s < 0.8 else f"{before} {form} {after}"
    return text + (rng.choice([".", ".", "!", "?"]) if rng.random() < 0.3 else "")
