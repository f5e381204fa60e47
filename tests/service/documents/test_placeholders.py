"""Placeholders: found as written, kept out of the model's text, placed back through links."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.documents import placeholders
from service.documents.formats import parse
from service.documents.segments import Mark, Segment, Translated, identity


def _found(text: str, protect=()) -> list[str]:
    return [text[s:e] for s, e in placeholders.find(text, placeholders.compile_protect(protect))]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Pay %s or %d, %1$s, %.2f and 100%% now", ["%s", "%d", "%1$s", "%.2f", "%%"]),
        ("%(count)d files, 50% off, 5 % 3", ["%(count)d"]),
        (
            "Hi {name}, item {0} and {count, plural, one {# item} other {# items}}.",
            ["{name}", "{0}", "{count, plural, one {# item} other {# items}}"],
        ),
        ("{{ user }} and ${path} but not { spaced } or {", ["{{ user }}", "${path}"]),
        (
            "See https://example.com/a_(b)?q=1. Or www.x.org, then (http://y.io/z).",
            ["https://example.com/a_(b)?q=1", "www.x.org", "http://y.io/z"],
        ),
        ("Write to first.last+tag@mail.example.co.uk.", ["first.last+tag@mail.example.co.uk"]),
        ("No placeholder here: 3.5 percent, {}, %", []),
    ],
)
def test_found_as_written(text, expected):
    assert _found(text) == expected


def test_protect_patterns_and_overlaps():
    assert _found("Use SKU-123 and {SKU-9}", [r"SKU-\d+"]) == ["SKU-123", "{SKU-9}"]
    with pytest.raises(ValueError):
        parse("x", "text", "en", protect=["("])


@given(st.text(alphabet="ab %{}$s.@:/w0 ", max_size=40))
def test_split_joins_back(text):
    assert "".join(s for s, _ in placeholders.split(text)) == text


@pytest.mark.parametrize(
    ("text", "segment_text", "marks"),
    [
        ("Hello {name}, welcome.", "Hello, welcome.", (Mark(5, 5, " {name}"),)),  # space before, none after
        ("{name} is here.", "is here.", (Mark(0, 0, "{name} "),)),  # space after: it goes along
        ("Go to https://x.org/a.", "Go to.", (Mark(5, 5, " https://x.org/a"),)),
        ("Files: %d of %d.", "Files: of.", (Mark(7, 7, "%d "), Mark(9, 9, " %d"))),
        ("Size({w})x{h} px.", "Size()x px.", (Mark(5, 5, "{w}"), Mark(7, 7, "{h}"))),
    ],
)
def test_where_the_spaces_go(text, segment_text, marks):
    doc = parse(text, "text", "en")
    assert doc.segments == [Segment(segment_text, marks)]
    assert doc.render([identity(s) for s in doc.segments]) == text


def test_placeholder_follows_its_aligned_token_and_goes_last_without_one():
    doc = parse("Send {n} files to %s", "text", "en")
    assert doc.segments == [Segment("Send files to", (Mark(5, 5, "{n} "), Mark(13, 13, " %s")))]
    # "Envoyer des fichiers à": "files" -> "des fichiers"; nothing follows the second placeholder
    links = (((0, 4), (0, 7)), ((5, 10), (8, 20)), ((11, 13), (21, 22)))
    assert doc.render([Translated("Envoyer des fichiers à", links)]) == "Envoyer {n} des fichiers à %s"
