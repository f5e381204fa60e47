"""Controlled decoding on the wire: translator.v1 TranslateOptions -> DecodeOptions field by field (unset
against an explicit 0), and a server of the tiny bundle over translator.v1 gRPC, KServe v2 gRPC and HTTP
generate: every bad value is INVALID_ARGUMENT / HTTP 400 naming the option, and the options take effect,
shown by checks that hold whatever the model (a target prefix starts every hypothesis, a suppressed token
never appears, a minimum length is reached, a seed repeats its sample, alternatives differ at their first
free token)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from tritonclient.utils import InferenceServerException

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.api.grpc.translator import decode_options
from service.domain.errors import InvalidInput
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.http import parse_sse, post_json
from tests.support.kserve import text_input, triton_client
from tests.support.server import TEXTS, server_config

MAX_NEW = 16
TEXT = TEXTS[1]


# ----- conversion: proto -> DecodeOptions -------------------------------------------------------------
def test_unset_options_are_the_models_defaults() -> None:
    """An empty TranslateOptions is DecodeOptions(): every option None (the model's default) or neutral."""
    assert decode_options(pb.TranslateOptions()) == DecodeOptions()


def test_every_field_converts() -> None:
    """Each TranslateOptions field lands in its DecodeOptions field."""
    options = pb.TranslateOptions(
        max_output_tokens=20, beam_size=1, n_best=3, length_penalty=0.5, return_alignment=True,
        source_language="en", target_language="de", target_prefix="the cat", return_alternatives=True,
        min_output_tokens=4, max_length_ratio=1.5, repetition_penalty=1.25, no_repeat_ngram_size=3,
        suppress_sequences=["red", "big"], suppress_sequence_ids=[pb.TranslateOptions.TokenIds(ids=[5, 6])],
        disable_unk=True, temperature=0.75, top_k=7, top_p=0.5, seed=2**63 - 1,
    )
    assert decode_options(options) == DecodeOptions(
        beam_size=1, n_best=3, length_penalty=0.5, max_output_tokens=20, return_alignment=True,
        source_language="en",
        target_language="de", target_prefix="the cat", return_alternatives=True, min_output_tokens=4,
        max_length_ratio=1.5, repetition_penalty=1.25, no_repeat_ngram_size=3,
        suppress_sequences=("red", "big", [5, 6]), disable_unk=True, temperature=0.75, top_k=7, top_p=0.5,
        seed=2**63 - 1)
    assert decode_options(pb.TranslateOptions(target_prefix_ids=[4, 9])).target_prefix == [4, 9]


# proto fields (DecodeOptions fields of the same name) whose unset differs from an explicit 0
OPTIONAL = ("length_penalty", "min_output_tokens", "repetition_penalty", "no_repeat_ngram_size",
            "temperature", "top_p", "seed")


@pytest.mark.parametrize("field", list(OPTIONAL))
def test_explicit_zero_differs_from_unset(field: str) -> None:
    """An optional field set to 0 reaches DecodeOptions as 0 (top_p 0 then fails validation, by name);
    unset, the model's default (None; top_p's neutral 1)."""
    unset = getattr(decode_options(pb.TranslateOptions()), field)
    zero = getattr(decode_options(pb.TranslateOptions(**{field: 0})), field)
    assert zero == 0 and not isinstance(zero, bool)
    assert unset == (1.0 if field == "top_p" else None)


def test_zero_of_plain_fields_is_the_default() -> None:
    """beam_size 0 is the model's default (None), n_best 0 is 1, max_output_tokens 0 the model's limit."""
    options = decode_options(pb.TranslateOptions(beam_size=0, n_best=0, max_output_tokens=0))
    assert (options.beam_size, options.n_best, options.max_output_tokens) == (None, 1, None)


def test_both_prefixes_are_refused() -> None:
    """A prefix given as text and as ids is refused by the conversion, naming both fields."""
    with pytest.raises(InvalidInput, match="target_prefix.*target_prefix_ids"):
        decode_options(pb.TranslateOptions(target_prefix="a", target_prefix_ids=[3]))


# ----- a server of the tiny bundle ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A server of the tiny bundle with both ports open."""
    with BackgroundServer(server_config(tiny_bundle, http_port=0), runner) as srv:
        yield srv


@pytest.fixture(scope="module")
def stub(served: BackgroundServer) -> Iterator[pb_grpc.TranslatorStub]:
    with grpc.insecure_channel(served.address) as channel:
        yield pb_grpc.TranslatorStub(channel)


def translate(stub: pb_grpc.TranslatorStub, text: str = TEXT, **options: Any) -> list[pb.Hypothesis]:
    """The hypotheses of one text over translator.v1 Translate."""
    options = {"max_output_tokens": MAX_NEW, "return_tokens": True} | options
    request = pb.TranslateRequest(texts=[text], options=pb.TranslateOptions(**options))
    return list(stub.Translate(request, timeout=60).results[0].hypotheses)


def v1_error(stub: pb_grpc.TranslatorStub, **options: Any) -> tuple[grpc.StatusCode, str]:
    """The status and message of a Translate call that must fail."""
    with pytest.raises(grpc.RpcError) as info:
        translate(stub, **options)
    return info.value.code(), info.value.details()


def v2_infer(served: BackgroundServer, text: str = TEXT, **parameters: Any) -> str:
    """The translation of one text over KServe v2 ModelInfer (tritonclient.grpc)."""
    with triton_client(served.address) as client:
        result = client.infer("translator", [text_input([text])],
                              parameters={"max_tokens": MAX_NEW} | parameters)
    return result.as_numpy("TRANSLATION")[0].decode("utf-8")


def v2_error(served: BackgroundServer, **parameters: Any) -> str:
    """The message of a ModelInfer call that must fail with INVALID_ARGUMENT."""
    with pytest.raises(InferenceServerException) as info:
        v2_infer(served, **parameters)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT", info.value
    return info.value.message()


def generate(served: BackgroundServer, endpoint: str = "generate", text: str = TEXT,
             **parameters: Any) -> tuple[int, Any]:
    """Status and JSON answer (generate) or SSE events (generate_stream) of Triton's generate extension."""
    url = f"http://{served.http_address}/v2/models/translator/{endpoint}"
    payload = {"text_input": text, "parameters": {"max_tokens": MAX_NEW} | parameters}
    status, kind, body = post_json(url, payload)
    if kind == "text/event-stream":
        return status, parse_sse(body)
    return status, json.loads(body)


def starts_with(ids: list[int], prefix: list[int]) -> bool:
    return list(ids[: len(prefix)]) == list(prefix)


def contains(ids: list[int], sequence: list[int]) -> bool:
    """Whether `sequence` appears in `ids` as contiguous tokens."""
    n = len(sequence)
    return any(list(ids[i : i + n]) == list(sequence) for i in range(len(ids) - n + 1))


# ----- bad values: INVALID_ARGUMENT / 400 naming the option, on every protocol ----------------------------
def bad_cases(runner: Runner) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    """(translator.v1 options, KServe / generate parameters, a word the message must hold)."""
    vocab = runner.vocab_size
    return [
        ({"top_p": 0.0}, {"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, {"top_p": 1.5}, "top_p"),
        ({"temperature": -0.5}, {"temperature": -0.5}, "temperature"),
        ({"repetition_penalty": 0.0}, {"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"no_repeat_ngram_size": 99}, {"no_repeat_ngram_size": 99}, "no_repeat_ngram_size"),
        ({"max_length_ratio": -1.0}, {"max_length_ratio": -1.0}, "max_length_ratio"),
        ({"target_prefix_ids": [5] * MAX_NEW}, {"target_prefix_ids": json.dumps([5] * MAX_NEW)},
         "target_prefix"),
        ({"target_prefix_ids": [vocab]}, {"target_prefix_ids": json.dumps([vocab])}, "target_prefix"),
        ({"suppress_sequence_ids": [pb.TranslateOptions.TokenIds()]}, {"suppress_sequences": "[[]]"},
         "suppress_sequences[0] is empty"),
        ({"suppress_sequences": [" "]}, {"suppress_sequences": '[" "]'}, "suppress_sequences[0] is empty"),
        ({"suppress_sequence_ids": [pb.TranslateOptions.TokenIds(ids=[1, -1])]},
         {"suppress_sequences": "[[1, -1]]"}, "suppress_sequences[0]"),
        ({"suppress_sequence_ids": [pb.TranslateOptions.TokenIds(ids=[vocab + 3])]},
         {"suppress_sequences": json.dumps([[vocab + 3]])}, "suppress_sequences[0]"),
        ({"beam_size": 2, "temperature": 0.7}, {"beam_size": 2, "temperature": 0.7}, "sampling"),
        ({"beam_size": 2, "top_k": 5}, {"beam_size": 2, "top_k": 5}, "sampling"),
        ({"beam_size": 3, "return_alternatives": True, "n_best": 2}, {}, "return_alternatives"),
        ({"return_alternatives": True, "n_best": 99}, {}, "n_best"),
        ({"target_prefix": "a", "target_prefix_ids": [3]}, {"target_prefix": "a", "target_prefix_ids": "[3]"},
         "target_prefix_ids"),
    ]


def test_bad_values_are_invalid_argument_naming_the_option(served, stub, runner):
    """Each bad value: INVALID_ARGUMENT over translator.v1 and KServe v2 gRPC, 400 over HTTP generate and
    generate_stream, every message naming the option."""
    for options, parameters, word in bad_cases(runner):
        code, message = v1_error(stub, **options)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and word in message, (options, code, message)
        if not parameters:
            continue  # alternatives: translator.v1 only
        message = v2_error(served, **parameters)
        assert word in message, (parameters, message)
        http = {k: json.loads(v) if k in ("target_prefix_ids", "suppress_sequences") else v
                for k, v in parameters.items()}  # JSON arrays as arrays over HTTP
        for endpoint in ("generate", "generate_stream"):
            status, answer = generate(served, endpoint, **http)
            assert status == 400 and word in answer["error"], (endpoint, http, answer)


def test_wrong_types_are_refused_naming_the_parameter(served):
    """A parameter of the wrong type: INVALID_ARGUMENT over gRPC, 400 over HTTP, naming it; an empty
    array and an array where none is taken are refused as such."""
    assert "parameter temperature" in v2_error(served, temperature="hot")
    assert "parameter suppress_sequences must be a JSON array" in v2_error(served, suppress_sequences="red")
    for parameters, phrase in (({"top_k": 1.5}, "parameter top_k"), ({"seed": -1}, "parameter seed"),
                               ({"suppress_sequences": []}, "suppress_sequences is an empty array"),
                               ({"temperature": [1]}, "parameter temperature must be a number"),
                               ({"disable_unk": "maybe"}, "parameter disable_unk")):
        status, answer = generate(served, **parameters)
        assert status == 400 and phrase in answer["error"], (parameters, answer)


# ----- the options take effect ------------------------------------------------------------------------
def test_target_prefix_starts_every_hypothesis(served, stub, runner):
    """A prefix as text (the target tokenizer's ids) or as ids starts every hypothesis, greedy and beam;
    KServe and generate answer translator.v1's text."""
    prefix = runner.encode_target(["the cat"])[0]
    assert prefix
    for options in ({}, {"beam_size": 3, "n_best": 3}):
        for given in ({"target_prefix": "the cat"}, {"target_prefix_ids": prefix}):
            hyps = translate(stub, **options, **given)
            assert hyps and all(starts_with(h.token_ids, prefix) for h in hyps), (options, given, hyps)
    want = translate(stub, target_prefix="the cat")[0].text
    assert v2_infer(served, target_prefix="the cat") == want
    assert v2_infer(served, target_prefix_ids=json.dumps(prefix)) == want
    assert generate(served, target_prefix_ids=prefix) == (200, _answer(want))
    status, events = generate(served, "generate_stream", target_prefix="the cat")
    assert status == 200 and "".join(e["text_output"] for e in events) == want


def _answer(text: str) -> dict[str, str]:
    return {"model_name": "translator", "model_version": "1", "text_output": text}


def test_suppressed_tokens_never_appear(served, stub, runner):
    """The greedy output's first token, suppressed as ids, appears nowhere (greedy and beam); a word as text:
    its token sequence appears nowhere; KServe and generate answer translator.v1's text."""
    plain = translate(stub)[0]
    first = plain.token_ids[0]
    ids = [pb.TranslateOptions.TokenIds(ids=[first])]
    for options in ({}, {"beam_size": 3, "n_best": 3}):
        hyps = translate(stub, suppress_sequence_ids=ids, **options)
        assert all(first not in h.token_ids for h in hyps), (first, hyps)
    word = runner.decode_tokens([first]).strip() or "the"
    sequence = runner.encode_target([word])[0]
    hyps = translate(stub, suppress_sequences=[word], beam_size=2, n_best=2)
    assert all(not contains(h.token_ids, sequence) for h in hyps), (word, sequence, hyps)
    want = translate(stub, suppress_sequence_ids=ids)[0].text
    assert want != plain.text
    assert v2_infer(served, suppress_sequences=json.dumps([[first]])) == want
    assert generate(served, suppress_sequences=[[first]]) == (200, _answer(want))


def test_min_length_is_reached(served, stub):
    """min_output_tokens beyond the greedy length: at least that many tokens (eos excluded), greedy and
    beam."""
    plain = translate(stub, max_output_tokens=40)[0]
    least = min(len(plain.token_ids) + 3, 30)
    for options in ({}, {"beam_size": 2}):
        hyps = translate(stub, max_output_tokens=40, min_output_tokens=least, **options)
        assert all(len(h.token_ids) >= least for h in hyps), (least, hyps)
    text = v2_infer(served, max_tokens=40, min_tokens=least)
    assert text == translate(stub, max_output_tokens=40, min_output_tokens=least)[0].text


def test_no_repeated_ngrams_and_max_length_ratio(served, stub, runner):
    """no_repeat_ngram_size 1: no token twice; max_length_ratio: at most ceil(ratio * source tokens)."""
    for text in TEXTS:
        hyps = translate(stub, text, max_output_tokens=40, no_repeat_ngram_size=1, beam_size=2, n_best=2)
        assert all(len(set(h.token_ids)) == len(h.token_ids) for h in hyps), hyps
    request = pb.TranslateRequest(texts=[TEXTS[3]], options=pb.TranslateOptions(
        max_output_tokens=40, max_length_ratio=0.5, return_tokens=True))
    result = stub.Translate(request, timeout=60).results[0]
    cap = max(math.ceil(0.5 * len(result.source_token_ids)), 1)
    assert 0 < len(result.hypotheses[0].token_ids) <= cap, (cap, result)


def test_disable_unk_and_repetition_penalty_are_accepted(served, stub, runner):
    """disable_unk: the unknown token never comes; a repetition penalty decodes on every protocol alike."""
    unk = runner.special.unk
    for text in TEXTS:
        assert all(unk not in h.token_ids for h in translate(stub, text, disable_unk=True, beam_size=2))
    want = translate(stub, repetition_penalty=1.5)[0].text
    assert v2_infer(served, repetition_penalty=1.5) == want
    assert generate(served, repetition_penalty=1.5) == (200, _answer(want))


def test_sampling_with_a_seed_repeats(served, stub):
    """temperature with a seed: the same output twice, on every protocol (generate_stream's and
    TranslateStream's pieces join into it); top_k 1 and temperature 0 are greedy; a very high temperature
    draws other tokens."""
    greedy = translate(stub)[0]
    sampled = translate(stub, temperature=1.5, seed=7)[0]
    assert translate(stub, temperature=1.5, seed=7)[0].token_ids == sampled.token_ids
    assert translate(stub, top_k=1, seed=3)[0].token_ids == greedy.token_ids
    hot = {tuple(translate(stub, temperature=100.0, seed=seed)[0].token_ids) for seed in range(4)}
    assert len(hot - {tuple(greedy.token_ids)}) > 0, hot  # near-uniform draws: not argmax every time
    assert translate(stub, temperature=0.0)[0].token_ids == greedy.token_ids
    parameters = {"temperature": 1.5, "seed": 7}
    assert v2_infer(served, **parameters) == v2_infer(served, **parameters) == sampled.text
    assert generate(served, **parameters) == (200, _answer(sampled.text))
    status, events = generate(served, "generate_stream", **parameters)
    assert status == 200 and "".join(e["text_output"] for e in events) == sampled.text
    pieces = _stream_pieces(stub, temperature=1.5, seed=7)
    assert "".join(pieces) == sampled.text


def _stream_pieces(stub: pb_grpc.TranslatorStub, **options: Any) -> list[str]:
    """The piece texts of a TranslateStream call (the final result aside); its final result's text last."""
    request = pb.TranslateStreamRequest(text=TEXT, options=pb.TranslateOptions(max_output_tokens=MAX_NEW,
                                                                                **options))
    messages = list(stub.TranslateStream(request, timeout=60))
    assert messages[-1].HasField("result")
    return [m.piece.text for m in messages[:-1]]


def test_alternatives_differ_at_the_first_free_token(stub, runner):
    """return_alternatives: n_best hypotheses, each holding the prefix, whose first token after it differs
    pairwise; the first alternative is the greedy output."""
    for prefix in ("", "the"):
        ids = runner.encode_target([prefix])[0] if prefix else []
        hyps = translate(stub, return_alternatives=True, n_best=3, target_prefix=prefix)
        assert len(hyps) == 3 and all(starts_with(h.token_ids, ids) for h in hyps), hyps
        firsts = [h.token_ids[len(ids)] if len(h.token_ids) > len(ids) else None for h in hyps]
        assert len(set(firsts)) == 3, (prefix, firsts, hyps)
        assert hyps[0].token_ids == translate(stub, target_prefix=prefix)[0].token_ids


def test_model_info_reports_the_new_defaults(stub):
    """GetModelInfo's defaults: the resolved values of the new options (neutral for the tiny bundle)."""
    defaults = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=30).defaults
    assert defaults.beam_size == 1 and defaults.n_best == 1
    assert defaults.HasField("min_output_tokens") and defaults.min_output_tokens == 0
    assert defaults.HasField("repetition_penalty") and defaults.repetition_penalty == 1.0
    assert defaults.HasField("no_repeat_ngram_size") and defaults.no_repeat_ngram_size == 0
    assert defaults.HasField("top_p") and defaults.top_p == 1.0 and defaults.top_k == 0
    assert not defaults.HasField("temperature") and not defaults.HasField("seed")

