"""Markdown: sentences at the source level, syntax kept byte for byte, inline syntax placed through links."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from service.documents.formats import parse
from service.documents.segments import Mark, Segment, Translated, identity

DOC = """# Title *one* #

Intro with **bold** text. See [the docs](https://x.org/a_(b) "T") now!

> Quoted line one
> and line two. `code.` here.

1. First item with <https://a.b/c> link
2. Second, ![alt](p.png) image.

```python
print("Not. Translated.")
```

    indented code. Kept.

<div>
HTML block. Kept.
</div>

| Head | Other |
|------|-------|
| Cell. | ~~gone~~ now |

[ref]: https://ref.example "Ref"
Setext heading
==============
"""


def _identity(text: str) -> str:
    doc = parse(text, "markdown", "en")
    return doc.render([identity(s) for s in doc.segments])


def test_segments_of_a_document():
    doc = parse(DOC, "markdown", "en")
    assert doc.segments == [
        Segment("Title one", (Mark(6, 9, "*", "*"),)),
        Segment("Intro with bold text.", (Mark(11, 15, "**", "**"),)),
        Segment("See the docs now!", (Mark(4, 12, "[", '](https://x.org/a_(b) "T")'),)),
        Segment("Quoted line one\nand line two.", ()),
        Segment("here."),  # "`code.`" ends a sentence of its own, with nothing to translate: kept
        Segment("First item with link", (Mark(16, 16, "<https://a.b/c> "),)),
        Segment("Second, image.", (Mark(8, 8, "![alt](p.png) "),)),
        Segment("Head"),
        Segment("Other"),
        Segment("Cell."),
        Segment("gone now", (Mark(0, 4, "~~", "~~"),)),
        Segment("Setext heading"),
    ]
    assert _identity(DOC) == DOC


def test_translation_keeps_the_syntax_and_the_quote_prefix():
    doc = parse("> Quoted *line*\r\n> two.\n", "markdown", "en")
    assert doc.segments == [Segment("Quoted line\ntwo.", (Mark(7, 11, "*", "*"),))]
    # "Zitierte Zeile zwei." with a line break kept by the model: the prefix "> " comes back after it
    links = (((0, 6), (0, 8)), ((7, 11), (9, 14)), ((12, 15), (15, 19)), ((15, 16), (19, 20)))
    assert doc.render([Translated("Zitierte Zeile\nzwei.", links)]) == "> Zitierte *Zeile*\r\n> zwei.\n"
    # and without one, one line
    links = (((0, 6), (0, 8)), ((7, 11), (9, 14)), ((12, 15), (15, 19)), ((15, 16), (19, 20)))
    assert doc.render([Translated("Zitierte Zeile zwei.", links)]) == "> Zitierte *Zeile* zwei.\n"


def test_escapes_and_entities_are_read_as_written():
    doc = parse("Cost \\*not\\* &amp; more.\n", "markdown", "en")
    assert doc.segments == [Segment("Cost \\*not\\* &amp; more.")]


def test_what_cannot_be_matched_is_kept_untranslated():
    text = "-\tTabbed item\n\tlazy continuation\n"
    assert _identity(text) == text


_BITS = st.sampled_from(
    [
        "# ",
        "## ",
        "> ",
        "- ",
        "1. ",
        "* ",
        "    ",
        "\n",
        "\n\n",
        "\r\n",
        "Hello.",
        " world",
        "*",
        "**",
        "_",
        "`",
        "```",
        "[",
        "]",
        "(",
        ")",
        "](u)",
        "![a](b)",
        "<b>",
        "</b>",
        "<https://x.y>",
        "\\*",
        "&amp;",
        "{x}",
        "%s",
        "| a | b |\n|---|---|\n",
        "~~",
        "One. Two.",
        "\t",
        "===",
        "---",
        "é",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_BITS, max_size=30).map("".join))
def test_any_markdown_comes_back_exactly(text):
    assert _identity(text) == text


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_text_as_markdown_comes_back_exactly(text):
    assert _identity(text) == text
