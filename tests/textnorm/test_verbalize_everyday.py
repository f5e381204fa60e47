"""The everyday classes read as textnorm/verbalize.py's docstring says: hand-written references, the issue's
examples, and near-misses that are copied or read only where a stated rule applies."""

from __future__ import annotations

import string

import pytest

from textnorm import verbalize as v


@pytest.mark.parametrize(("written", "spoken"), [
    ("It's 10°C outside", "It's ten degrees Celsius outside"),
    ("The 1990s saw", "The nineteen nineties saw"),
    ("2/3 of cases", "two thirds of cases"),
    ("leaves at 06:05", "leaves at oh six oh five"),
    ("2023-06-06", "June sixth, twenty twenty-three"),
    ("(046) 039-4752", "zero four six, zero three nine, four seven five two"),
    ("(172) 970-9006", "one seven two, nine seven zero, nine zero zero six"),
    ("Tom & Jerry met @home", "Tom & Jerry met @home"),
    ("named data_final_v.csv", "named data_final_v.csv"),
    ("She typed :-) and <3", "She typed :-) and <three"),
    ("and 東京 were on the sign", "and 東京 were on the sign"),
    ("Keep the % sign out of it.", "Keep the % sign out of it."),
])
def test_the_issues_examples(written, spoken):
    assert v.verbalize(written) == spoken


@pytest.mark.parametrize(("written", "spoken", "found"), [
    ("10°C", "ten degrees Celsius", "temperature"), ("-5 °F", "minus five degrees Fahrenheit", "temperature"),
    ("37.5°C", "thirty-seven point five degrees Celsius", "temperature"),
    ("1°C", "one degree Celsius", "temperature"), ("−40°F", "minus forty degrees Fahrenheit", "temperature"),
    ("-5", "minus five", "negative"), ("-3.2", "minus three point two", "negative"),
    ("−12", "minus twelve", "negative"), ("-1,500", "minus one thousand, five hundred", "negative"),
    ("-2.5%", "minus two point five percent", "percentage"), ("-1 km", "minus one kilometer", "measure"),
    ("1990s", "nineteen nineties", "decade"), ("1800s", "eighteen hundreds", "decade"),
    ("'90s", "nineties", "decade"), ("’70s", "seventies", "decade"), ("the 60s", "the sixties", "decade"),
    ("2000s", "two thousands", "decade"), ("2010s", "twenty tens", "decade"),
    ("1900s", "nineteen hundreds", "decade"),
    ("1/2", "one half", "fraction"), ("3/4", "three quarters", "fraction"), ("2/3", "two thirds", "fraction"),
    ("5/8", "five eighths", "fraction"), ("1 1/2", "one and a half", "fraction"),
    ("½", "one half", "fraction"),
    ("1/4", "one quarter", "fraction"), ("15/16", "fifteen sixteenths", "fraction"),
    ("2 3/4", "two and three quarters", "fraction"), ("3 1/8", "three and an eighth", "fraction"),
    ("1 1/3", "one and a third", "fraction"), ("2¾", "two and three quarters", "fraction"),
    ("31/32", "thirty-one thirty-seconds", "fraction"), ("-1/2", "minus one half", "fraction"),
    ("06:05", "oh six oh five", "time24"), ("18:30", "eighteen thirty", "time24"),
    ("23:00", "twenty-three hundred", "time24"), ("13:07", "thirteen oh seven", "time24"),
    ("00:00", "zero hundred", "time24"), ("00:45", "zero forty-five", "time24"),
    ("09:10", "oh nine ten", "time24"),
    ("2023-06-06", "June sixth, twenty twenty-three", "isodate"),
    ("1999-12-31", "December thirty-first, nineteen ninety-nine", "isodate"),
    ("2005-02-29", "February twenty-ninth, two thousand and five", "isodate"),
    ("Henry VIII", "Henry the eighth", "roman"), ("World War II", "World War two", "roman"),
    ("Chapter IV", "Chapter four", "roman"), ("Louis XIV", "Louis the fourteenth", "roman"),
    ("Chapter XL", "Chapter forty", "roman"), ("Pius XII", "Pius the twelfth", "roman"),
    ("Super Bowl XCIX", "Super Bowl ninety-nine", "roman"),
    ("+44 20 7946 0958", "plus four four, two zero, seven nine four six, zero nine five eight", "phone"),
    ("+1 (555) 123-4567", "plus one, five five five, one two three, four five six seven", "phone"),
    ("(046) 039-4752", "zero four six, zero three nine, four seven five two", "phone"),
    ("109-0000", "one zero nine, zero zero zero zero", "phone"),
])
def test_each_everyday_class(written, spoken, found):
    assert v.verbalize(written) == spoken
    assert v.classes(written) == {found}


@pytest.mark.parametrize(("written", "spoken"), [
    ("It was 10° out.", "It was ten° out."), ("Rated 5 kW.", "Rated five kW."),
    ("Use 3 oz only.", "Use three oz only."),
    ("Due 3/4/2024.", "Due three/four/two thousand and twenty-four."),
    ("Ticket #12 won.", "Ticket #twelve won."),
    ("We met @home.", "We met @home."), ("A 1990s-era car.", "A nineteen nineties-era car."),
    ("Open 24/7.", "Open twenty-four/seven."), ("Pages 10-20.", "Pages ten-twenty."),
    ("Apollo XI flew.", "Apollo XI flew."), ("Henry was here.", "Henry was here."),
    ("It is 24:00.", "It is twenty-four:zero zero."), ("At 10°K.", "At ten°K."),
    ("It ran 5km.", "It ran fivekm."),
    ("A 2023-13-45 stamp", "A two thousand and twenty-three-thirteen-forty-five stamp"),
    ("1 1/1 cup", "one one/one cup"), ("-x and x-5", "-x and x-five"),
    ("George XX Jr", "George the twentieth Jr"),
    ("Henry MIX", "Henry MIX"), ("Part IIII", "Part IIII"), ("chapter IV", "chapter IV"),
    ("This is the 29th book I have seen.", "This is the twenty-ninth book I have seen."),
])
def test_near_misses_are_copied_or_read_by_the_rules_they_meet(written, spoken):
    assert v.verbalize(written) == spoken


@pytest.mark.parametrize("symbol", list(string.punctuation) + list("§«»©®™†•…—–±×÷µ¢¥₹°"))
def test_every_symbol_is_copied(symbol):
    text = f"Keep the {symbol} sign and {symbol}x{symbol} out of it."
    assert v.verbalize(text) == text and v.classes(text) == set()


@pytest.mark.parametrize("text", ["Привет, мир", "Καλημέρα κόσμε", "東京と大阪", "서울 한국", "مرحبا بالعالم",
                                  "שלום עולם", "नमस्ते", "🎉🚀 ❤️ 👍🏽"])
def test_other_scripts_and_emoji_are_copied(text):
    assert v.verbalize(text) == text
