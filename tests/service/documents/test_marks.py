"""place(): marks placed through links stay well nested and each appears once; identity gives back the run."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from service.documents.runs import Laid, Run
from service.documents.segments import Mark, Segment, Translated, identity, place


def _tags(n: int) -> list[tuple[str, str]]:
    return [(f"<{k}>", f"</{k}>") for k in range(n)]


@st.composite
def nested_marks(draw, length: int) -> list[Mark]:
    """Well-nested covering marks over [0, length) and points, tags <k>...</k> and [k]."""
    marks: list[Mark] = []

    def fill(lo: int, hi: int, depth: int) -> None:
        at = lo
        while at < hi and len(marks) < 12:
            kind = draw(st.sampled_from(["skip", "cover", "point"]))
            if kind == "skip":
                at += draw(st.integers(1, max(1, hi - at)))
            elif kind == "point":
                marks.append(Mark(at, at, f"[{len(marks)}]"))
                at += 1
            else:
                end = draw(st.integers(at + 1, hi))
                k = len(marks)
                marks.append(Mark(at, end, f"<{k}>", f"</{k}>"))
                if depth < 3:
                    fill(at, end, depth + 1)
                at = end

    fill(0, length, 0)
    return marks


@st.composite
def segments_and_outputs(draw):
    text = draw(st.text(alphabet="ab .", min_size=1, max_size=30))
    marks = draw(nested_marks(len(text)))
    out = draw(st.text(alphabet="xy .", max_size=30))
    span = st.tuples(st.integers(0, len(text)), st.integers(0, len(text))).map(sorted).map(tuple)
    target = st.tuples(st.integers(-2, len(out) + 2), st.integers(-2, len(out) + 2)).map(sorted).map(tuple)
    links = draw(st.lists(st.tuples(span, target), max_size=20))
    return Segment(text, tuple(marks)), Translated(out, tuple(links))


def _check_nested(result: str, segment: Segment, out: Translated) -> None:
    """Each mark's strings once, tags well nested, and the output text unchanged around them."""
    stack = []
    rest = result
    for mark in segment.marks:
        assert result.count(mark.before) == 1
        if mark.after:
            assert result.count(mark.after) == 1
    plain = []
    i = 0
    while i < len(rest):
        if rest[i] in "<[":
            j = rest.index(">" if rest[i] == "<" else "]", i)
            tag = rest[i : j + 1]
            if tag.startswith("</"):
                assert stack and stack[-1] == tag[2:-1], result
                stack.pop()
            elif tag.startswith("<"):
                stack.append(tag[1:-1])
            i = j + 1
        else:
            plain.append(rest[i])
            i += 1
    assert not stack
    assert "".join(plain) == out.text


@settings(max_examples=400, deadline=None)
@given(segments_and_outputs())
def test_marks_stay_nested_and_appear_once(case):
    segment, out = case
    _check_nested(place(segment, out), segment, out)


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet="ab .", min_size=1, max_size=30).flatmap(
        lambda t: st.tuples(st.just(t), nested_marks(len(t)))
    )
)
def test_identity_links_give_the_source_back(case):
    text, marks = case
    # points at the inner edge of a covering mark are folded into its tags by the formats; keep them apart
    covers = [(m.start, m.end) for m in marks if m.end > m.start]
    marks = [m for m in marks if m.end > m.start or not any(m.start in (s, e) for s, e in covers)]
    segment = Segment(text, tuple(marks))
    expected = []
    for i in range(len(text) + 1):
        closing = [(-m.start, -k, m.after) for k, m in enumerate(marks) if m.end == i and m.end > m.start]
        expected += [after for _, _, after in sorted(closing)]
        expected += [m.before for m in marks if m.start == i and m.end == i]
        expected += [m.before for m in marks if m.start == i and m.end > i]
        expected.append(text[i : i + 1])
    assert place(segment, identity(segment)) == "".join(expected)


def test_a_mark_no_token_links_into_goes_around_the_whole_output():
    segment = Segment("Pay $5 now.", (Mark(4, 6, "<b>", "</b>"), Mark(11, 11, " {x}")))
    # the point has no token after it: it goes at the end, before the output's own trailing space
    assert place(segment, Translated("Payez maintenant. ")) == "<b>Payez maintenant.</b> {x} "


def test_crossing_targets_are_shrunk_to_nest():
    # source: <a>one</a> <b>two</b>; the model links both words to overlapping output
    segment = Segment("one two", (Mark(0, 3, "<a>", "</a>"), Mark(4, 7, "<b>", "</b>")))
    out = Translated("uno dos tres", (((0, 3), (0, 7)), ((4, 7), (4, 12))))
    # <b> keeps the larger of its parts: the one outside <a>
    assert place(segment, out) == "<a>uno dos</a> <b>tres</b>"


def test_point_goes_before_the_token_after_it_and_escape_applies_to_text_only():
    segment = Segment("Hello, welcome", (Mark(5, 5, " {name}"),))
    out = Translated("Bonjour, bienvenue & plus", (((0, 5), (0, 7)), ((5, 6), (7, 8)), ((7, 14), (9, 18))))
    assert place(segment, out, lambda s: s.replace("&", "&amp;")) == "Bonjour {name}, bienvenue &amp; plus"


@st.composite
def runs(draw):
    """A random run (text, atoms, nested tags) and its sources joined."""
    run = Run()
    sources: list[str] = []
    depth = 0
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["text", "text", "atom", "open", "close"]))
        if kind == "text":
            words = draw(st.text(alphabet="ab .\n", min_size=1, max_size=12))
            run.text(words)
            sources.append(words)
        elif kind == "atom":
            surface = draw(st.sampled_from(["", "x", "{y}", "u.v w"]))
            run.atom(f"[{surface}]", surface)
            sources.append(f"[{surface}]")
        elif kind == "open":
            run.open("<i>")
            sources.append("<i>")
            depth += 1
        elif depth:
            run.close("</i>")
            sources.append("</i>")
            depth -= 1
    for _ in range(depth):
        run.close("</i>")
        sources.append("</i>")
    return run, "".join(sources)


@settings(max_examples=400, deadline=None)
@given(runs())
def test_any_run_comes_back_with_identity_outputs(case):
    run, source = case
    laid = Laid()
    laid.add(run, "en")
    assert laid.render([identity(s) for s in laid.segments]) == source
    for segment in laid.segments:
        assert any(ch.isalnum() for ch in segment.text)
