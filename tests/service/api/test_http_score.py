"""Score over HTTP (service/api/http/score.py): the runner's numbers for one pair and for lists, with and
without a version, alignment and tokens when asked, end_token_scored as the domain says (false for a
translation cut at the model's maximum length); bad bodies 400 with what is wrong, an unknown model 404."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.domain.types import ScoreOptions
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.http import post_json
from tests.support.scoring import limit_and_ended_pairs
from tests.support.server import MAX_BATCH, server_config


@pytest.fixture(scope="module")
def http_server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A server of the tiny bundle with both ports open."""
    with BackgroundServer(server_config(tiny_bundle, http_port=0), runner) as srv:
        yield srv


def score_url(server: BackgroundServer, version: str = "") -> str:
    """The score endpoint of the served model."""
    where = f"/versions/{version}" if version else ""
    return f"http://{server.http_address}/v2/models/translator{where}/score"


def test_one_pair_and_lists_score_as_the_runner(http_server, runner, texts):
    targets = [h[0].text for h in runner.translate(texts[:3])]
    want = runner.score(texts[:3], targets, ScoreOptions(return_alignment=True))
    status, kind, body = post_json(score_url(http_server), {"source": texts[0], "target": targets[0]})
    assert (status, kind) == (200, "application/json")
    answer = json.loads(body)
    assert answer["model_name"] == "translator" and len(answer["results"]) == 1
    (r,) = answer["results"]
    assert r["token_ids"] == want[0].target_ids and "alignment" not in r
    assert r["log_probs"] == pytest.approx(want[0].log_probs, abs=1e-5)
    assert r["log_prob"] == pytest.approx(want[0].log_prob, abs=1e-5)
    assert r["score"] == pytest.approx(want[0].score, abs=1e-6)
    assert r["end_token_scored"] is want[0].end_token_scored
    payload = {"sources": texts[:3], "targets": targets, "parameters": {"return_alignment": True,
                                                                       "return_tokens": True}}
    status, _, body = post_json(score_url(http_server, "1"), payload)
    assert status == 200
    for r, w in zip(json.loads(body)["results"], want, strict=True):
        assert r["log_prob"] == pytest.approx(w.log_prob, abs=1e-5) and r["source_token_ids"] == w.source_ids
        assert len(r["alignment"]) == len(w.target_ids) and len(r["tokens"]) == len(w.target_ids)
        assert r["alignment"][0] == pytest.approx(w.alignment[0], abs=1e-5)


def test_end_token_scored_is_false_for_a_translation_cut_at_the_maximum_length(http_server, runner, texts):
    sources, targets = limit_and_ended_pairs(runner, texts)
    want = runner.score(sources, targets)
    status, _, body = post_json(score_url(http_server), {"sources": sources, "targets": targets})
    assert status == 200, body
    got = json.loads(body)["results"]
    assert [r["end_token_scored"] for r in got] == [w.end_token_scored for w in want] == [False, True]
    assert all(type(r["end_token_scored"]) is bool for r in got)
    cut, finished = got
    assert cut["token_ids"] == runner.encode_target([targets[0]])[0]  # no eos after the target's tokens
    assert len(cut["token_ids"]) == runner.max_len - 1
    assert cut["score"] == pytest.approx(cut["log_prob"] / len(cut["token_ids"]), rel=1e-6)
    assert finished["token_ids"] == [*runner.encode_target(targets[1:])[0], runner.special.eos]


@pytest.mark.parametrize(("payload", "message"), [
    ({"sources": [], "targets": []}, "no (source, target) pair"),
    ({"sources": ["we 5", "we 6"], "targets": ["x"]}, "2 source(s) but 1 target(s)"),
    ({"source": "we 5"}, "give either target"),
    ({"source": "we 5", "sources": ["we 5"], "target": "x"}, "give either source"),
    ({"sources": "we 5", "targets": ["x"]}, "sources must be a list of strings"),
    ({"source": "we 5", "target": 3}, "target must be a string"),
    ({"sources": ["we 5"] * (MAX_BATCH + 1), "targets": ["x"] * (MAX_BATCH + 1)}, f"at most {MAX_BATCH}"),
    ({"source": "we 5", "target": "apples " * 120}, "target 0 is"),
    ({"source": "", "target": "x"}, "text 0 is empty"),
    ({"source": "we 5", "target": "x", "parameters": {"return_alignment": "yes"}}, "return_alignment"),
    ({"source": "we 5", "target": "x", "parameters": {"target_language": "de"}}, "target_language"),
])
def test_bad_bodies_are_400_saying_what_is_wrong(http_server, payload, message):
    status, _, body = post_json(score_url(http_server), payload)
    assert status == 400 and message in json.loads(body)["error"], body


def test_an_unknown_model_is_404(http_server):
    url = score_url(http_server).replace("/translator/", "/nope/")
    status, _, body = post_json(url, {"source": "we 5", "target": "x"})
    assert status == 404 and "nope" in json.loads(body)["error"]
