"""Written form -> spoken form of English text: the rules of every class; torch-free.

The conventions of the default corpus (num2words 0.5.x, English). Every character outside the
written forms below is copied verbatim: words, punctuation, every printable ASCII symbol, symbols
no class covers (`°` without C or F, `#`, `@`, `&`, `~`, `§`, `«`), units not listed (`5 kW` ->
"five kW"), emoji and other scripts. `verbalize(text)` rewrites a whole sentence; `classes(text)`
names the classes a sentence contains, with the same regular expression, so it works on any TSV
written with these conventions. A written form starts where a number may start: not right after a
letter, digit, `.`, `,`, `$`, `€`, `£`, `:`, `/` or `-`. Where two readings could apply, the first
in this list wins:

- phone `555-0142`, `(555) 123-4567`, `555-123-4567` (any digits in each group: `(046) 039-4752`):
  digit by digit, the groups separated by commas, the parentheses and hyphens dropped: "five five
  five, zero one four two". International: `+` and a country code of 1-3 digits, then two to six
  groups of 1-4 digits, each after one space or hyphen, one of them optionally in parentheses
  (`+44 20 7946 0958`, `+1 (555) 123-4567`): "plus" and the groups likewise: "plus four four, two
  zero, seven nine four six, zero nine five eight".
- ISO date `2023-06-06` (year 1000-2099, month 01-12, a day that month can have, February up to
  29): "June sixth, twenty twenty-three" (the month, the day as an ordinal, the year as below).
- date `May 21`, `May 21, 2024` (a full month name, day 1-31, optional ordinal suffix `May 21st`,
  optional year 1000-2099 after ", "): "May twenty-first" + ", " + the year as below:
  "May twenty-first, twenty twenty-four"; `May 3, 2005` -> "May third, two thousand and five".
- temperature: an optional sign, a number (integer or decimal), an optional space, `°C` or `°F`:
  "minus " for the sign, the number, "degree" when the number is written `1`, else "degrees", then
  "Celsius" or "Fahrenheit": `10°C` -> "ten degrees Celsius", `-5 °F` -> "minus five degrees
  Fahrenheit", `37.5°C` -> "thirty-seven point five degrees Celsius", `1°C` -> "one degree
  Celsius". `10°` and `10°K` are not temperatures ("ten°", "ten°K").
- time `5:30 pm` (hour 1-12 without a leading zero, two-digit minutes, optional `am`/`pm`/`AM`/`PM`,
  with or without a space): hour, then minutes 10-59 as a number ("five thirty"), 01-09 as "oh"
  + digit ("five oh five"), :00 as nothing when am/pm follows ("11:00 am" -> "eleven a m",
  "7:00 pm" -> "seven p m") and as "o'clock" otherwise ("7:00" -> "seven o'clock", "12:00" ->
  "twelve o'clock"); am/pm -> "a m" / "p m".
- 24-hour time `06:05`, `18:30`: an hour with a leading zero (00-09) or 13-23, a colon, minutes
  00-59, not followed by `:` or a word character. The hour: 00 -> "zero", 01-09 -> "oh" + digit,
  13-23 as a number; the minutes: 00 -> "hundred", 01-09 -> "oh" + digit, 10-59 as a number:
  `06:05` -> "oh six oh five", `18:30` -> "eighteen thirty", `23:00` -> "twenty-three hundred",
  `13:07` -> "thirteen oh seven", `00:00` -> "zero hundred", `00:45` -> "zero forty-five".
  Hours 10-12 are 12-hour times; `24:00` is no time.
- decade: a year 1100-2090 ending in 0, then `s`: the year as below in the plural ("ty" -> "ties",
  otherwise + "s"): `1990s` -> "nineteen nineties", `1800s` -> "eighteen hundreds", `2000s` ->
  "two thousands", `2010s` -> "twenty tens"; two digits 20-90 ending in 0, then `s`, with or without
  an apostrophe (`'90s`, `’90s`, `60s`): the number in the plural: "nineties", "sixties" (the
  apostrophe is dropped). Not followed by a word character (`1990s-era` -> "nineteen nineties-era").
- money `$`, `€`, `£` before an amount, with or without separators, optionally with exactly two
  digits of cents: "five dollars", "one dollar", "five dollars and twenty cents", `$0.99` ->
  "ninety-nine cents", `$1.01` -> "one dollar and one cent", `€3.50` -> "three euros and fifty
  cents", `£3.50` -> "three pounds and fifty pence", `£0.01` -> "one penny". Zero cents are not
  spoken (`$1,200.00` -> "one thousand, two hundred dollars"); `$0` and `$0.00` -> "zero dollars".
  Singular only for exactly 1. Amounts followed by a scale word (`$5 million`) are not generated.
- measure: an optional sign, a number (integer or decimal) + one space + `km`, `m`, `cm`, `mm`,
  `kg`, `g`, `mg`, `l`, `ml`, `mi`, `ft`, `lb`, `mph`, `km/h`: "minus " for the sign, the number
  as below, then the unit, singular only when the number is written `1` ("one kilometer"; "1.5
  km" and "1.0 km" -> "... kilometers"): kilometer, meter, centimeter, millimeter, kilogram,
  gram, milligram, liter, milliliter, mile, foot/feet, pound, "mile(s) per hour", `km/h` ->
  "kilometer(s) per hour". `5km` (no space) is not a measure; other units are copied.
- percentage: an optional sign, a number (integer or decimal) + `%` -> "minus " for the sign, the
  number + " percent" ("two point five percent").
- fraction: an optional sign, then a proper fraction `n/d` (1 <= n < d <= 99, no leading zero, not
  between other slashes: `3/4/2024` is no fraction) or one of `½ ⅓ ⅔ ¼ ¾ ⅕ ⅖ ⅗ ⅘ ⅙ ⅚ ⅐ ⅛ ⅜ ⅝ ⅞ ⅑ ⅒`,
  optionally after a whole number 1-999 and one space (`1 1/2`; with a vulgar fraction the space
  is optional: `1½`): the numerator as a number, then the denominator as an ordinal, plural when
  the numerator is not 1, with 2 -> "half"/"halves", 4 -> "quarter"/"quarters": `1/2` -> "one
  half", `3/4` -> "three quarters", `2/3` -> "two thirds", `5/8` -> "five eighths", `½` -> "one
  half"; after a whole number: the whole number + " and " + the fraction, a numerator of 1 read
  "a" (or "an" before a vowel): `1 1/2` -> "one and a half", `2 3/4` -> "two and three quarters",
  `3 1/8` -> "three and an eighth". `24/7` (not proper) is two cardinals: "twenty-four/seven".
- negative: a sign (`-` or the minus sign `−`) right before an integer or decimal, the sign not
  after a letter, digit or the characters above (`10-20` is no negative): "minus " + the number
  as below: `-5` -> "minus five", `-3.2` -> "minus three point two", `−12` -> "minus twelve".
- decimal `3.14` (optional separators in the integer part): `num2words(integer part)` + " point " +
  each digit by name: "three point one four", `0.05` -> "zero point zero five", `2.50` -> "two
  point five zero".
- ordinal `22nd`, `1,000,000th`: `num2words(n, to="ordinal")` ("one millionth"); the suffix is not
  checked.
- Roman numeral: a numeral I .. XCIX (upper case, standard form) after one space, right after a
  listed name (`ROMAN_NAMES`, as written there): "the" + the ordinal: `Henry VIII` -> "Henry the
  eighth", `Louis XIV` -> "Louis the fourteenth"; right after a listed noun (`ROMAN_NOUNS`,
  capitalized as written there): the cardinal: `World War II` -> "World War two", `Chapter IV` ->
  "Chapter four". Not followed by a word character. Anywhere else a numeral is copied (`Apollo
  XI`, `MIX`, `chapter IV`, `the book I read`).
- year: four digits 1000-2099, no separator, right after `in`, `since`, `by` or `of` (any case:
  `In 1984`) or alone in parentheses `(1999)`: `num2words(n, to="year")`: "nineteen eighty-four",
  `2005` -> "two thousand and five", `2024` -> "twenty twenty-four", `1905` -> "nineteen oh-five",
  `1200` -> "twelve hundred", `2000` -> "two thousand". Anywhere else (`We counted 1984 birds.`)
  the number is a cardinal, and so is `in 1,984`.
- cardinal `1,000,001` or `7000000` (any size; the corpus draws 0 .. 999,999,999,999):
  `num2words(n)`: "one million and one", "seven million". A run of digits with a leading zero
  (`007`) is read digit by digit. Any run of digits no class above takes is a cardinal, wherever
  it stands (`#12` -> "#twelve", `<3` -> "<three", `3/4/2024` -> "three/four/two thousand and
  twenty-four").
"""

from __future__ import annotations

import re

from textnorm.readers import (
    CURRENCIES,
    DIGITS,
    MONTHS,
    SCALES,
    SIGNS,
    UNITS,
    VULGAR,
    cardinal,
    date,
    decade,
    decimal,
    fraction,
    iso_date,
    measure,
    money,
    negative,
    ordinal,
    percentage,
    phone,
    roman,
    temperature,
    time,
    time24,
    year,
)

__all__ = ["CLASSES", "CURRENCIES", "DIGITS", "MONTHS", "PATTERN", "ROMAN_NAMES", "ROMAN_NOUNS", "UNITS",
           "YEAR_CONTEXT", "cardinal", "classes", "date", "decade", "decimal", "fraction", "iso_date",
           "measure", "money", "negative", "ordinal", "percentage", "phone", "roman", "temperature",
           "time", "time24", "verbalize", "year"]

YEAR_CONTEXT = ("in", "since", "by", "of")
ROMAN_NAMES = ("Henry", "Louis", "Elizabeth", "George", "Charles", "Edward", "William", "James",
               "Richard", "Philip", "Frederick", "Napoleon", "Peter", "Catherine", "Alexander",
               "Constantine", "Ramesses", "Pius", "Leo", "Gregory", "Victor", "Mary")
ROMAN_NOUNS = ("War", "Chapter", "Part", "Volume", "Book", "Act", "Scene", "Phase", "Level", "Section",
               "Article", "Episode", "Round", "Stage", "Season", "Bowl", "Class", "Type", "Grade")
CLASSES = ("cardinal", "ordinal", "percentage", "decimal", "money", "year", "date", "time", "measure",
           "phone", "temperature", "negative", "decade", "fraction", "time24", "isodate", "roman")

_INT = r"(?:\d{1,3}(?:,\d{3})+|\d+)"
_NUM = rf"{_INT}(?:\.\d+)?"
_START = r"(?<![\w.,$€£:/-])"  # a number starts here, not inside a word or another number
_SIGNED = rf"(?:{_START}[{SIGNS}]|{_START})"  # and may have a sign before it
_END = r"(?![\w]|[.,:]\d)"  # and ends here
_YEAR = r"(?:1\d{3}|20\d{2})"
_DAY = r"(?:3[01]|[12]\d|[1-9])(?:st|nd|rd|th)?"
_ISO_MONTH_DAY = (r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)"
                  r"|02-(?:0[1-9]|[12]\d))")
_CONTEXT = "".join(f"(?<=\\b{w} )|(?<=\\b{w.capitalize()} )|(?<=\\b{w.upper()} )|" for w in YEAR_CONTEXT)
_UNIT = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
_PROPER = "|".join(f"{n}/{d}" for d in range(99, 1, -1) for n in range(d - 1, 0, -1))
_VULGAR = "".join(VULGAR)
_FRACTION = (rf"(?:(?:[1-9]\d{{0,2}} )?(?=\d{{1,2}}/\d)(?:{_PROPER})(?![\w/]|[.,:]\d)"
             rf"|(?:[1-9]\d{{0,2}} ?)?[{_VULGAR}])")
_ROMAN = r"(?=[IVXLC])(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})(?!\w)"
_NOUNS = "|".join(ROMAN_NOUNS)
_PHONE = (r"\+\d{1,3}(?:[ -](?:\(\d{1,4}\)|\d{1,4})){2,6}(?![\w-]|[.,]\d)"
          r"|(?<![\w(-])(?:\(\d{3}\) \d{3}-\d{4}|\d{3}-\d{3}-\d{4}|\d{3}-\d{4})(?![\w-])")
PATTERN = re.compile(
    rf"(?P<phone>{_PHONE})"
    rf"|(?P<isodate>{_START}{_YEAR}-{_ISO_MONTH_DAY}(?![\w-]|[.,:]\d))"
    rf"|(?P<date>\b(?:{'|'.join(MONTHS)}) {_DAY}(?:, {_YEAR}(?![\d%]))?{_END})"
    rf"|(?P<temperature>{_SIGNED}{_NUM} ?°[{''.join(SCALES)}](?!\w))"
    rf"|(?P<time>{_START}(?:1[0-2]|[1-9]):[0-5]\d(?: ?(?:am|pm|AM|PM)\b)?(?![\w:]))"
    rf"|(?P<time24>{_START}(?:0\d|1[3-9]|2[0-3]):[0-5]\d(?![\w:]|[.,]\d))"
    rf"|(?P<decade>(?:{_START}(?:1[1-9]\d0|20\d0)|(?<![\w'’])['’]?(?<![\w.,$€£:/-])[2-9]0)s(?!\w))"
    rf"|(?P<money>[$€£]{_INT}(?:\.\d\d)?(?!\d|[.,]\d))"
    rf"|(?P<measure>{_SIGNED}{_NUM} (?:{_UNIT})(?![\w/]))"
    rf"|(?P<percentage>{_SIGNED}{_NUM}%)"
    rf"|(?P<fraction>{_SIGNED}{_FRACTION})"
    rf"|(?P<negative>{_START}[{SIGNS}]{_NUM}(?![\w/]|[.,:/]\d))"
    rf"|(?P<decimal>{_START}{_INT}\.\d+(?!\d))"
    rf"|(?P<ordinal>{_START}{_INT}(?:st|nd|rd|th)(?!\w))"
    rf"|(?P<roman_name>\b(?:{'|'.join(ROMAN_NAMES)}) {_ROMAN})"
    rf"|(?P<roman_noun>\b(?:{_NOUNS}) {_ROMAN})"
    rf"|(?P<year>(?:{_CONTEXT}(?<=\()(?={_YEAR}\))){_YEAR}(?![\d%]|[.,:]\d|\w))"
    rf"|(?P<cardinal>{_INT})"
)


def _fraction(written: str) -> str:
    """A fraction with an optional sign."""
    return f"minus {fraction(written[1:])}" if written[0] in SIGNS else fraction(written)


VERBALIZERS = {"cardinal": cardinal, "ordinal": ordinal, "percentage": percentage, "decimal": decimal,
               "money": money, "year": year, "date": date, "time": time, "measure": measure, "phone": phone,
               "temperature": temperature, "negative": negative, "decade": decade, "fraction": _fraction,
               "time24": time24, "isodate": iso_date, "roman_name": lambda w: roman(w, True),
               "roman_noun": lambda w: roman(w, False)}


def _class(group: str | None) -> str:
    """The class of a pattern group ('roman_name' -> 'roman')."""
    return "roman" if group in ("roman_name", "roman_noun") else group or "cardinal"


def verbalize(text: str) -> str:
    """The spoken form of a whole written sentence."""
    return PATTERN.sub(lambda m: VERBALIZERS[m.lastgroup or "cardinal"](m[0]), text)


def classes(text: str) -> set[str]:
    """The classes of written forms a sentence contains, e.g. {'money', 'time'}."""
    return {_class(m.lastgroup) for m in PATTERN.finditer(text)}
