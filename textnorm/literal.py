"""Text the rules copy: near-misses of the classes, symbols, emoji and other scripts.

The literal supplement teaches the model to copy what no class reads: near-misses (`10°`, `5 kW`,
`3/4/2024`, `#12`, `@home`, `24/7`, `Apollo XI`), read by the rules where they hold a number
(`10°` -> "ten°", `1990s-era` -> "nineteen nineties-era"), words with every printable ASCII symbol
and symbols no class covers (`&`, `:-)`, `§`, `«»`, `™`), emoji and words in other scripts (Cyrillic,
Greek, CJK, Hangul, Arabic, Hebrew, Devanagari, Thai), around filler words and sometimes a written
form of a class. The held-out near-miss split (`nearmiss.tsv`) is drawn the same way from its own seed.
"""

from __future__ import annotations

import random
import string

from textnorm.everyday import draw_decade, roman_numeral
from textnorm.sampling import shaped_number, with_separators
from textnorm.verbalize import ROMAN_NAMES, ROMAN_NOUNS

ASCII_SYMBOLS = string.punctuation  # every printable ASCII symbol
OTHER_SYMBOLS = "§«»©®™†‡•…—–¶±×÷µ¢¥₹₩₽¤¬¦¨¯´¸¹²³¼·¿¡‰′″‹›“”‘’„→←↑↓⇒∞≈≠≤≥√∑∆✓✔✗★☆♥♦♣♠☺☀☂♪♫"
UNLISTED_UNITS = ("kW", "kWh", "W", "V", "Hz", "GB", "MB", "TB", "oz", "in", "yd", "psi", "dB", "ha", "min",
                  "sec", "hrs", "mL", "KM", "Kg", "mAh", "px", "pt", "bar", "K", "lbs", "gal", "qt", "nm")
SCRIPT_RANGES: dict[str, tuple[tuple[int, int], ...]] = {  # code point ranges of each script's letters
    "cyrillic": ((0x0430, 0x044F), (0x0410, 0x042F)), "greek": ((0x03B1, 0x03C9), (0x0391, 0x03A9)),
    "cjk": ((0x4E00, 0x9FFF),), "kana": ((0x3041, 0x3096), (0x30A1, 0x30FA)), "hangul": ((0xAC00, 0xD7A3),),
    "arabic": ((0x0621, 0x064A),), "hebrew": ((0x05D0, 0x05EA),), "devanagari": ((0x0905, 0x0939),),
    "thai": ((0x0E01, 0x0E2E),),
}
EMOJI_RANGES = ((0x1F600, 0x1F64F), (0x1F300, 0x1F5FF), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF),
                (0x2600, 0x26FF))
COMMON = ("東京", "北京", "日本", "中国", "上海", "Москва", "привет", "Αθήνα", "καλημέρα", "서울", "한국",
          "مرحبا", "שלום", "नमस्ते", "ไทย", "😀", "👍", "❤️", "🎉", "🙂", "🚀", "✨", "🔥", "☕")
CLOSING = {"(": ")", "[": "]", "{": "}", "<": ">", "«": "»", "‹": "›", "“": "”", "‘": "’"}
EMOTICONS = (":-)", ":)", ";-)", ":(", ":D", "<3", "^_^", "o_O", "->", "=>", "...", "--", "!=", "==", "&&",
             "||", "::", "~/", "#1", "@_@", "\\o/", "(*)", "[x]", "{}", "</>", "%%", "$$", "`x`")


def _number(rng: random.Random) -> str:
    """A number as text: '12', '1,500', '40'."""
    return with_separators(shaped_number(rng, 5), rng, 0.3)


def script_word(rng: random.Random) -> str:
    """A word of 1-6 letters of another script, or a common one ('東京', 'Москва')."""
    if rng.random() < 0.2:
        return rng.choice(COMMON)
    script = rng.choice(list(SCRIPT_RANGES))
    n = rng.randint(1, 3) if script in ("cjk", "hangul") else rng.randint(2, 7)
    lo, hi = rng.choice(SCRIPT_RANGES[script])
    return "".join(chr(rng.randint(lo, hi)) for _ in range(n))


def emoji(rng: random.Random) -> str:
    """One to three emoji, sometimes with a variation selector."""
    def one() -> str:
        lo, hi = rng.choice(EMOJI_RANGES)
        return chr(rng.randint(lo, hi)) + ("\ufe0f" if rng.random() < 0.1 else "")
    return "".join(one() for _ in range(rng.choice((1, 1, 1, 2, 3))))


def symbol_word(rng: random.Random, word: str) -> str:
    """A word with symbols: '&', '@home', 'data_final_v.csv', ':-)', '<3', '§', '«word»', 'a+b'."""
    sym = rng.choice(ASCII_SYMBOLS) if rng.random() < 0.65 else rng.choice(OTHER_SYMBOLS)
    r = rng.random()
    if r < 0.25:
        return sym
    if r < 0.45:
        return sym + word
    if r < 0.55:
        return word + sym
    if r < 0.65:
        return f"{sym}{word}{CLOSING.get(sym, sym)}"
    if r < 0.8:
        letter = rng.choice(string.ascii_lowercase)
        return f"{word}{sym}{letter}{rng.choice(['', '.csv', '.txt', '_v', '.py'])}"
    return rng.choice(EMOTICONS)


def near_miss(rng: random.Random, word: str) -> str:
    """A near-miss of a class: copied, or read by the rules it does meet."""
    kind = rng.randrange(14)
    n = _number(rng)
    if kind == 0:
        return f"{n}°" if rng.random() < 0.7 else f"{n}°{rng.choice('KRN')}"
    if kind == 1:
        return f"{n} {rng.choice(UNLISTED_UNITS)}"
    if kind == 2:
        return f"{rng.randint(1, 12)}/{rng.randint(1, 31)}/{rng.randint(1990, 2030)}"
    if kind == 3:
        return f"#{n}" if rng.random() < 0.5 else f"No. {n}"
    if kind == 4:
        return f"@{word}" if rng.random() < 0.7 else f"#{word}"
    if kind == 5:
        return f"{draw_decade(rng)}-{rng.choice(['era', 'style', 'vintage', 'born'])}"
    if kind == 6:
        return rng.choice(["24/7", "50/50", "9/11", "4/4", "7/3", "365/24"])
    if kind == 7:
        before = word.capitalize() if rng.random() < 0.7 else rng.choice(ROMAN_NOUNS).lower()  # not listed
        return f"{before} {roman_numeral(rng.randint(1, 39))}"
    if kind == 8:
        return f"{n}-{_number(rng)}"
    if kind == 9:
        return f"{n}{rng.choice(['km', 'kg', 'x', 'k', 'M', 'B', 'mph', 'ft'])}"
    if kind == 10:
        not_24 = f"{rng.randint(24, 99)}:{rng.randint(0, 59):02d}"
        return rng.choice([not_24, f"{rng.randint(1, 12)}.{rng.randint(0, 59):02d}"])
    if kind == 11:
        return f"{rng.choice(['¥', '₹', '₩', '₽', 'CHF ', 'USD '])}{n}"
    if kind == 12:
        listed = rng.choice(ROMAN_NAMES + ROMAN_NOUNS)
        return f"{listed} {rng.choice(['the', 'and', 'IIII', 'VV', 'MIX', 'Jr', 'was'])}"
    return f"{rng.randint(1000, 2099)}-{rng.randint(13, 99)}-{rng.randint(32, 99)}"


def literal_items(rng: random.Random, words: list[str], n: int) -> list[str]:
    """n items the rules copy (or read in part): near-misses, symbol words, script words, emoji."""
    out = []
    for _ in range(n):
        r, word = rng.random(), rng.choice(words)
        if r < 0.35:
            out.append(near_miss(rng, word))
        elif r < 0.65:
            out.append(symbol_word(rng, word))
        elif r < 0.88:
            out.append(script_word(rng))
        else:
            out.append(emoji(rng))
    return out
