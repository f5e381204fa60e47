"""Written forms of the everyday classes drawn from a random stream: temperature, negative, decade,
fraction, 24-hour time, ISO date and Roman numeral."""

from __future__ import annotations

import random

from textnorm.readers import DAYS_IN_MONTH, VULGAR
from textnorm.sampling import DRAW, draw_measure, draw_percentage, shaped_number, with_separators
from textnorm.verbalize import ROMAN_NAMES, ROMAN_NOUNS

SIGN_WEIGHTS = {"-": 4, "\u2212": 1}  # hyphen-minus, minus sign
ROMAN = (("", "X", "XX", "XXX", "XL", "L", "LX", "LXX", "LXXX", "XC"),
         ("", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX"))


def _sign(rng: random.Random) -> str:
    """'-' mostly, the minus sign '−' sometimes."""
    return rng.choices(list(SIGN_WEIGHTS), list(SIGN_WEIGHTS.values()))[0]


def _small_number(rng: random.Random, max_digits: int = 3) -> str:
    """An integer (shaped, 0 .. 10^max_digits) or a decimal with 1-2 digits after the point."""
    whole = shaped_number(rng, max_digits)
    if rng.random() < 0.3:
        return f"{whole}.{rng.randint(0, 9)}{rng.randint(0, 9) if rng.random() < 0.3 else ''}"
    return with_separators(whole, rng, 0.3)


def draw_temperature(rng: random.Random) -> str:
    """'10°C', '-5 °F', '37.5°C', '1°C', '−40°F'."""
    number = "1" if rng.random() < 0.08 else _small_number(rng)
    sign = _sign(rng) if rng.random() < 0.3 else ""
    space = " " if rng.random() < 0.25 else ""
    return f"{sign}{number}{space}°{rng.choice('CCF')}"


def draw_negative(rng: random.Random) -> str:
    """'-5', '-3.2', '−12', '-1,500'; sometimes a negative percentage or measure ('-2.5%', '-3 m')."""
    r = rng.random()
    if r < 0.1:
        return _sign(rng) + draw_percentage(rng)
    if r < 0.18:
        return _sign(rng) + draw_measure(rng)
    whole = shaped_number(rng, 7)
    if rng.random() < 0.3:
        return f"{_sign(rng)}{with_separators(whole, rng, 0.3)}.{rng.randint(0, 99):0{rng.randint(1, 2)}d}"
    return _sign(rng) + with_separators(whole, rng)


def draw_decade(rng: random.Random) -> str:
    """'1990s', '1800s', "'90s", '60s', '2000s', '’70s'."""
    r = rng.random()
    if r < 0.55:
        return f"{rng.randint(110, 209) if rng.random() < 0.2 else rng.randint(190, 202)}0s"
    return f"{rng.choice(['', '', chr(39), chr(39), '’'])}{rng.randint(2, 9)}0s"


def draw_fraction(rng: random.Random) -> str:
    """'1/2', '3/4', '2/3', '5/8', '15/16', '1 1/2', '½', '2¾', '-1/4'."""
    r = rng.random()
    if r < 0.2:
        vulgar = rng.choice(list(VULGAR))
        return vulgar if rng.random() < 0.5 else f"{rng.randint(1, 12)}{rng.choice(['', ' '])}{vulgar}"
    common = [2, 2, 3, 4, 4, 5, 6, 8, 8, 10, 12, 16, 32, 99]
    d = rng.choice(common) if rng.random() < 0.7 else rng.randint(2, 99)
    text = f"{rng.randint(1, d - 1)}/{d}"
    if r < 0.45:
        text = f"{rng.randint(1, 20) if rng.random() < 0.8 else rng.randint(1, 999)} {text}"
    return _sign(rng) + text if rng.random() < 0.04 else text


def draw_time24(rng: random.Random) -> str:
    """'06:05', '18:30', '23:00', '13:07', '00:45'."""
    hour = rng.choice([rng.randint(0, 9), rng.randint(13, 23)])
    r = rng.random()
    minute = 0 if r < 0.3 else rng.randint(1, 9) if r < 0.45 else rng.choice([15, 30, 45]) if r < 0.6 \
        else rng.randint(10, 59)
    return f"{hour:02d}:{minute:02d}"


def draw_iso_date(rng: random.Random) -> str:
    """'2023-06-06', '1999-12-31' (years mostly 1900-2030)."""
    month = rng.randrange(12)
    when = rng.randint(1900, 2030) if rng.random() < 0.8 else rng.randint(1000, 2099)
    return f"{when}-{month + 1:02d}-{rng.randint(1, DAYS_IN_MONTH[month]):02d}"


def roman_numeral(n: int) -> str:
    """1 .. 99 -> 'I' .. 'XCIX'."""
    return ROMAN[0][n // 10] + ROMAN[1][n % 10]


def draw_roman(rng: random.Random) -> str:
    """'Henry VIII', 'Louis XIV', 'World War II', 'Chapter IV', 'Part XII' (a listed name or noun)."""
    n = rng.randint(1, 20) if rng.random() < 0.8 else rng.randint(1, 99)
    if rng.random() < 0.5:
        return f"{rng.choice(ROMAN_NAMES)} {roman_numeral(n)}"
    return f"{rng.choice(ROMAN_NOUNS)} {roman_numeral(n)}"


EVERYDAY = {"temperature": draw_temperature, "negative": draw_negative, "decade": draw_decade,
            "fraction": draw_fraction, "time24": draw_time24, "isodate": draw_iso_date, "roman": draw_roman}
DRAW_ALL = {**DRAW, **EVERYDAY}  # a written-form sampler of every class, by class name

