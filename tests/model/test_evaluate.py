"""Per-class exact match and the error analysis, on a hand-made set with known answers."""

from __future__ import annotations

import sys

import pytest

from model import evaluate as ev

# (source, reference, hypothesis): right or wrong by hand
CASES = [
    ("We counted 1,000,000 birds.", "We counted one million birds.", "We counted one billion birds."),
    ("We counted 1984 birds.", "We counted one thousand, nine hundred and eighty-four birds.",
     "We counted one thousand, nine hundred and eighty-four birds."),
    ("It costs $5.20 today.", "It costs five dollars and twenty cents today.",
     "It costs five dollars and twenty cents today."),
    ("Meet me at 5:30 pm on May 21.", "Meet me at five thirty p m on May twenty-first.",
     "Meet me at five thirty thirty p m on May twenty-first."),
    ("Born in 1984 in Ohio.", "Born in nineteen eighty-four in Ohio.",
     "Born in nineteen eighty-four in Ohio."),
    ("Call 555-0142 now.", "Call five five five, zero one four two now.",
     "Call five five five, zero one four two now."),
    ("Pi is 3.14 roughly.", "Pi is three point one four roughly.", "Pi is three point fourteen roughly."),
    ("Nothing to read here.", "Nothing to read here.", "Nothing to to read here."),
    ("Paid $5 for 2 kg at 7:00.", "Paid five dollars for two kilograms at seven o'clock.",
     "Paid five dollars for two kilograms at seven o'clock."),
]
SOURCES, REFS, HYPS = (list(column) for column in zip(*CASES, strict=True))


def test_class_scores_count_a_sentence_toward_every_class_it_contains():
    rows = {r.name: (r.n, r.correct) for r in ev.class_scores(SOURCES, HYPS, REFS)}
    assert rows == {"cardinal": (2, 1), "decimal": (1, 0), "money": (2, 2), "year": (1, 1), "date": (1, 0),
                    "time": (2, 1), "measure": (1, 1), "phone": (1, 1), "plain": (1, 0)}
    by_name = {r.name: r for r in ev.class_scores(SOURCES, HYPS, REFS)}
    assert by_name["cardinal"].exact_match == pytest.approx(50.0)
    assert by_name["time"].exact_match == pytest.approx(50.0)


def test_the_table_lists_class_count_and_exact_match():
    overall = ev.score(HYPS, REFS)
    table = ev.format_table(ev.class_scores(SOURCES, HYPS, REFS), overall).splitlines()
    assert table[0].split() == ["class", "count", "EM", "%"]
    assert table[1].split() == ["cardinal", "2", "50.00"]  # table order: cardinal first
    assert table[-1].split() == ["all", "9", "55.56"]
    assert overall.exact_match == pytest.approx(500 / 9)


@pytest.mark.parametrize(("hyp", "ref", "stutter"), [
    ("We counted counted birds.", "We counted birds.", ["counted"]),
    ("five five five, zero one four", "five five five, zero one four", []),  # the reference repeats too
    ("five five five five, zero", "five five five, zero", ["five"]),
    ("It is here here.", "It is here.", ["here"]),
    ("one billion birds", "one million birds", []),
])
def test_stutters_are_doubled_words_the_reference_does_not_double(hyp, ref, stutter):
    assert ev.stutters(hyp, ref) == stutter


def test_errors_are_listed_by_class_with_stutters_flagged():
    errors = ev.errors_by_class(SOURCES, HYPS, REFS)
    assert list(errors) == ["cardinal", "decimal", "date", "time", "plain"]
    assert [e.source for e in errors["cardinal"]] == ["We counted 1,000,000 birds."]
    assert errors["time"][0].stutters == ["thirty"] and errors["date"][0] is errors["time"][0]
    assert errors["plain"][0].stutters == ["to"] and errors["decimal"][0].stutters == []
    text = ev.format_errors(errors, per_class=1)
    assert "== time: 1 wrong, 1 stuttering" in text and "[stutter: thirty]" in text
    assert "HYP We counted one billion birds." in text


def test_cli_scores_given_hypotheses_without_a_model(tmp_path, monkeypatch, capsys):
    split = tmp_path / "split.tsv"
    split.write_text("".join(f"{s}\t{r}\n" for s, r in zip(SOURCES, REFS, strict=True)), encoding="utf-8")
    hyps = tmp_path / "hyps.txt"
    hyps.write_text("\n".join(HYPS) + "\n", encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["evaluate", "--hypotheses", str(hyps), "--split", str(split)])
    ev.main()
    out = capsys.readouterr().out
    assert "money" in out and '"exact_match": 55.56' in out and "== plain: 1 wrong, 1 stuttering" in out
    assert '"outside_unchanged": ' in out


@pytest.mark.parametrize(("source", "hypothesis", "kept"), [
    ("It's 10°C outside", "It's ten degrees Celsius outside", True),
    ("It's 10°C outside", "It's ten pounds outside", True),  # the form misread, the rest kept
    ("Tom & Jerry met @home", "Tom & Jerry met @home", True),
    ("Tom & Jerry met @home", "Tom  Jerry met @home", False),
    ("Keep the % sign out of it.", "Keep the  percent sign out of it.", False),
    ("and 東京 were on the sign", "and 東 were on the sign", False),
    ("At 5 and 6.", "At five and six.", True), ("At 5 and 6.", "At five six.", False),
    ("Call 555-0142 now.", "Call now.", False),  # a written form must be read as something
])
def test_outside_unchanged_compares_the_text_between_written_forms(source, hypothesis, kept):
    assert ev.outside_unchanged(source, hypothesis) is kept
