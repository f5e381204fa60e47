"""Plain text: sentences as segments, everything else byte for byte."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from service.documents.formats import parse
from service.documents.segments import Mark, Segment, Translated, identity

_PIECES = st.sampled_from(
    [
        "Hello.",
        " ",
        "\n",
        "\r\n",
        "\t",
        "\n\n",
        "Dr. Smith",
        "wait!",
        "%s",
        "{name}",
        "x@y.org",
        "é",
        "中文。",
        "https://a.b/c.",
        "...",
        "  ",
        "a",
        "1.",
        "?",
    ]
)


def _identity(text: str, **kwargs) -> str:
    doc = parse(text, "text", "en", **kwargs)
    return doc.render([identity(s) for s in doc.segments])


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_comes_back_exactly(text):
    assert _identity(text) == text


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=30).map("".join))
def test_any_mix_of_sentences_spacing_and_placeholders_comes_back_exactly(text):
    assert _identity(text, protect=[r"\bSmith\b"]) == text


def test_segments_are_the_sentences_of_each_paragraph():
    doc = parse("  First one. Second\r\nline two!\n\n\tThird.\n", "text", "en")
    assert doc.segments == [Segment("First one."), Segment("Second\r\nline two!"), Segment("Third.")]
    out = doc.render([Translated("Erste."), Translated("Zweite."), Translated("Dritte.")])
    assert out == "  Erste. Zweite.\n\n\tDritte.\n"


def test_nothing_to_translate_is_not_sent():
    doc = parse("... \n\n{name} -- %s\n\n* ", "text", "en")
    assert doc.segments == []
    assert doc.render([]) == "... \n\n{name} -- %s\n\n* "
    assert parse("", "text", "en").segments == []


def test_placeholders_are_points_with_their_space():
    doc = parse("Hello {name}, welcome to %s today.", "text", "en")
    assert doc.segments == [
        Segment("Hello, welcome to today.", (Mark(5, 5, " {name}"), Mark(18, 18, "%s "))),
    ]
    links = (
        ((0, 5), (0, 7)),
        ((5, 6), (7, 8)),
        ((7, 14), (9, 18)),
        ((15, 17), (19, 20)),
        ((18, 23), (21, 32)),
        ((23, 24), (32, 33)),
    )
    out = doc.render([Translated("Bonjour, bienvenue à aujourd'hui.", links)])
    assert out == "Bonjour {name}, bienvenue à %s aujourd'hui."


def test_wrong_number_of_outputs_is_an_error():
    doc = parse("One. Two.", "text", "en")
    try:
        doc.render([Translated("Eins.")])
    except ValueError:
        return
    raise AssertionError("render accepted one output for two segments")
