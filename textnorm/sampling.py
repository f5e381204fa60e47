"""Numbers drawn by shape, and the written form of each class drawn from a random stream.

Uniform sampling almost never gives the numbers real text is full of (1,000,000, 20,000, 40,050,
555,555), so `shaped_number` first draws a digit count (weighted towards short numbers), then a
shape with the probabilities of `SHAPES`:

- uniform 38%: any number of that many digits;
- round 16%: one significant digit (7,000,000, 20,000, 300);
- trailing 12%: two to all-but-one significant digits, then zeros (1,250,000, 43,000);
- inner 16%: first and last digits non-zero, inner digits mostly zero (1,000,001, 40,050, 7,003);
- repeated 8%: one digit repeated (555,555, 1111) or a two-digit pattern (121,212);
- small 6%: 0 .. 20;
- yearlike 4%: 1000 .. 2099 (read as a cardinal outside a year context).

Shapes that need more digits than drawn fall back to uniform. What comes out of
`shaped_number()` (12 digits at most; uniform sampling by digit count in brackets): 16% round, one
significant digit from 10 on (0.9%); 10% with a run of two or more inner zeros, as in 1,000,001 or
40,050 (3.4%); 5% one digit repeated, three digits or more (0.1%); 6% other numbers ending in two
or more zeros (0.7%); 18% 0 .. 20; 6% 11 or 12 digits. The `draw_*` functions return one written
form of each class (textnorm/verbalize.py reads them).
"""

from __future__ import annotations

import random

from textnorm.verbalize import MONTHS

SHAPES: dict[str, float] = {"uniform": 0.38, "round": 0.16, "trailing": 0.12, "inner": 0.16,
                            "repeated": 0.08, "small": 0.06, "yearlike": 0.04}
DIGIT_WEIGHTS = (10, 10, 10, 10, 9, 8, 7, 6, 5, 4, 3, 3)  # 1 .. 12 digits
MAX_CARDINAL = 10**12 - 1
UNIT_GROUPS: dict[str, tuple[str, ...]] = {
    "length": ("km", "km", "m", "m", "cm", "mm", "mi", "ft"), "weight": ("kg", "kg", "g", "mg", "lb"),
    "volume": ("l", "ml"), "speed": ("mph", "km/h"),
}
DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def ordinal_suffix(n: int) -> str:
    """English ordinal suffix: 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 102nd, ..."""
    if 10 <= n % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def _uniform(rng: random.Random, digits: int) -> int:
    """Uniform over the numbers with exactly `digits` digits (0 .. 9 for one digit)."""
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def _shape_value(rng: random.Random, shape: str, d: int) -> int:
    """A number of `d` digits (or of the shape's own range) with the given shape."""
    if shape == "small":
        return rng.randint(0, 20)
    if shape == "yearlike":
        return rng.randint(1000, 2099)
    if shape == "round" and d >= 2:
        return rng.randint(1, 9) * 10 ** (d - 1)
    if shape == "trailing" and d >= 3:
        head = rng.randint(2, d - 1)
        return _uniform(rng, head) * 10 ** (d - head)
    if shape == "inner" and d >= 3:
        digits = [rng.randint(1, 9)] + [0 if rng.random() < 0.75 else rng.randint(1, 9) for _ in range(d - 2)]
        digits[rng.randint(1, d - 2)] = 0  # at least one inner zero
        return int("".join(map(str, digits)) + str(rng.randint(1, 9)))
    if shape == "repeated" and d >= 2:
        if d >= 4 and rng.random() < 0.3:
            pair = f"{rng.randint(1, 9)}{rng.randint(0, 9)}"
            return int((pair * d)[:d])
        return int(str(rng.randint(1, 9)) * d)
    return _uniform(rng, d)


def shaped_number(rng: random.Random, max_digits: int = 12, shape: str | None = None) -> int:
    """A number of at most `max_digits` digits, its shape drawn from SHAPES unless given."""
    d = rng.choices(range(1, max_digits + 1), DIGIT_WEIGHTS[:max_digits])[0]
    shape = shape or rng.choices(list(SHAPES), list(SHAPES.values()))[0]
    n = _shape_value(rng, shape, d)
    return n if n < 10**max_digits else _uniform(rng, d)


def with_separators(n: int, rng: random.Random, p: float = 0.5) -> str:
    """The integer written with thousands separators (probability p, from 1000 on) or without."""
    return f"{n:,}" if n >= 1000 and rng.random() < p else str(n)


def _fraction(rng: random.Random, max_digits: int = 3) -> str:
    """Digits after a decimal point: '14', '05', '50', '5' (zeros more common than uniform)."""
    return "".join(str(0 if rng.random() < 0.25 else rng.randint(0, 9))
                   for _ in range(rng.randint(1, max_digits)))


def draw_cardinal(rng: random.Random, p_separators: float = 0.5) -> str:
    """'1,000,001', '7000000', '40,050', '555555', '12'."""
    return with_separators(shaped_number(rng), rng, p_separators)


def draw_ordinal(rng: random.Random) -> str:
    """'22nd', '100th', '1,000,000th' (1 .. 999,999,999)."""
    n = max(1, shaped_number(rng, 9) if rng.random() < 0.6 else rng.randint(1, 31))
    return with_separators(n, rng) + ordinal_suffix(n)


def draw_percentage(rng: random.Random) -> str:
    """'45%', '100%', '2.5%', '0.25%'."""
    if rng.random() < 0.7:
        return f"{1000 if rng.random() < 0.02 else shaped_number(rng, 3)}%"
    return f"{shaped_number(rng, 2)}.{_fraction(rng, 2)}%"


def draw_decimal(rng: random.Random) -> str:
    """'3.14', '0.05', '2.50', '1,234.5'."""
    whole = 0 if rng.random() < 0.3 else shaped_number(rng, 5)
    return f"{with_separators(whole, rng, 0.3)}.{_fraction(rng)}"


def draw_money(rng: random.Random) -> str:
    """'$5', '$1', '$5.20', '$0.99', '€1,200', '£3.50', '$1,200.00'."""
    symbol = rng.choice("$$$€£")
    if rng.random() < 0.1:  # cents only, rarely nothing at all
        cents = rng.randint(1, 99) if rng.random() < 0.95 else 0
        return f"{symbol}0.{cents:02d}"
    whole = 1 if rng.random() < 0.08 else shaped_number(rng, 7)
    r = rng.random()
    if r < 0.45:
        return f"{symbol}{with_separators(whole, rng, 0.8)}"
    cents = 0 if r < 0.52 else rng.choice([1, 5, 10, 25, 50, 75, 99]) if r < 0.7 else rng.randint(1, 99)
    return f"{symbol}{with_separators(whole, rng, 0.8)}.{cents:02d}"


def draw_year(rng: random.Random) -> str:
    """A year 1000 .. 2099, mostly 1900 .. 2030: '1984', '2005', '1905', '1200'."""
    r = rng.random()
    if r < 0.6:
        return str(rng.randint(1900, 2030))
    if r < 0.75:
        return str(rng.randint(2000, 2009))
    if r < 0.85:
        return str(rng.randint(10, 20) * 100)
    return str(rng.randint(1000, 2099))


def draw_year_phrase(rng: random.Random) -> str:
    """A year in its context: 'in 1984', 'since 2005', 'by 2030', 'of 1999', '(1999)'."""
    year = draw_year(rng)
    r = rng.random()
    if r < 0.15:
        return f"({year})"
    return f"{rng.choice(['in', 'in', 'In', 'since', 'by', 'of'])} {year}"


def draw_date(rng: random.Random) -> str:
    """'May 21', 'May 21, 2024', 'March 3, 2005'."""
    month = rng.randrange(12)
    day = rng.randint(1, DAYS_IN_MONTH[month])
    written = f"{MONTHS[month]} {day}"
    return f"{written}, {draw_year(rng)}" if rng.random() < 0.5 else written


def draw_time(rng: random.Random) -> str:
    """'5:30 pm', '5:05', '11:00 am', '7:00', '9:45PM'."""
    r = rng.random()
    minute = 0 if r < 0.3 else rng.randint(1, 9) if r < 0.45 else rng.choice([15, 30, 45]) if r < 0.6 \
        else rng.randint(10, 59)
    written = f"{rng.randint(1, 12)}:{minute:02d}"
    r = rng.random()
    if r < 0.4:
        return written
    half = rng.choice(["am", "pm"])
    return written + (f" {half.upper()}" if r < 0.5 else half if r < 0.55 else f" {half}")


def draw_measure(rng: random.Random, group: str | None = None) -> str:
    """'2.5 km', '1 kg', '30 mph', '1,500 m': a number and a unit of the group (any group if None)."""
    unit = rng.choice(UNIT_GROUPS[group or rng.choice(list(UNIT_GROUPS))])
    r = rng.random()
    if r < 0.1:
        number = "1"
    elif r < 0.45:
        number = f"{shaped_number(rng, 3)}.{_fraction(rng, 2)}"
    else:
        number = with_separators(shaped_number(rng, 5), rng)
    return f"{number} {unit}"


def _digits(rng: random.Random, n: int) -> str:
    """n random digits, sometimes one digit repeated."""
    if rng.random() < 0.1:
        return str(rng.randint(0, 9)) * n
    return "".join(str(rng.randint(0, 9)) for _ in range(n))


def draw_phone(rng: random.Random) -> str:
    """'555-0142', '(046) 039-4752', '172-970-9006', '+44 20 7946 0958', '+1 (555) 123-4567'."""
    r = rng.random()
    if r < 0.3:
        code = rng.choice(["1", "44", "33", "49", "61", "81", "91", "353", "1"]) if rng.random() < 0.6 \
            else _digits(rng, rng.randint(1, 3)).lstrip("0") or "7"
        sep = rng.choice([" ", " ", " ", "-"])
        groups = [_digits(rng, rng.choice((2, 3, 3, 4, 4)) if i else rng.randint(1, 4))
                  for i in range(rng.randint(2, 4))]
        if rng.random() < 0.3:
            groups[0] = f"({groups[0]})"
        return f"+{code}{sep[0] if groups[0][0] != '(' else ' '}" + sep.join(groups)
    area = "555" if rng.random() < 0.15 else _digits(rng, 3)
    r = rng.random()
    if r < 0.4:
        return f"{area}-{_digits(rng, 4)}"
    if r < 0.75:
        return f"({area}) {_digits(rng, 3)}-{_digits(rng, 4)}"
    return f"{area}-{_digits(rng, 3)}-{_digits(rng, 4)}"



DRAW = {"cardinal": draw_cardinal, "ordinal": draw_ordinal, "percentage": draw_percentage,
        "decimal": draw_decimal, "money": draw_money, "year": draw_year_phrase, "date": draw_date,
        "time": draw_time, "measure": draw_measure, "phone": draw_phone}


def filler_word(rng: random.Random, words: list[str]) -> str:
    """One open-vocabulary word, sometimes capitalized or upper-cased (names, acronyms)."""
    if rng.random() < 0.5:  # Zipf-like: frequent words often
        w = words[min(int(rng.paretovariate(0.6)) - 1, len(words) - 1)]
    else:  # uniform over the list: rare words as often as any
        w = rng.choice(words)
    r = rng.random()
    return w.capitalize() if r < 0.2 else w.upper() if r < 0.23 else w


def pick(rng: random.Random, weights: dict[str, int]) -> str:
    """A key drawn with the given weights."""
    return rng.choices(list(weights), list(weights.values()))[0]


def probe_number(rng: random.Random, max_digits: int = 12) -> int:
    """A round, trailing-zero, inner-zero or repeated-digit number of at least three digits."""
    while (n := shaped_number(rng, max_digits, rng.choice(["round", "trailing", "inner", "repeated"]))) < 100:
        pass
    return n
