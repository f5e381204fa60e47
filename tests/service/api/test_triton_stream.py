"""ModelStreamInfer through Triton's own `tritonclient.grpc` against a real server on 127.0.0.1:
streaming with the `stream` parameter (pieces, then a final response), `triton_final_response`
on every response, errors inside the stream, several requests on one stream, v2 parameters."""

from __future__ import annotations

import queue
from collections import defaultdict

import pytest
import tritonclient.grpc as triton

from service.domain.types import DecodeOptions
from tests.support.decoding import best_texts, reference_stream
from tests.support.kserve import text_input
from tests.support.server import TEXTS

TIMEOUT_S = 60.0


def send(triton_client: triton.InferenceServerClient, texts: list[str], request_id: str, **options) -> None:
    """Send one request on the client's stream; `options` are its parameters (and stream flags)."""
    empty_final = options.pop("enable_empty_final_response", False)
    triton_client.async_stream_infer("translator", [text_input(texts)], request_id=request_id,
                                     parameters=options, enable_empty_final_response=empty_final)


class Stream:
    """The responses of a tritonclient stream, in arrival order: (InferResult | None, error | None)."""

    def __init__(self, triton_client: triton.InferenceServerClient) -> None:
        self.items: queue.Queue = queue.Queue()
        triton_client.start_stream(callback=lambda result, error: self.items.put((result, error)))

    def take(self, count: int) -> list[tuple]:
        """The next `count` responses (bounded wait)."""
        return [self.items.get(timeout=TIMEOUT_S) for _ in range(count)]

    def until_final(self, finals: int) -> list[tuple]:
        """Responses until `finals` final responses (or errors) arrived (bounded)."""
        got: list[tuple] = []
        while finals:
            result, error = self.items.get(timeout=TIMEOUT_S)
            got.append((result, error))
            finals -= error is not None or is_final(result)
        return got


def is_final(result: triton.InferResult) -> bool:
    """The triton_final_response flag of a response (it must be present)."""
    parameters = result.get_response().parameters
    assert "triton_final_response" in parameters
    return parameters["triton_final_response"].bool_param


def texts_of(result: triton.InferResult) -> list[str] | None:
    """The TRANSLATION elements of a response as strings (None when it has no outputs)."""
    array = result.as_numpy("TRANSLATION")
    return None if array is None else [b.decode() for b in array.tolist()]


def test_stream_true_sends_pieces_then_the_full_translation(triton_client, runner):
    """stream=true: one response per piece (final=false), then the complete translation (final=true)."""
    text = TEXTS[3]
    want_pieces, want_text = reference_stream(runner, text)
    stream = Stream(triton_client)
    send(triton_client, [text], "s-1", stream=True)
    got = stream.until_final(1)
    assert all(error is None for _, error in got)
    results = [result for result, _ in got]
    assert [r.get_response().id for r in results] == ["s-1"] * len(results)
    assert [is_final(r) for r in results] == [False] * len(want_pieces) + [True]
    assert [texts_of(r) for r in results[:-1]] == [[piece] for piece in want_pieces]
    assert texts_of(results[-1]) == [want_text] == ["".join(want_pieces)]
    assert len(want_pieces) > 3  # the test text really streams several pieces


def test_empty_final_response_and_max_tokens(triton_client, runner):
    """enable_empty_final_response: the final response has no outputs; max_tokens bounds the pieces."""
    text = TEXTS[1]
    want_pieces, want_text = reference_stream(runner, text, max_new_tokens=4)
    stream = Stream(triton_client)
    send(triton_client, [text], "e-1", stream="true", max_tokens=4, enable_empty_final_response=True)
    got = stream.until_final(1)
    results = [result for result, error in got if error is None]
    assert len(results) == len(got) == len(want_pieces) + 1 and len(want_pieces) <= 4
    assert [texts_of(r) for r in results[:-1]] == [[piece] for piece in want_pieces]
    assert is_final(results[-1]) and texts_of(results[-1]) is None
    assert "".join(want_pieces) == want_text


def test_without_stream_one_final_response_per_request(triton_client, runner):
    """No stream parameter: one response per request, flagged final, as runner.translate decodes."""
    stream = Stream(triton_client)
    send(triton_client, TEXTS[:2], "n-1")
    send(triton_client, TEXTS[2:3], "n-2", stream=False, beam_size=2)
    got = {result.get_response().id: result for result, error in stream.take(2)}
    assert all(is_final(r) for r in got.values())
    assert texts_of(got["n-1"]) == best_texts(runner, TEXTS[:2])
    assert texts_of(got["n-2"]) == best_texts(runner, TEXTS[2:3], DecodeOptions(beam_size=2))
    assert stream.items.empty()


def test_many_requests_on_one_stream_each_get_their_answers(triton_client, runner):
    """Streamed, plain, beam and failing requests on one stream: answers grouped by id, errors in-stream."""
    stream = Stream(triton_client)
    send(triton_client, [TEXTS[0]], "a", stream=True)
    send(triton_client, [" "], "b", stream=True)
    send(triton_client, [TEXTS[2]], "c", stream=True, beam_size=3)
    send(triton_client, TEXTS[:2], "d", stream=True)
    send(triton_client, [TEXTS[1]], "e", beam_size=99)
    send(triton_client, [TEXTS[1]], "f", stream="maybe")
    send(triton_client, [TEXTS[3]], "g", stream=True)
    got = stream.until_final(7)
    by_id: dict[str, list] = defaultdict(list)
    errors = []
    for result, error in got:
        if error is None:
            by_id[result.get_response().id].append(result)
        else:
            errors.append(str(error))
    for request_id, text in (("a", TEXTS[0]), ("g", TEXTS[3])):
        pieces, full = reference_stream(runner, text)
        assert [texts_of(r) for r in by_id[request_id]] == [[p] for p in pieces] + [[full]]
        assert [is_final(r) for r in by_id[request_id]] == [False] * len(pieces) + [True]
    beam = best_texts(runner, [TEXTS[2]], DecodeOptions(beam_size=3))
    assert [texts_of(r) for r in by_id["c"]] == [beam]  # a beam's best is known at the end: no pieces
    assert is_final(by_id["c"][0])
    assert sorted(by_id) == ["a", "c", "g"]
    assert sorted(errors) == [
        "[request id: b] text 0 is empty",
        "[request id: d] parameter stream streams one text per request (input TEXT shape [1]), got 2",
        f"[request id: e] beam_size must be between 1 and {runner.max_beam}, got 99",
        '[request id: f] parameter stream must be a boolean (or the string "true" / "false"), got \'maybe\'',
    ]


def test_unary_infer_rejects_stream_and_honours_parameters(triton_client, runner):
    """ModelInfer refuses stream=true (INVALID_ARGUMENT); max_tokens and beam_size decode as natively."""
    with pytest.raises(triton.InferenceServerException, match="needs the ModelStreamInfer RPC") as err:
        triton_client.infer("translator", [text_input([TEXTS[0]])], parameters={"stream": True})
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    parameters = {"max_output_tokens": 5, "beam_size": 2}
    result = triton_client.infer("translator", [text_input(TEXTS[:3])], parameters=parameters)
    assert texts_of(result) == best_texts(runner, TEXTS[:3], DecodeOptions(beam_size=2, max_output_tokens=5))
    assert "triton_final_response" not in result.get_response().parameters
    bad = [({"max_tokens": runner.max_len}, f"max_output_tokens must be between 1 and {runner.max_len - 1}"),
           ({"beam_size": 0}, "must be >= 1"),
           ({"beam_size": runner.max_beam + 1}, f"beam_size must be between 1 and {runner.max_beam}"),
           ({"max_tokens": 3, "max_output_tokens": 3}, "not both")]
    for parameters, match in bad:
        with pytest.raises(triton.InferenceServerException, match=match) as err:
            triton_client.infer("translator", [text_input([TEXTS[0]])], parameters=parameters)
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT"

