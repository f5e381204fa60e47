"""The spoken form of one written form of each class (the rules are in textnorm/verbalize.py); torch-free."""

from __future__ import annotations

import re

from num2words import num2words

DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
UNITS: dict[str, tuple[str, str]] = {  # abbreviation -> (singular, plural)
    "km/h": ("kilometer per hour", "kilometers per hour"), "mph": ("mile per hour", "miles per hour"),
    "km": ("kilometer", "kilometers"), "m": ("meter", "meters"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "kg": ("kilogram", "kilograms"), "g": ("gram", "grams"),
    "mg": ("milligram", "milligrams"), "l": ("liter", "liters"), "ml": ("milliliter", "milliliters"),
    "mi": ("mile", "miles"), "ft": ("foot", "feet"), "lb": ("pound", "pounds"),
}
CURRENCIES: dict[str, tuple[str, str, str, str]] = {  # symbol -> unit and cent, singular and plural
    "$": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
}
SCALES = {"C": "Celsius", "F": "Fahrenheit"}
SIGNS = "-\u2212"  # hyphen-minus and the minus sign
VULGAR = {"½": (1, 2), "⅓": (1, 3), "⅔": (2, 3), "¼": (1, 4), "¾": (3, 4), "⅕": (1, 5), "⅖": (2, 5),
          "⅗": (3, 5), "⅘": (4, 5), "⅙": (1, 6), "⅚": (5, 6), "⅐": (1, 7), "⅛": (1, 8), "⅜": (3, 8),
          "⅝": (5, 8), "⅞": (7, 8), "⅑": (1, 9), "⅒": (1, 10)}
ROMAN_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100}


def _digits(written: str) -> str:
    """Each digit by name: '0142' -> 'zero one four two'."""
    return " ".join(DIGITS[int(c)] for c in written if c.isdigit())


def _signed(written: str) -> tuple[str, str]:
    """('minus ', rest) when the written form starts with a sign, else ('', written)."""
    return ("minus ", written[1:]) if written[:1] in SIGNS else ("", written)


def cardinal(written: str) -> str:
    """'1,000,001' or '1000001' -> 'one million and one'; a leading zero ('007') -> digit by digit."""
    digits = written.replace(",", "")
    if len(digits) > 1 and digits.startswith("0"):
        return _digits(digits)
    return num2words(int(digits))


def decimal(written: str) -> str:
    """'3.14' -> 'three point one four': the integer part as a cardinal, then each digit by name."""
    whole, frac = written.split(".")
    return f"{cardinal(whole)} point {_digits(frac)}"


def _number(written: str) -> str:
    """An integer or decimal number."""
    return decimal(written) if "." in written else cardinal(written)


def negative(written: str) -> str:
    """'-5' -> 'minus five', '−3.2' -> 'minus three point two' (a sign before an integer or decimal)."""
    sign, number = _signed(written)
    return sign + _number(number)


def ordinal(written: str) -> str:
    """'22nd' -> 'twenty-second', '1,000,000th' -> 'one millionth'."""
    return num2words(int(written[:-2].replace(",", "")), to="ordinal")


def percentage(written: str) -> str:
    """'45%' -> 'forty-five percent', '-2.5%' -> 'minus two point five percent'."""
    sign, number = _signed(written[:-1])
    return f"{sign}{_number(number)} percent"


def money(written: str) -> str:
    """'$5.20' -> 'five dollars and twenty cents', '$0.99' -> 'ninety-nine cents', '£1' -> 'one pound'."""
    unit, units, cent, cents = CURRENCIES[written[0]]
    whole_text, _, cents_text = written[1:].partition(".")
    whole, n_cents = int(whole_text.replace(",", "")), int(cents_text or 0)
    main = f"{num2words(whole)} {unit if whole == 1 else units}"
    if not n_cents:
        return main
    small = f"{num2words(n_cents)} {cent if n_cents == 1 else cents}"
    return small if whole == 0 else f"{main} and {small}"


def year(written: str) -> str:
    """'1984' -> 'nineteen eighty-four', '2005' -> 'two thousand and five' (num2words, to='year')."""
    return num2words(int(written), to="year")


def _month_day(month: int, day: int) -> str:
    """'May twenty-first' (month 1-12)."""
    return f"{MONTHS[month - 1]} {num2words(day, to='ordinal')}"


def date(written: str) -> str:
    """'May 21, 2024' -> 'May twenty-first, twenty twenty-four'; 'May 21' -> 'May twenty-first'."""
    month, rest = written.split(" ", 1)
    day, _, when = rest.partition(", ")
    spoken = _month_day(MONTHS.index(month) + 1, int(day.rstrip("stndrh")))
    return f"{spoken}, {year(when)}" if when else spoken


def iso_date(written: str) -> str:
    """'2023-06-06' -> 'June sixth, twenty twenty-three'."""
    when, month, day = written.split("-")
    return f"{_month_day(int(month), int(day))}, {year(when)}"


def time(written: str) -> str:
    """'5:30 pm' -> 'five thirty p m', '5:05' -> 'five oh five', '7:00' -> "seven o'clock"."""
    m = re.fullmatch(r"(\d+):(\d\d) ?([aApP][mM])?", written)
    assert m, written
    hour, minute, half = num2words(int(m[1])), int(m[2]), m[3]
    if minute == 0:
        words = [hour] if half else [hour, "o'clock"]
    else:
        words = [hour, f"oh {DIGITS[minute]}" if minute < 10 else num2words(minute)]
    if half:
        words.append(f"{half[0].lower()} m")
    return " ".join(words)


def time24(written: str) -> str:
    """'06:05' -> 'oh six oh five', '18:30' -> 'eighteen thirty', '23:00' -> 'twenty-three hundred'."""
    hour_text, minute_text = written.split(":")
    hour, minute = int(hour_text), int(minute_text)
    spoken_hour = "zero" if hour == 0 else f"oh {DIGITS[hour]}" if hour < 10 else num2words(hour)
    spoken_minute = "hundred" if minute == 0 else f"oh {DIGITS[minute]}" if minute < 10 else num2words(minute)
    return f"{spoken_hour} {spoken_minute}"


def measure(written: str) -> str:
    """'2.5 km' -> 'two point five kilometers', '1 kg' -> 'one kilogram', '-1 m' -> 'minus one meter'."""
    sign, rest = _signed(written)
    number, unit = rest.split(" ")
    singular, plural = UNITS[unit]
    return f"{sign}{_number(number)} {singular if number == '1' else plural}"


def temperature(written: str) -> str:
    """'10°C' -> 'ten degrees Celsius', '-5 °F' -> 'minus five degrees Fahrenheit', '1°C' -> 'one degree'."""
    sign, rest = _signed(written)
    number = rest[: rest.index("°")].rstrip(" ")
    degrees = "degree" if number == "1" else "degrees"
    return f"{sign}{_number(number)} {degrees} {SCALES[rest[-1]]}"


def _plural(words: str) -> str:
    """'nineteen ninety' -> 'nineteen nineties', 'eighteen hundred' -> 'eighteen hundreds'."""
    return words[:-1] + "ies" if words.endswith("y") else words + "s"


def decade(written: str) -> str:
    """'1990s' -> 'nineteen nineties', '1800s' -> 'eighteen hundreds', "'90s" -> 'nineties', '60s' -> ..."""
    digits = written.lstrip("'’")[:-1]
    return _plural(year(digits) if len(digits) == 4 else num2words(int(digits)))


def _fraction_words(numerator: int, denominator: int, article: bool = False) -> str:
    """'three quarters', 'one half', 'five eighths'; with `article`, a numerator of 1 is 'a' / 'an'."""
    name = {2: "half", 4: "quarter"}.get(denominator) or num2words(denominator, to="ordinal")
    if numerator != 1:
        name = "halves" if name == "half" else name + "s"
    if numerator == 1 and article:
        return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"
    return f"{num2words(numerator)} {name}"


def fraction(written: str) -> str:
    """'3/4' -> 'three quarters', '1 1/2' / '1½' -> 'one and a half', '½' -> 'one half'."""
    m = re.fullmatch(r"(?:(\d+) )?(\d+)/(\d+)|(?:(\d+) ?)?(\D)", written)
    assert m, written
    numerator, denominator = VULGAR[m[5]] if m[5] else (int(m[2]), int(m[3]))
    whole = m[1] or m[4]
    if whole is None:
        return _fraction_words(numerator, denominator)
    return f"{num2words(int(whole))} and {_fraction_words(numerator, denominator, article=True)}"


def roman_value(numeral: str) -> int:
    """'XIV' -> 14 (a valid numeral of I .. XCIX)."""
    values = [ROMAN_VALUES[c] for c in numeral]
    return sum(-v if i + 1 < len(values) and v < values[i + 1] else v for i, v in enumerate(values))


def roman(written: str, ordinal_reading: bool) -> str:
    """'Henry VIII' -> 'Henry the eighth' (a listed name), 'Chapter IV' -> 'Chapter four' (a listed noun)."""
    word, numeral = written.rsplit(" ", 1)
    n = roman_value(numeral)
    return f"{word} the {num2words(n, to='ordinal')}" if ordinal_reading else f"{word} {num2words(n)}"


def phone(written: str) -> str:
    """'555-0142' -> 'five five five, zero one four two'; '+44 20 7946' -> 'plus four four, two zero, ...'."""
    groups = ", ".join(_digits(group) for group in re.findall(r"\d+", written))
    return f"plus {groups}" if written.startswith("+") else groups
