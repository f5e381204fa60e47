"""The soak driver (bench/soak), short: a real server on the tiny bundle under a few hundred
requests of every kind, valid and hostile, with injected batch failures; and its checks can fail."""

from __future__ import annotations

import io
import json

import pytest

from bench.common.loadgen import Record
from bench.soak.calls import check
from bench.soak.cases import MIX, TRANSLATE, VALID_KINDS, Case, Reference
from bench.soak.http_calls import code_of, stream_error_code
from bench.soak.report import Report, compare_metrics, print_report, rss_growth, summarize
from bench.soak.run import Settings, run

REQUESTS, BURST_EVERY, MAX_BATCH, QUEUE = 400, 100, 8, 32


@pytest.fixture(scope="module")
def report(tiny_bundle, tiny_corpus) -> Report:
    """One short soak with every fault kind and a failing decoder step every 150."""
    settings = Settings(bundle=tiny_bundle, sources=tiny_corpus["valid"], requests=REQUESTS, concurrency=16,
                        warmup=200, max_batch_size=MAX_BATCH, queue_size=QUEUE, max_message_bytes=64 * 1024,
                        burst_every=BURST_EVERY, inject_every=150, max_connection_age_ms=2000, max_minutes=4)
    return run(settings, log=lambda _: None)


def test_every_request_gets_exactly_one_clean_answer(report):
    """None lost, duplicated or hanging; every status allowed for its kind, with a clean message."""
    bursts = REQUESTS // BURST_EVERY * (QUEUE // MAX_BATCH + 4)
    assert report.requests == report.answered == REQUESTS + bursts
    assert report.lost == report.duplicated == report.hanging == 0
    assert report.problems == []
    assert set(report.faults) == set(MIX) - VALID_KINDS  # every kind of fault was sent
    assert report.codes["INTERNAL"] > 0  # the injected batch failures happened ...
    assert report.valid_ok >= 100  # ... and plenty of valid requests were checked token for token
    assert report.valid_ok_http >= 30  # HTTP (infer JSON and binary, generate, generate_stream) among them
    assert report.codes["RESOURCE_EXHAUSTED"] > report.not_counted  # the bursts overflowed the queue


def test_server_is_healthy_counts_agree_and_memory_is_flat(report):
    """SERVING at the end, request counters equal to the driver's, RSS flat after its plateau (the second
    half's median within 5% of the first half's, computed here from the curve)."""
    assert report.serving_at_end
    assert report.metrics_mismatch == {}
    assert report.not_counted == report.faults["oversized"]
    curve = report.rss_curve_mib
    assert len(curve) == 20
    first, second = sorted(curve[:10]), sorted(curve[10:])
    assert (second[4] + second[5]) / (first[4] + first[5]) - 1 == pytest.approx(report.rss_growth)
    assert report.rss_growth <= 0.05, curve
    out = io.StringIO()
    print_report(report, out)
    assert out.getvalue().splitlines()[-2] == "PASSED"
    assert json.loads(out.getvalue().splitlines()[-1])["lost"] == 0


def answer(kind: str, method: str, code: str, details: str, waited_s: float, answers: int,
           index: int = 0) -> Record:
    """A request's record as the soak driver fills it."""
    return Record(index, start=0.0, end=waited_s, kind=kind, method=method, code=code, details=details,
                  answers=answers)


def _case(**overrides) -> Case:
    """A valid one-text Translate case."""
    values = {"kind": "translate", "method": TRANSLATE, "request": None, "deadline_s": 5.0,
              "allowed": frozenset({"OK"}), "references": [Reference([5, 6], "x")]} | overrides
    return Case(**values)


@pytest.mark.parametrize(("record", "found"), [
    (answer("translate", TRANSLATE, "INTERNAL", "KeyError: 'x' (File \"/app/a.py\")", 1.0, 1), "not in"),
    (answer("translate", TRANSLATE, "OK", "", 9.5, 1), "after a 5.0 s deadline"),
    (answer("translate", TRANSLATE, "OK", "", 1.0, 2), "2 terminal answers"),
    (answer("translate", TRANSLATE, "RESOURCE_EXHAUSTED", "busy", 1.0, 1), "lacks 'queue is full'"),
])
def test_the_checks_can_fail(record, found):
    """Bad answers are reported: a leaked internal, a late answer, two answers, a vague message."""
    check(_case(), record, injected_faults=False)
    assert any(found in p for p in record.problems), record.problems


@pytest.mark.parametrize(("status", "message", "code"), [
    (400, "x", "INVALID_ARGUMENT"), (404, "unknown model", "NOT_FOUND"), (413, "at most", "INVALID_ARGUMENT"),
    (500, "error id 1", "INTERNAL"), (503, "the queue is full", "RESOURCE_EXHAUSTED"),
    (503, "the server is shutting down", "UNAVAILABLE"), (504, "deadline", "DEADLINE_EXCEEDED"),
    (418, "teapot", "HTTP 418"),
])
def test_http_answers_are_named_as_the_server_counts_them(status, message, code):
    """An HTTP error's status (and, for 503, its message) gives the status table's gRPC name, which the
    server's request counter uses; a status outside the table stays visible as itself."""
    assert code_of(status, message) == code


def test_errors_inside_a_stream_are_named_by_their_message():
    assert stream_error_code("internal error (error id abc)") == "INTERNAL"
    assert stream_error_code("the queue is full") == "RESOURCE_EXHAUSTED"
    assert stream_error_code("the server shut down") == "UNAVAILABLE"


def test_internals_in_a_message_are_reported():
    """An allowed status whose message holds a traceback or a class name is still a problem."""
    record = answer("empty_text", TRANSLATE, "INVALID_ARGUMENT", "text 0 is empty: ValueError", 0.1, 1)
    check(_case(kind="empty_text", allowed=frozenset({"INVALID_ARGUMENT"}), hint="is empty", references=[]),
          record, injected_faults=False)
    assert any("internals" in p for p in record.problems)


def test_lost_requests_and_metric_differences_are_reported():
    """A request without a record is lost; a counter that grew differently is a mismatch."""
    report = Report(settings={})
    records = [answer("translate", TRANSLATE, "OK", "", 0.1, 1, i) for i in (0, 2)]
    summarize(report, records, sent=3)
    assert report.lost == 1
    compare_metrics(report, {}, {f"{TRANSLATE} OK": 1.0}, records)
    assert report.metrics_mismatch == {f"{TRANSLATE} OK": [1.0, 2]}
    assert not report.passed


def test_racing_cancels_may_move_but_not_vanish():
    """A cancelled stream the server finished counts OK there; one it never counted is a mismatch."""
    method = "translator.v1.Translator/TranslateStream"
    records = [answer("cancel_stream", method, "CANCELLED", "", 0.1, 1, i) for i in range(3)]
    moved = Report(settings={})
    compare_metrics(moved, {}, {f"{method} CANCELLED": 2.0, f"{method} OK": 1.0}, records)
    assert moved.metrics_mismatch == {} and moved.raced == 1
    vanished = Report(settings={})
    compare_metrics(vanished, {}, {f"{method} CANCELLED": 2.0}, records)
    assert vanished.metrics_mismatch == {f"{method} (racing)": [2, 3]}


def test_memory_is_judged_by_growth_after_the_plateau_not_against_a_cold_start():
    """A curve that jumps once early (a cold arena meeting new shapes) and stays flat passes; one that
    keeps rising fails: the verdict compares the curve's halves."""
    cold_then_flat = [100.0, 130.0, *([131.0, 130.0] * 9)]
    leaking = [100.0 + 2 * i for i in range(20)]
    assert rss_growth(cold_then_flat) == pytest.approx(0.0, abs=0.01)
    assert rss_growth(leaking) == pytest.approx(129 / 109 - 1)  # medians of 110..138 over 100..118
    for curve, ok in ((cold_then_flat, True), (leaking, False)):
        report = Report(settings={}, serving_at_end=True, rss_curve_mib=curve, rss_growth=rss_growth(curve))
        assert report.passed is ok
