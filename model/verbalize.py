"""Written form -> spoken form of English text, one function per class; torch-free.

The conventions of the default corpus (num2words 0.5.x, English). Every character outside the
written forms below is copied verbatim. `verbalize(text)` rewrites a whole sentence; `classes(text)`
names the classes a sentence contains, with the same regular expression, so it works on any TSV
written with these conventions. Where two readings could apply, the first in this list wins:

- phone `555-0142`, `(555) 123-4567`, `555-123-4567`: digit by digit, the groups separated by
  commas, the parentheses and hyphens dropped: "five five five, zero one four two".
- date `May 21`, `May 21, 2024` (a full month name, day 1-31, optional ordinal suffix `May 21st`,
  optional year 1000-2099 after ", "): "May twenty-first" + ", " + the year as below:
  "May twenty-first, twenty twenty-four"; `May 3, 2005` -> "May third, two thousand and five".
- time `5:30 pm` (hour 1-12 without a leading zero, two-digit minutes, optional `am`/`pm`/`AM`/`PM`,
  with or without a space): hour, then minutes 10-59 as a number ("five thirty"), 01-09 as "oh"
  + digit ("five oh five"), :00 as nothing when am/pm follows ("11:00 am" -> "eleven a m",
  "7:00 pm" -> "seven p m") and as "o'clock" otherwise ("7:00" -> "seven o'clock", "12:00" ->
  "twelve o'clock"); am/pm -> "a m" / "p m". Hours 0 and 13-23 are not times.
- money `$`, `€`, `£` before an amount, with or without separators, optionally with exactly two
  digits of cents: "five dollars", "one dollar", "five dollars and twenty cents", `$0.99` ->
  "ninety-nine cents", `$1.01` -> "one dollar and one cent", `€3.50` -> "three euros and fifty
  cents", `£3.50` -> "three pounds and fifty pence", `£0.01` -> "one penny". Zero cents are not
  spoken (`$1,200.00` -> "one thousand, two hundred dollars"); `$0` and `$0.00` -> "zero dollars".
  Singular only for exactly 1. Amounts followed by a scale word (`$5 million`) are not generated.
- measure: a number (integer or decimal) + one space + `km`, `m`, `cm`, `mm`, `kg`, `g`, `mg`, `l`,
  `ml`, `mi`, `ft`, `lb`, `mph`, `km/h`: the number as below, then the unit, singular only when the
  number is written `1` ("one kilometer"; "1.5 km" and "1.0 km" -> "... kilometers"):
  kilometer, meter, centimeter, millimeter, kilogram, gram, milligram, liter, milliliter, mile,
  foot/feet, pound, "mile(s) per hour", `km/h` -> "kilometer(s) per hour". `5km` (no space) is not
  a measure.
- percentage: a number (integer or decimal) + `%` -> the number + " percent" ("two point five percent").
- decimal `3.14` (optional separators in the integer part): `num2words(integer part)` + " point " +
  each digit by name: "three point one four", `0.05` -> "zero point zero five", `2.50` -> "two
  point five zero".
- ordinal `22nd`, `1,000,000th`: `num2words(n, to="ordinal")` ("one millionth"); the suffix is not
  checked.
- year: four digits 1000-2099, no separator, right after `in`, `since`, `by` or `of` (any case:
  `In 1984`) or alone in parentheses `(1999)`: `num2words(n, to="year")`: "nineteen eighty-four",
  `2005` -> "two thousand and five", `2024` -> "twenty twenty-four", `1905` -> "nineteen oh-five",
  `1200` -> "twelve hundred", `2000` -> "two thousand". Anywhere else (`We counted 1984 birds.`)
  the number is a cardinal, and so is `in 1,984`.
- cardinal `1,000,001` or `7000000` (any size; the corpus draws 0 .. 999,999,999,999):
  `num2words(n)`: "one million and one", "seven million". A run of digits with a leading zero
  (`007`) is read digit by digit.
"""

from __future__ import annotations

import re

from num2words import num2words

DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
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
YEAR_CONTEXT = ("in", "since", "by", "of")
CLASSES = ("cardinal", "ordinal", "percentage", "decimal", "money", "year", "date", "time", "measure",
           "phone")

_INT = r"(?:\d{1,3}(?:,\d{3})+|\d+)"
_NUM = rf"{_INT}(?:\.\d+)?"
_START = r"(?<![\w.,$€£:/-])"  # a number starts here, not inside a word or another number
_END = r"(?![\w]|[.,:]\d)"  # and ends here
_YEAR = r"(?:1\d{3}|20\d{2})"
_DAY = r"(?:3[01]|[12]\d|[1-9])(?:st|nd|rd|th)?"
_CONTEXT = "".join(f"(?<=\\b{w} )|(?<=\\b{w.capitalize()} )|(?<=\\b{w.upper()} )|" for w in YEAR_CONTEXT)
_UNIT = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
PATTERN = re.compile(
    rf"(?P<phone>(?<![\w(-])(?:\(\d{{3}}\) \d{{3}}-\d{{4}}|\d{{3}}-\d{{3}}-\d{{4}}|\d{{3}}-\d{{4}})(?![\w-]))"
    rf"|(?P<date>\b(?:{'|'.join(MONTHS)}) {_DAY}(?:, {_YEAR}(?![\d%]))?{_END})"
    rf"|(?P<time>{_START}(?:1[0-2]|[1-9]):[0-5]\d(?: ?(?:am|pm|AM|PM)\b)?(?![\w:]))"
    rf"|(?P<money>[$€£]{_INT}(?:\.\d\d)?(?!\d|[.,]\d))"
    rf"|(?P<measure>{_START}{_NUM} (?:{_UNIT})(?![\w/]))"
    rf"|(?P<percentage>{_START}{_NUM}%)"
    rf"|(?P<decimal>{_START}{_INT}\.\d+(?!\d))"
    rf"|(?P<ordinal>{_START}{_INT}(?:st|nd|rd|th)(?!\w))"
    rf"|(?P<year>(?:{_CONTEXT}(?<=\()(?={_YEAR}\))){_YEAR}(?![\d%]|[.,:]\d|\w))"
    rf"|(?P<cardinal>{_INT})"
)


def _digits(written: str) -> str:
    """Each digit by name: '0142' -> 'zero one four two'."""
    return " ".join(DIGITS[int(c)] for c in written if c.isdigit())


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


def ordinal(written: str) -> str:
    """'22nd' -> 'twenty-second', '1,000,000th' -> 'one millionth'."""
    return num2words(int(written[:-2].replace(",", "")), to="ordinal")


def percentage(written: str) -> str:
    """'45%' -> 'forty-five percent', '2.5%' -> 'two point five percent'."""
    return f"{_number(written[:-1])} percent"


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


def date(written: str) -> str:
    """'May 21, 2024' -> 'May twenty-first, twenty twenty-four'; 'May 21' -> 'May twenty-first'."""
    month, rest = written.split(" ", 1)
    day, _, when = rest.partition(", ")
    spoken = f"{month} {num2words(int(day.rstrip('stndrh')), to='ordinal')}"
    return f"{spoken}, {year(when)}" if when else spoken


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


def measure(written: str) -> str:
    """'2.5 km' -> 'two point five kilometers', '1 kg' -> 'one kilogram', '1 mph' -> 'one mile per hour'."""
    number, unit = written.split(" ")
    singular, plural = UNITS[unit]
    return f"{_number(number)} {singular if number == '1' else plural}"


def phone(written: str) -> str:
    """'555-0142' -> 'five five five, zero one four two'; '(555) 123-4567' likewise in three groups."""
    return ", ".join(_digits(group) for group in re.findall(r"\d+", written))


VERBALIZERS = {"cardinal": cardinal, "ordinal": ordinal, "percentage": percentage, "decimal": decimal,
               "money": money, "year": year, "date": date, "time": time, "measure": measure, "phone": phone}


def verbalize(text: str) -> str:
    """The spoken form of a whole written sentence."""
    return PATTERN.sub(lambda m: VERBALIZERS[m.lastgroup or "cardinal"](m[0]), text)


def classes(text: str) -> set[str]:
    """The classes of written forms a sentence contains, e.g. {'money', 'time'}."""
    return {m.lastgroup or "cardinal" for m in PATTERN.finditer(text)}
