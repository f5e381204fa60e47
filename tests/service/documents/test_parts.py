"""A document rendered in parts (as a stream sends it): the parts in order, then the tail, are its render."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.documents.formats import parse
from service.documents.segments import Segment, Translated, identity

DOCUMENTS = {
    "text": ["", "   \n\n", "One. Two three.\n\n  Four?  ", "No end", "\n\nLead. Tail\n"],
    "html": ["", "<p></p>", "<p>Pay <b>$5.20</b> now. Then go.</p><hr><ul><li>a b</li><li>c</li></ul>tail",
             "<!doctype html><html><body><h1>T</h1><p>x &amp; y. <i>z</i></p></body></html>",
             "<pre>kept</pre><p>One.</p><script>s()</script>"],
    "markdown": ["", "# Title\n\nSome *text*. More `code` here.\n\n- a\n- b\n\n```\ncode\n```\n",
                 "[link](http://x.y) and **bold**.\n"],
}


def _changed(segment: Segment) -> Translated:
    """An output unlike the source: its words reversed in upper case, linked to nothing."""
    return Translated(" ".join(reversed(segment.text.upper().split())))


def _parts(document, outputs) -> list[str]:
    return [document.part(i, o) for i, o in enumerate(outputs)] + [document.tail()]


@pytest.mark.parametrize("fmt,text", [(f, t) for f, texts in DOCUMENTS.items() for t in texts])
@pytest.mark.parametrize("output", [identity, _changed])
def test_the_parts_then_the_tail_spell_the_render(fmt, text, output):
    document = parse(text, fmt, "en")
    outputs = [output(s) for s in document.segments]
    assert "".join(_parts(document, outputs)) == document.render(outputs)


def test_with_identity_outputs_plain_parts_give_back_the_input():
    text = "A first one. A second one!\n\n  And a third?\n"
    document = parse(text, "text", "en")
    assert "".join(_parts(document, [identity(s) for s in document.segments])) == text


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab .?!\n<>/p*#-", max_size=80), st.sampled_from(list(DOCUMENTS)))
def test_any_text_in_parts_is_its_render(text, fmt):
    document = parse(text, fmt, "en")
    outputs = [_changed(s) for s in document.segments]
    assert "".join(_parts(document, outputs)) == document.render(outputs)


def test_a_segment_out_of_range_is_an_index_error():
    document = parse("One. Two.", "text", "en")
    with pytest.raises(IndexError):
        document.part(len(document.segments), Translated("x"))
