"""translator.v1 Score through the gRPC server: the in-process runner's numbers, the greedy Translate's
log_prob for its own output that ended with eos, a target as long as a translation cut at the model's
maximum length scored without eos (end_token_scored), optional fields, bad input as INVALID_ARGUMENT
naming the problem, an unknown model as NOT_FOUND, and Score calls interleaved with Translate calls in
continuous batching all answered."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.domain.types import ScoreOptions
from service.server import BackgroundServer
from tests.support.scoring import limit_target
from tests.support.server import MAX_BATCH, server_config


@pytest.fixture(scope="module")
def stub(channel) -> pb_grpc.TranslatorStub:
    """A Translator stub on the module's continuous-batching server of the tiny bundle."""
    return pb_grpc.TranslatorStub(channel)


def greedy(stub, texts: list[str]) -> list[pb.Hypothesis]:
    """The best greedy hypothesis of each text, with its scores, through Translate."""
    options = pb.TranslateOptions(beam_size=1, return_scores=True, max_output_tokens=40)
    return [r.hypotheses[0] for r in stub.Translate(pb.TranslateRequest(texts=texts, options=options),
                                                    timeout=30).results]


def test_score_is_the_runners_and_a_greedy_outputs_score_is_its_log_prob(stub, runner, texts):
    ended = [(t, h) for t, h in zip(texts, greedy(stub, texts), strict=True)
             if h.finish_reason == pb.FINISH_REASON_EOS]  # an eos of its own: scored as generated
    sources, hyps = [t for t, _ in ended], [h for _, h in ended]
    assert len(hyps) >= 2
    targets = [h.text for h in hyps]
    response = stub.Score(pb.ScoreRequest(sources=sources, targets=targets, request_id="s-1"), timeout=30)
    assert response.request_id == "s-1" and len(response.results) == len(sources)
    want = runner.score(sources, targets)
    for r, w, h in zip(response.results, want, hyps, strict=True):
        assert list(r.token_ids) == w.target_ids == [*h.token_ids, runner.special.eos]
        assert r.end_token_scored and w.end_token_scored
        np.testing.assert_allclose(r.log_probs, w.log_probs, atol=1e-5)
        assert r.log_prob == pytest.approx(h.log_prob, abs=1e-5)
        assert r.score == pytest.approx(r.log_prob / len(r.token_ids), abs=1e-6)
        assert not r.alignment and not r.tokens and not r.source_token_ids
        assert r.timings.total_ms >= r.timings.compute_ms > 0


def test_a_target_as_long_as_a_cut_translation_is_scored_without_the_end_token(stub, runner, texts):
    limit = runner.max_len - 1  # the most tokens a translation generates (no forced language here)
    options = pb.TranslateOptions(beam_size=1, return_scores=True, min_output_tokens=limit)
    request = pb.TranslateRequest(texts=texts[:1], options=options)
    cut = stub.Translate(request, timeout=60).results[0].hypotheses[0]
    assert cut.finish_reason == pb.FINISH_REASON_LENGTH and len(cut.token_ids) == limit, (
        "min_output_tokens at the limit should cut the translation there")
    ended = [(t, h) for t, h in zip(texts, greedy(stub, texts), strict=True)
             if h.finish_reason == pb.FINISH_REASON_EOS]
    assert ended, "no greedy translation of the test texts ended with eos"
    as_long = limit_target(runner)  # as many tokens as the cut one (whose text may not tokenize back)
    sources, targets = [texts[0], ended[0][0]], [as_long, ended[0][1].text]
    response = stub.Score(pb.ScoreRequest(sources=sources, targets=targets), timeout=30)
    want = runner.score(sources, targets)
    flags = [r.end_token_scored for r in response.results]
    assert flags == [w.end_token_scored for w in want] == [False, True]  # as the domain says
    got, finished = response.results
    assert list(got.token_ids) == runner.encode_target([as_long])[0] and len(got.log_probs) == limit
    assert got.log_prob == pytest.approx(want[0].log_prob, rel=1e-5, abs=1e-4)  # the runner's, no eos
    assert got.score == pytest.approx(got.log_prob / limit, rel=1e-5)
    assert list(finished.token_ids) == [*ended[0][1].token_ids, runner.special.eos]


def test_alignment_and_tokens_when_asked(stub, runner, texts):
    options = pb.ScoreOptions(return_alignment=True, return_tokens=True)
    request = pb.ScoreRequest(sources=texts[:1], targets=[texts[1]], options=options)
    (r,) = stub.Score(request, timeout=30).results
    (w,) = runner.score(texts[:1], [texts[1]], ScoreOptions(return_alignment=True))
    assert list(r.source_token_ids) == w.source_ids and len(r.source_tokens) == len(w.source_ids)
    assert list(r.tokens) == [runner.tokenizer.token(i) for i in w.target_ids]
    assert len(r.alignment) == len(w.target_ids)
    for row, want in zip(r.alignment, w.alignment, strict=True):
        np.testing.assert_allclose(row.weights, want, atol=1e-5)


@pytest.mark.parametrize(("sources", "targets", "match"), [
    ([], [], "no \\(source, target\\) pair"),
    (["we 5"], [], "1 source\\(s\\) but 0 target\\(s\\)"),
    (["we 5", "we 6"], ["x"], "2 source\\(s\\) but 1 target\\(s\\)"),
    (["we 5"] * (MAX_BATCH + 1), ["x"] * (MAX_BATCH + 1), f"at most {MAX_BATCH}"),
    ([""], ["x"], "text 0 is empty"),
    (["apples " * 120], ["x"], "tokens long"),
    (["we 5"], ["apples " * 120], "target 0 is .* tokens long"),
])
def test_bad_pairs_are_invalid_argument_saying_what_is_wrong(stub, sources, targets, match):
    with pytest.raises(grpc.RpcError) as info:
        stub.Score(pb.ScoreRequest(sources=sources, targets=targets), timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert re.search(match, info.value.details()), info.value.details()


def test_languages_for_a_model_of_one_pair_and_an_unknown_model(stub):
    options = pb.ScoreOptions(target_language="de")
    with pytest.raises(grpc.RpcError) as info:
        stub.Score(pb.ScoreRequest(sources=["we 5"], targets=["x"], options=options), timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "target_language" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        stub.Score(pb.ScoreRequest(sources=["we 5"], targets=["x"], model="nope"), timeout=30)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND and "nope" in info.value.details()


def test_scores_interleaved_with_translations_in_continuous_batching_all_complete(tiny_bundle, runner, texts):
    targets = [h[0].text for h in runner.translate(texts)]
    want = runner.score(texts, targets)
    config = server_config(tiny_bundle, batching="continuous", max_batch_size=3)
    with BackgroundServer(config, runner) as srv, \
            grpc.insecure_channel(srv.address) as ch:
        stub = pb_grpc.TranslatorStub(ch)

        def call(i: int):
            """A Translate call for even i, a Score call for odd i."""
            k = i % len(texts)
            if i % 2 == 0:
                return stub.Translate(pb.TranslateRequest(texts=[texts[k]]), timeout=60).results[0]
            request = pb.ScoreRequest(sources=[texts[k]], targets=[targets[k]])
            return stub.Score(request, timeout=60).results[0]

        with ThreadPoolExecutor(12) as pool:
            got = list(pool.map(call, range(4 * len(texts))))
    for i, r in enumerate(got):
        k = i % len(texts)
        if i % 2 == 0:
            assert r.hypotheses[0].text == targets[k]
        else:
            np.testing.assert_allclose(r.log_probs, want[k].log_probs, atol=1e-5)
