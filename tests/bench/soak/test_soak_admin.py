"""The soak's Score and repository cases (bench/soak/admin_cases.py) and their checks: a call with the key
expects OK, one without it or with a wrong value the refusal naming the header of its protocol; a scored
pair must match scoring it alone; an accepted request failed as its model version was retired is excused
only when a reload explains it (it was in flight a grace after the reload), otherwise it is a bad status."""

from __future__ import annotations

import random

import pytest

from bench.common.loadgen import Record
from bench.soak.admin_cases import AdminCases
from bench.soak.calls import RETIRED, check
from bench.soak.case import HTTP_REPOSITORY_LOAD, REPOSITORY_LOAD, SCORE, Case, ScoreReference, score_problems
from bench.soak.http_cases import HttpRequest
from bench.soak.report import excuse_retired
from service.models.repository import UNLOAD_GRACE_S

KEY, VALUE = "soak-key", "soak-secret"


class Cases(AdminCases):
    """The mixin alone: a random generator and the restriction."""

    def __init__(self, seed: int) -> None:
        self.rng, self.restriction = random.Random(seed), (KEY, VALUE)


def _header(case: Case) -> tuple[str, str] | None:
    """The restriction header a repository case sends (gRPC metadata or HTTP header)."""
    if isinstance(case.request, HttpRequest):
        return next(((k, v) for k, v in case.request.headers.items() if k != "Content-Type"), None)
    return case.metadata[0] if case.metadata else None


@pytest.mark.parametrize("seed", range(12))
def test_repository_cases_expect_what_their_header_earns(seed):
    cases = Cases(seed)
    keyed, refused = cases._repo_keyed(), cases._repo_no_key()
    name = KEY if isinstance(keyed.request, HttpRequest) else f"triton-grpc-protocol-{KEY}"
    assert keyed.allowed == {"OK"} and _header(keyed) == (name, VALUE)
    expected = (("PERMISSION_DENIED", KEY) if isinstance(refused.request, HttpRequest)
                else ("UNAVAILABLE", f"triton-grpc-protocol-{KEY}"))
    assert refused.allowed == {expected[0]} and refused.hint == f"expecting header '{expected[1]}'"
    assert _header(refused) != (expected[1], VALUE)
    bad = cases._repo_bad_config()
    assert bad.allowed == {"INVALID_ARGUMENT"} and bad.hint == "config" and not bad.loads


def test_score_problems_compare_with_scoring_alone():
    refs = [ScoreReference([5, 6, 2], -3.25, True)]
    assert score_problems([([5, 6, 2], -3.2504, True)], refs) == []
    assert "differs" in score_problems([([5, 6, 2], -3.4, True)], refs)[0]
    assert "differ from scoring alone" in score_problems([([5, 6], -3.25, False)], refs)[0]
    assert "2 score results for 1 pairs" in score_problems([([5], 0.0, True)] * 2, refs)[0]


def _record(kind: str, method: str, code: str, start: float, end: float, details: str = "") -> Record:
    return Record(0, start=start, end=end, kind=kind, method=method, code=code, details=details, answers=1)


def test_a_retired_request_is_excused_only_by_a_reload_and_its_grace():
    """Failed 'shut down' after a reload's grace: excused; failed sooner, or with no reload: a bad status."""
    case = Case("score_long", SCORE, None, 60.0, frozenset({"OK"}), scores=[ScoreReference([1], -1.0, True)])
    late, soon, alone = (_record("score_long", SCORE, "UNAVAILABLE", 0.0, end, "the server shut down")
                         for end in (10.0 + UNLOAD_GRACE_S, 12.0, 40.0))
    for record in (late, soon, alone):
        check(case, record, injected_faults=False)
        assert [p for p in record.problems if p.startswith(RETIRED)], record.problems
    reload = _record("repo_keyed", REPOSITORY_LOAD, "OK", 5.0, 10.0)
    other = _record("repo_keyed", HTTP_REPOSITORY_LOAD, "PERMISSION_DENIED", 5.0, 10.0)
    assert excuse_retired([late, soon, reload, other]) == 1
    assert late.problems == []
    assert soon.problems and soon.problems[0].startswith("status UNAVAILABLE")
    assert excuse_retired([alone]) == 0 and "explained by no reload" in alone.problems[0]
