"""Hostile inputs of the service as hypothesis strategies, and the properties each answer must keep.

Shared by the property tests (tests/service/test_properties.py) and the fuzz driver (tests/support/fuzz.py).
Strategies: raw BYTES tensors (well-formed, mutated, arbitrary) with any element count,
`inference.ModelInferRequest` messages of any shape, and `translator.v1` requests. Oracles: a
BYTES tensor parses iff an independent parser finds exactly `count` elements (and then the
elements are its elements); a decoded request is consistent with its message; a refusal is an
InvalidTensor / InvalidInput with a non-empty message that shows no internals
(tests/support/clean_messages.py). Strings the server may echo in a message (names, datatypes, parameter
strings) are drawn from an alphabet that cannot spell an internal (no ASCII capitals, no '.', '/',
'"' or 'x'), so that a finding is about the server's own words.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from protos.inference import grpc_service_pb2 as v2
from protos.translator.v1 import translator_pb2 as pb
from service.api.grpc.kserve import infer_request
from service.api.status import MAX_MESSAGE_CHARS
from service.dataplane import kserve
from service.dataplane import parameters as vocabulary
from service.dataplane.calls import kserve_translation
from service.dataplane.kserve import deserialize_bytes, serialize_bytes
from service.dataplane.parameters import Asked
from service.domain.errors import InvalidInput, InvalidTensor
from service.domain.types import DecodeOptions
from tests.support.clean_messages import internals_in

INT64 = st.integers(-(2**63), 2**63 - 1)
UINT64 = st.integers(0, 2**64 - 1)
UINT32 = st.integers(0, 2**32 - 1)
_LENGTH = struct.Struct("<I")

echoed = st.text(st.characters(codec="utf-8", exclude_characters='ABCDEFGHIJKLMNOPQRSTUVWXYZ./"x'),
                 max_size=24)
any_text = st.text(st.characters(codec="utf-8"), max_size=60)  # control characters included
short_texts = st.one_of(any_text, st.sampled_from(["", " ", "\x00", "\t\n\r", "\u200b", "the 4217 cat.",
                                                   "we 7 big.", "Anna saw 3 red apples on day 12."]))
texts = st.lists(short_texts.filter(str.strip), min_size=1, max_size=8)  # 1-8 texts worth translating
hostile_texts = st.one_of(  # long ones too: over the source limit, or over the message size limit
    short_texts,
    st.builds(str.__mul__, st.sampled_from(["7", "a ", "\u00e9", "\U0001f600"]), st.integers(0, 12_000)),
)
elements = st.lists(st.one_of(hostile_texts.map(str.encode), st.binary(max_size=40)), max_size=10)


def _one_of(*values: Any, other: st.SearchStrategy) -> st.SearchStrategy:
    """One of `values` (the first one most often), or anything `other` draws."""
    return st.one_of(st.sampled_from([values[0]] * len(values) + list(values[1:])), other)


def reference_split(raw: bytes) -> list[bytes] | None:
    """The length-prefixed elements of `raw`, parsed without the codec; None if it does not parse."""
    found, offset = [], 0
    while offset < len(raw):
        if len(raw) - offset < _LENGTH.size:
            return None
        size = int.from_bytes(raw[offset : offset + _LENGTH.size], "little")
        offset += _LENGTH.size
        if size > len(raw) - offset:
            return None
        found.append(raw[offset : offset + size])
        offset += size
    return found


@st.composite
def mutated(draw: st.DrawFn, raw: bytes) -> bytes:
    """`raw` cut, extended, overwritten or with bytes inserted (one to three times)."""
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["cut", "append", "overwrite", "insert", "huge length"]))
        at = draw(st.integers(0, len(raw)))
        junk = draw(st.binary(min_size=1, max_size=8)) if op != "huge length" else b"\xff\xff\xff\x7f"
        raw = {"cut": raw[:at], "append": raw + junk, "insert": raw[:at] + junk + raw[at:]}.get(
            op, raw[:at] + junk + raw[at + len(junk):])
    return raw


@st.composite
def byte_tensors(draw: st.DrawFn) -> tuple[bytes, int]:
    """(raw contents, declared element count): well-formed, mutated or arbitrary, counts near and far."""
    kind = draw(st.sampled_from(["well-formed", "mutated", "arbitrary"]))
    if kind == "arbitrary":
        raw = draw(st.binary(max_size=256))
        true = len(reference_split(raw) or [])
    else:
        parts = draw(elements)
        raw, true = serialize_bytes(parts), len(parts)
        if kind == "mutated":
            raw = draw(mutated(raw))
    count = draw(st.one_of(st.just(true), st.integers(true - 2, true + 2), INT64))
    return raw, count


ECHO_PREFIX = 8  # the shortest start of a quoted value taken as its (cut) echo


def check_message(message: str, echoed: Sequence[str] = ()) -> None:
    """A refusal's message: non-empty, no internals outside the client's own values it quotes (`echoed`,
    possibly cut short: a client may send a value that reads like a path)."""
    assert message.strip(), "empty error message"
    own = message
    for value in sorted(echoed, key=len, reverse=True):  # a short value must not cut a longer one's quote
        quoted = repr(value)
        least = min(len(quoted), ECHO_PREFIX)
        shown = next((quoted[:k] for k in range(len(quoted), least - 1, -1) if quoted[:k] in own), "")
        own = own.replace(shown, "") if shown else own
    assert internals_in(own) is None, f"message shows internals ({internals_in(own)!r}): {message!r}"


def check_deserialize(raw: bytes, count: int) -> list[bytes] | None:
    """deserialize_bytes splits `raw` into exactly `count` elements that re-serialize to `raw`, or refuses
    with InvalidTensor exactly when the independent parser finds no `count` elements."""
    expected = reference_split(raw)
    try:
        found = deserialize_bytes(raw, count)
    except InvalidTensor as exc:
        check_message(str(exc))
        assert expected is None or len(expected) != count, f"refused {count} well-formed elements: {exc}"
        return None
    assert expected is not None and len(expected) == count, f"accepted {len(found)} elements for {count}"
    assert found == expected and serialize_bytes(found) == raw
    return found


UNOFFERED_KEYS = ("n_best", "return_alternatives")  # one TRANSLATION per text: translator.v1 only
PARAMETER_KEYS = tuple(dict.fromkeys((*vocabulary.DECODING, *vocabulary.ALIASES, vocabulary.STREAM,
                                       vocabulary.EMPTY_FINAL, "priority", *UNOFFERED_KEYS)))
MAX_OUTPUT_TOKENS_KEYS = ("max_output_tokens", "max_tokens")  # aliases
long_digits = st.builds(lambda pad, digit, n: pad + digit * n, st.sampled_from(["", "0" * 5000, " "]),
                        st.sampled_from("0123456789"), st.integers(1, 6000))
parameter_values = st.one_of(
    st.tuples(st.just("bool_param"), st.booleans()),
    st.tuples(st.just("int64_param"), st.one_of(st.integers(-3, 12), INT64)),
    st.tuples(st.just("uint64_param"), st.one_of(st.integers(0, 12), UINT64)),
    st.tuples(st.just("double_param"), st.floats()),
    st.tuples(st.just("string_param"), st.one_of(
        st.sampled_from(["1", " 4 ", "true", "False", "-2", "1e3", "\u0663", "\u00b2", ""]), long_digits,
        echoed)),
    st.just((None, None)),  # a parameter without a value
)
parameters = st.dictionaries(_one_of(*PARAMETER_KEYS, other=echoed), parameter_values, max_size=4)


def _fill_parameters(target: Any, chosen: dict[str, tuple[str | None, Any]]) -> None:
    """Set a message's parameters map from (kind, value) pairs."""
    for key, (kind, value) in chosen.items():
        parameter = target[key]
        if kind is not None:
            setattr(parameter, kind, value)


@st.composite
def _add_input(draw: st.DrawFn, request: v2.ModelInferRequest) -> None:
    """One input tensor of any name, datatype and shape, its data raw, typed, both or missing."""
    tensor = request.inputs.add(name=draw(_one_of("TEXT", "", "text", "INPUT", other=echoed)),
                                datatype=draw(_one_of("BYTES", "INT64", "FP32", "bytes", "", other=echoed)))
    parts = draw(elements)
    tensor.shape.extend(draw(st.one_of(st.just([len(parts)]), st.lists(st.one_of(st.integers(-2, 11), INT64),
                                                                       max_size=3))))
    where = draw(st.sampled_from(["raw", "raw", "typed", "both", "none", "other typed"]))
    if where in ("raw", "both"):
        raw = serialize_bytes(parts)
        request.raw_input_contents.append(draw(st.one_of(st.just(raw), mutated(raw), st.binary(max_size=64))))
    if where in ("typed", "both"):
        tensor.contents.bytes_contents.extend(parts)
    if where == "other typed":
        tensor.contents.int64_contents.extend(draw(st.lists(INT64, min_size=1, max_size=4)))
        tensor.contents.fp32_contents.extend(draw(st.lists(st.floats(width=32), max_size=2)))
    _fill_parameters(tensor.parameters, draw(parameters))


_whole = st.one_of(st.tuples(st.sampled_from(["int64_param", "uint64_param"]), st.integers(1, 12)),
                   st.tuples(st.just("string_param"), st.integers(1, 12).map(str)))
sane_parameters = st.fixed_dictionaries({}, optional={  # valid, mostly (stream needs ModelStreamInfer)
    "max_output_tokens": _whole, "beam_size": _whole,
    vocabulary.STREAM: st.tuples(st.just("bool_param"), st.booleans())})


@st.composite
def wellformed_requests(draw: st.DrawFn) -> v2.ModelInferRequest:
    """A ModelInferRequest of the right form (1-8 UTF-8 texts, raw or typed) whose texts and
    parameters may still be refused."""
    request = v2.ModelInferRequest(model_name="translator", model_version=draw(st.sampled_from(["", "1"])),
                                   id=draw(echoed))
    encoded = [text.encode() for text in draw(texts)]
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(encoded)])
    if draw(st.booleans()):
        request.raw_input_contents.append(serialize_bytes(encoded))
    else:
        tensor.contents.bytes_contents.extend(encoded)
    if draw(st.booleans()):
        request.outputs.add(name="TRANSLATION")
    _fill_parameters(request.parameters, draw(sane_parameters))
    return request


@st.composite
def malformed_requests(draw: st.DrawFn) -> v2.ModelInferRequest:
    """A ModelInferRequest of any model, inputs, contents, requested outputs and parameters."""
    served = draw(st.sampled_from([True, True, True, False]))  # mostly the served model: reach the codec
    request = v2.ModelInferRequest(
        model_name="translator" if served else draw(_one_of("", "other", "translator", other=echoed)),
        model_version=draw(st.sampled_from(["", "1"])) if served else draw(_one_of("2", "", other=echoed)),
        id=draw(echoed))
    for _ in range(draw(st.sampled_from([1, 1, 1, 1, 1, 0, 2, 3]))):
        draw(_add_input(request))
    for name in draw(st.lists(_one_of("TRANSLATION", "", "OUT", other=echoed), max_size=2)):
        request.outputs.add(name=name)
    _fill_parameters(request.parameters, draw(parameters))
    return request


def infer_requests() -> st.SearchStrategy[v2.ModelInferRequest]:
    """Well-formed and malformed ModelInferRequests, half and half."""
    return st.one_of(wellformed_requests(), malformed_requests())


def _number(parameter: v2.InferParameter) -> int:
    """The whole number a parameter gives (int64, uint64 or a decimal string)."""
    kind = parameter.WhichOneof("parameter_choice")
    if kind == "string_param":
        return int(parameter.string_param.strip().lstrip("0") or "0")
    return int(getattr(parameter, kind))


def _flag(parameter: v2.InferParameter) -> bool:
    """The boolean a parameter gives (bool or "true" / "false")."""
    kind = parameter.WhichOneof("parameter_choice")
    return parameter.bool_param if kind == "bool_param" else parameter.string_param.strip().lower() == "true"


@dataclass(frozen=True)
class Decoded:
    """What the KServe v2 data plane reads from a translation request: its texts and parameters."""

    texts: list[str]
    asked: Asked
    request_id: str


def decode_request(request: v2.ModelInferRequest) -> Decoded:
    """A ModelInferRequest read as ModelInfer reads a translation (before the model): its TEXT tensor,
    requested outputs and parameters; InvalidTensor / InvalidInput saying what is wrong."""
    plain = infer_request(request)
    texts, asked = kserve_translation(plain)
    return Decoded(texts, asked, plain.id)


def _known(name: str) -> bool:
    """Whether a KServe v2 translation request may carry this parameter."""
    return (name in (*vocabulary.DECODING, *vocabulary.ALIASES, vocabulary.STREAM, *vocabulary.RESERVED)
            or name.startswith(vocabulary.RESERVED_PREFIX))


def check_decode(request: v2.ModelInferRequest) -> Decoded | None:
    """decode_request accepts only a well-formed TEXT tensor and known parameters, and returns what they
    hold, or refuses with InvalidTensor / InvalidInput and a clean message; nothing else."""
    try:
        decoded = decode_request(request)
    except (InvalidTensor, InvalidInput) as exc:
        check_message(str(exc))
        return None
    (tensor,) = request.inputs
    assert (tensor.name, tensor.datatype, list(tensor.shape)) == ("TEXT", "BYTES", [len(decoded.texts)])
    assert decoded.texts, "accepted an empty tensor"
    encoded = [text.encode("utf-8") for text in decoded.texts]
    fields = [d.name for d, _ in tensor.contents.ListFields()]
    if request.raw_input_contents:
        assert fields == [] and len(request.raw_input_contents) == 1
        assert reference_split(request.raw_input_contents[0]) == encoded
    else:
        assert fields == ["bytes_contents"] and list(tensor.contents.bytes_contents) == encoded
    assert all(output.name == kserve.OUTPUT for output in request.outputs)
    assert decoded.request_id == request.id
    given = request.parameters
    unknown = [name for name in given if not _known(name)]
    assert not unknown, f"accepted unknown parameters {unknown}"
    assert not any(name in given for name in UNOFFERED_KEYS), "accepted a parameter not offered"
    options = decoded.asked.options
    for key in MAX_OUTPUT_TOKENS_KEYS:
        if key in given:
            assert options.max_output_tokens == _number(given[key]) >= 1
    if not any(key in given for key in MAX_OUTPUT_TOKENS_KEYS):
        assert options.max_output_tokens is None
    assert options.beam_size == (_number(given["beam_size"]) if "beam_size" in given else None)
    assert decoded.asked.stream == (vocabulary.STREAM in given and _flag(given[vocabulary.STREAM]))
    empty_final = vocabulary.EMPTY_FINAL
    assert decoded.asked.empty_final_response == (empty_final in given and _flag(given[empty_final]))
    return decoded


def check_resolved(options: DecodeOptions, max_len: int, max_beam: int) -> None:
    """Resolved options within the limits."""
    assert 1 <= options.beam_size <= max_beam and 1 <= options.n_best <= options.beam_size
    assert options.length_penalty is None or (isinstance(options.length_penalty,
                                                         float) and math.isfinite(options.length_penalty)
                                     and options.length_penalty >= 0)  # None: the search's neutral value
    assert isinstance(options.max_output_tokens, int) and 1 <= options.max_output_tokens <= max_len - 1


translate_options = st.builds(
    pb.TranslateOptions,
    max_output_tokens=st.one_of(st.integers(0, 12), UINT32), beam_size=st.one_of(st.integers(0, 10), UINT32),
    n_best=st.one_of(st.integers(0, 10), UINT32),
    length_penalty=st.one_of(st.none(), st.floats(width=32), st.floats(-2.0, 3.0)),
    return_scores=st.booleans(), return_alignment=st.booleans(), return_tokens=st.booleans(),
)
sane_options = st.builds(  # valid, mostly
    pb.TranslateOptions, max_output_tokens=st.integers(0, 24), beam_size=st.integers(0, 3),
    n_best=st.integers(0, 2), length_penalty=st.one_of(st.none(), st.floats(0.0, 2.0)),
    return_scores=st.booleans(), return_alignment=st.booleans(), return_tokens=st.booleans(),
)
translate_requests = st.one_of(
    st.builds(pb.TranslateRequest, texts=texts, options=sane_options, request_id=any_text),
    st.builds(pb.TranslateRequest, texts=st.lists(hostile_texts, max_size=10), options=translate_options,
              request_id=any_text),
)
stream_requests = st.one_of(
    st.builds(pb.TranslateStreamRequest, text=short_texts.filter(str.strip), options=sane_options,
              request_id=any_text),
    st.builds(pb.TranslateStreamRequest, text=hostile_texts, options=translate_options, request_id=any_text),
)


def check_status(code: str, message: str, allowed: frozenset[str]) -> None:
    """A failed call's status: an allowed code, a clean message no longer than the server sends."""
    assert code in allowed, f"status {code}: {message!r}"
    check_message(message)
    assert len(message) <= MAX_MESSAGE_CHARS
