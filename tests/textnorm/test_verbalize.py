"""Each class reads as the corpus conventions say: hand-written references and num2words itself."""

from __future__ import annotations

import pytest
from num2words import num2words

from textnorm import verbalize as v

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
SHAPES = [0, 7, 10, 20, 100, 101, 999, 1000, 1001, 1984, 20000, 40050, 100001, 555555, 1000000, 1000001,
          7000000, 7003000, 121212121, 999999999, 1000000000, 40000000005, 999999999999]


@pytest.mark.parametrize(("written", "spoken"), [
    ("1,000,000", "one million"), ("7000000", "seven million"), ("1,000,001", "one million and one"),
    ("40,050", "forty thousand and fifty"), ("0", "zero"),
    ("1984", "one thousand, nine hundred and eighty-four"),
    ("555,555", "five hundred and fifty-five thousand, five hundred and fifty-five"),
    ("007", "zero zero seven"),
])
def test_cardinal(written, spoken):
    assert v.cardinal(written) == spoken


@pytest.mark.parametrize("n", SHAPES)
def test_cardinal_and_ordinal_follow_num2words_with_or_without_separators(n):
    assert v.cardinal(str(n)) == v.cardinal(f"{n:,}") == num2words(n)
    if n:
        assert v.ordinal(f"{n:,}th") == v.ordinal(f"{n}th") == num2words(n, to="ordinal")


@pytest.mark.parametrize(("written", "spoken"), [
    ("1,000,000th", "one millionth"), ("22nd", "twenty-second"), ("1st", "first"), ("100th", "one hundredth"),
    ("45%", "forty-five percent"), ("2.5%", "two point five percent"), ("100%", "one hundred percent"),
    ("3.14", "three point one four"), ("0.05", "zero point zero five"), ("2.50", "two point five zero"),
    ("1,234.5", "one thousand, two hundred and thirty-four point five"),
])
def test_ordinal_percentage_decimal(written, spoken):
    reader = v.ordinal if written[-1].isalpha() else v.percentage if written.endswith("%") else v.decimal
    assert reader(written) == spoken


@pytest.mark.parametrize("whole", [0, 1, 3, 10, 40050, 1000000])
@pytest.mark.parametrize("fraction", ["0", "05", "50", "14", "999", "007"])
def test_decimal_reads_the_whole_part_with_num2words_and_the_rest_digit_by_digit(whole, fraction):
    spoken = f"{num2words(whole)} point {' '.join(NAMES[int(d)] for d in fraction)}"
    assert v.decimal(f"{whole}.{fraction}") == spoken
    assert v.percentage(f"{whole:,}.{fraction}%") == f"{spoken} percent"


@pytest.mark.parametrize(("written", "spoken"), [
    ("$5", "five dollars"), ("$1", "one dollar"), ("$5.20", "five dollars and twenty cents"),
    ("$0.99", "ninety-nine cents"), ("€1,200", "one thousand, two hundred euros"),
    ("£3.50", "three pounds and fifty pence"), ("$1,200.00", "one thousand, two hundred dollars"),
    ("$1.01", "one dollar and one cent"), ("£0.01", "one penny"), ("€1", "one euro"), ("£1", "one pound"),
    ("€2.05", "two euros and five cents"), ("$0", "zero dollars"), ("$0.00", "zero dollars"),
    ("$1000000", "one million dollars"),
])
def test_money(written, spoken):
    assert v.money(written) == spoken


@pytest.mark.parametrize(("written", "spoken"), [
    ("1984", "nineteen eighty-four"), ("2005", "two thousand and five"), ("2024", "twenty twenty-four"),
    ("2000", "two thousand"), ("1905", "nineteen oh-five"), ("1200", "twelve hundred"),
    ("2099", "twenty ninety-nine"), ("2010", "twenty ten"),
])
def test_year(written, spoken):
    assert v.year(written) == spoken


def test_every_year_follows_num2words():
    assert all(v.year(str(n)) == num2words(n, to="year") for n in range(1000, 2100))


@pytest.mark.parametrize(("written", "spoken"), [
    ("May 21, 2024", "May twenty-first, twenty twenty-four"), ("May 21", "May twenty-first"),
    ("March 3, 2005", "March third, two thousand and five"), ("June 1st", "June first"),
    ("December 31, 1999", "December thirty-first, nineteen ninety-nine"),
])
def test_date(written, spoken):
    assert v.date(written) == spoken


@pytest.mark.parametrize(("written", "spoken"), [
    ("5:30 pm", "five thirty p m"), ("5:05", "five oh five"), ("11:00 am", "eleven a m"),
    ("7:00", "seven o'clock"), ("7:00 pm", "seven p m"), ("12:00", "twelve o'clock"),
    ("9:45PM", "nine forty-five p m"), ("12:15 AM", "twelve fifteen a m"), ("10:10", "ten ten"),
])
def test_time(written, spoken):
    assert v.time(written) == spoken


@pytest.mark.parametrize(("written", "spoken"), [
    ("2.5 km", "two point five kilometers"), ("1 kg", "one kilogram"), ("30 mph", "thirty miles per hour"),
    ("1.5 km", "one point five kilometers"), ("1 km", "one kilometer"),
    ("1.0 km", "one point zero kilometers"),
    ("80 km/h", "eighty kilometers per hour"), ("1 km/h", "one kilometer per hour"), ("1 ft", "one foot"),
    ("6 ft", "six feet"), ("2 lb", "two pounds"), ("250 ml", "two hundred and fifty milliliters"),
    ("1,500 m", "one thousand, five hundred meters"), ("3 mi", "three miles"), ("5 mg", "five milligrams"),
    ("2 l", "two liters"), ("10 cm", "ten centimeters"), ("4 mm", "four millimeters"), ("9 g", "nine grams"),
])
def test_measure(written, spoken):
    assert v.measure(written) == spoken


@pytest.mark.parametrize(("written", "spoken"), [
    ("555-0142", "five five five, zero one four two"),
    ("(555) 123-4567", "five five five, one two three, four five six seven"),
    ("555-123-4567", "five five five, one two three, four five six seven"),
])
def test_phone(written, spoken):
    assert v.phone(written) == spoken


@pytest.mark.parametrize(("written", "spoken"), [
    ("We counted 1,000,000 birds.", "We counted one million birds."),
    ("It costs $5.20 today.", "It costs five dollars and twenty cents today."),
    ("Meet me at 5:30 pm.", "Meet me at five thirty p m."),
    ("Pi is 3.14 roughly.", "Pi is three point one four roughly."),
    ("Born in 1984 in Ohio.", "Born in nineteen eighty-four in Ohio."),
    ("Call 555-0142 now.", "Call five five five, zero one four two now."),
    ("We counted 1984 birds.", "We counted one thousand, nine hundred and eighty-four birds."),
    ("In 2005, it won.", "In two thousand and five, it won."),
    ("The film (1999) won.", "The film (nineteen ninety-nine) won."),
    ("The class of 2024 met.", "The class of twenty twenty-four met."),
    ("Done by 2030, since 1905.", "Done by twenty thirty, since nineteen oh-five."),
    ("It grew in 1,984 ways.", "It grew in one thousand, nine hundred and eighty-four ways."),
    ("The meeting moved to 5:30 pm on May 21.", "The meeting moved to five thirty p m on May twenty-first."),
    ("It rained on May 21, 2024 at 7:00.",
     "It rained on May twenty-first, twenty twenty-four at seven o'clock."),
    ("Run 2.5 km in 2000 m steps.", "Run two point five kilometers in two thousand meters steps."),
    ("Sales fell 2.5% to $0.99 by the 22nd.",
     "Sales fell two point five percent to ninety-nine cents by the twenty-second."),
    ("Nothing to read here!", "Nothing to read here!"),
])
def test_sentences(written, spoken):
    assert v.verbalize(written) == spoken


@pytest.mark.parametrize(("written", "found"), [
    ("We counted 1,000,000 birds.", {"cardinal"}), ("We counted 1984 birds.", {"cardinal"}),
    ("It was her 1,000,000th step.", {"ordinal"}), ("Up 45% or 2.5%.", {"percentage"}),
    ("Pi is 3.14 roughly.", {"decimal"}), ("It costs $5.20 or €1,200 or £3.50.", {"money"}),
    ("Born in 1984 in Ohio.", {"year"}), ("The film (1999) won.", {"year"}),
    ("We met on May 21, 2024.", {"date"}), ("We met on May 21.", {"date"}),
    ("Meet me at 5:30 pm or 7:00.", {"time"}), ("It is 2.5 km, 1 kg, 30 mph.", {"measure"}),
    ("Call 555-0142 or (555) 123-4567.", {"phone"}),
    ("On May 21, Anna paid $5 for 3 apples at 5:30 pm.", {"date", "money", "cardinal", "time"}),
    ("In 1984, 45% of 2,000 birds flew 3.5 km.", {"year", "percentage", "cardinal", "measure"}),
    ("Nothing to read here!", set()), ("It is 13:00 now.", {"time24"}), ("It is 24:00 now.", {"cardinal"}),
])
def test_classes(written, found):
    assert v.classes(written) == found
