"""KServe v2 tensor codec of the translation model: TEXT in, TRANSLATION out, both 1-D BYTES.

Works on `inference.ModelInferRequest` / `ModelInferResponse` messages of any generated module
(ours or tritonclient's): only field names are used. A BYTES tensor in raw form is the
concatenation, for every element, of a 4-byte little-endian length and that many bytes; in typed
form it is `contents.bytes_contents`, one entry per element without prefixes. Every rejection is
an `InvalidTensor` whose message tells the client what to change.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from service.domain.errors import InvalidTensor

INPUT_NAME = "TEXT"
OUTPUT_NAME = "TRANSLATION"
BYTES_DATATYPE = "BYTES"
MAX_OUTPUT_TOKENS_KEYS = ("max_output_tokens", "max_tokens")
MIN_OUTPUT_TOKENS_KEYS = ("min_output_tokens", "min_tokens")
BEAM_SIZE_KEY = "beam_size"
LANGUAGE_KEYS = ("source_language", "target_language")  # string parameters: language codes
# Controlled decoding (service/domain/options.py, docs/api.md): parameter name -> its kind.
COUNT_KEYS = ("no_repeat_ngram_size", "top_k")  # integers >= 0
SEED_KEY = "seed"  # an integer >= 0
REAL_KEYS = ("length_penalty", "max_length_ratio", "repetition_penalty", "temperature", "top_p")  # numbers
FLAG_KEYS = ("disable_unk",)  # booleans
TARGET_PREFIX_KEY = "target_prefix"  # text
TARGET_PREFIX_IDS_KEY = "target_prefix_ids"  # a JSON array of token ids
SUPPRESS_KEY = "suppress_sequences"  # a JSON array of texts and token-id arrays
LIST_KEYS = (TARGET_PREFIX_IDS_KEY, SUPPRESS_KEY)  # JSON arrays: a JSON string in gRPC, an array in HTTP
UNOFFERED_KEYS = ("n_best", "return_alternatives")  # one TRANSLATION per text: translator.v1 only
STREAM_KEY = "stream"  # request parameter: one response per generated piece (ModelStreamInfer only)
EMPTY_FINAL_KEY = "triton_enable_empty_final_response"  # set by tritonclient's enable_empty_final_response
FINAL_RESPONSE_KEY = "triton_final_response"  # response parameter of every streamed response
_LENGTH = struct.Struct("<I")
SHOWN_CHARS = 80  # longest echo of a client-supplied value in an error message
MAX_DIGITS = 20  # longest decimal string parameter (uint64's maximum), leading zeros aside


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """repr() of a client-supplied value for an error message, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class InferOptions:
    """Decoding options read from request parameters; None = server default."""

    max_output_tokens: int | None = None
    beam_size: int | None = None
    stream: bool = False
    empty_final_response: bool = False
    source_language: str | None = None
    target_language: str | None = None
    min_output_tokens: int | None = None
    length_penalty: float | None = None
    max_length_ratio: float | None = None
    repetition_penalty: float | None = None
    no_repeat_ngram_size: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    disable_unk: bool = False
    target_prefix: str | tuple[int, ...] | None = None
    suppress_sequences: tuple[str | tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class DecodedRequest:
    """What the translation servicer needs from one ModelInferRequest."""

    texts: list[str]
    options: InferOptions
    request_id: str


def serialize_bytes(elements: Iterable[bytes]) -> bytes:
    """Raw BYTES tensor contents: each element as a 4-byte little-endian length + its bytes."""
    parts: list[bytes] = []
    for element in elements:
        parts.append(_LENGTH.pack(len(element)))
        parts.append(element)
    return b"".join(parts)


def _count_whole_elements(raw: memoryview) -> int | None:
    """Number of complete length-prefixed elements filling `raw` exactly, None if it does not parse."""
    offset, count = 0, 0
    while offset < len(raw):
        if len(raw) - offset < _LENGTH.size:
            return None
        offset += _LENGTH.size + _LENGTH.unpack_from(raw, offset)[0]
        count += 1
    return count if offset == len(raw) else None


def deserialize_bytes(raw: bytes, count: int, field: str = "raw_input_contents") -> list[bytes]:
    """Split raw BYTES tensor contents into exactly `count` elements, strictly."""
    if count < 0:
        raise InvalidTensor(f"element count must be >= 0, got {count}")
    view = memoryview(raw)
    elements: list[bytes] = []
    offset = 0
    for index in range(count):
        remaining = len(view) - offset
        if remaining == 0:
            raise InvalidTensor(
                f"shape declares {count} elements but {field} holds only {index}"
            )
        if remaining < _LENGTH.size:
            raise InvalidTensor(
                f"truncated BYTES tensor in {field}: element {index} needs a {_LENGTH.size}-byte length "
                f"prefix but only {remaining} bytes remain"
            )
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += _LENGTH.size
        if length > len(view) - offset:
            raise InvalidTensor(
                f"truncated BYTES tensor in {field}: element {index} declares {length} bytes but only "
                f"{len(view) - offset} remain"
            )
        elements.append(bytes(view[offset : offset + length]))
        offset += length
    if offset != len(view):
        extra = _count_whole_elements(view[offset:])
        if extra is not None:
            raise InvalidTensor(f"shape declares {count} elements but {field} holds {count + extra}")
        raise InvalidTensor(
            f"trailing garbage in {field}: {len(view) - offset} unexpected byte(s) after the {count} "
            "element(s) declared by the shape"
        )
    return elements


def _typed_fields(tensor: Message) -> list[str]:
    """Names of the non-empty typed content lists of an input tensor."""
    return [descriptor.name for descriptor, _ in tensor.contents.ListFields()]


def check_input_names(request: Message, expected: Sequence[str]) -> None:
    """InvalidTensor unless the request's inputs are exactly `expected`, in that order."""
    names = [tensor.name for tensor in request.inputs]
    if not names:
        raise InvalidTensor(f"missing input {expected[0]}: the request has no inputs")
    if names != list(expected):
        more = f" and {len(names) - 4} more" if len(names) > 4 else ""
        listed = ", ".join(shown(n) for n in names[:4]) + more
        wanted = " and ".join(expected)
        wanted = f"one input named {wanted}" if len(expected) == 1 else f"the inputs {wanted}"
        raise InvalidTensor(f"expected exactly {wanted}, got {listed}")


def _bytes_input(tensor: Message) -> Message:
    """A BYTES input tensor (of a name check_input_names accepted) checked for datatype and shape [N >= 1]."""
    name = tensor.name
    if tensor.datatype != BYTES_DATATYPE:
        got = tensor.datatype[:SHOWN_CHARS] or "(empty)"
        raise InvalidTensor(f"input {name} has datatype {got}, expected {BYTES_DATATYPE}")
    shape = list(tensor.shape)
    if len(shape) != 1:
        raise InvalidTensor(f"input {name} must be 1-D with shape [N], got shape {shown(shape)}")
    if shape[0] < 0:
        raise InvalidTensor(f"input {name} has invalid shape {shape}: N must be the element count")
    if shape[0] == 0:
        raise InvalidTensor(f"input {name} is empty (shape [0]): send at least one text")
    return tensor


def _decode_utf8(elements: Sequence[bytes], name: str = INPUT_NAME) -> list[str]:
    """Decode every element as UTF-8, naming the first element that is not."""
    texts = []
    for index, element in enumerate(elements):
        try:
            texts.append(element.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InvalidTensor(
                f"element {index} of input {name} is not valid UTF-8 ({exc.reason} at byte {exc.start})"
            ) from None
    return texts


def decode_text_input(request: Message) -> list[str]:
    """The N texts of the TEXT input (BYTES, shape [N]) from raw or typed contents."""
    check_input_names(request, [INPUT_NAME])
    return decode_texts(request, 0)


def decode_texts(request: Message, index: int) -> list[str]:
    """The N texts of the request's index-th input (BYTES, shape [N]) from raw or typed contents."""
    tensor = _bytes_input(request.inputs[index])
    name = tensor.name  # one of the names check_input_names accepted
    count = int(tensor.shape[0])
    typed = _typed_fields(tensor)
    raw_entries = len(request.raw_input_contents)
    if raw_entries and typed:
        raise InvalidTensor(
            f"input {name} has both raw_input_contents and contents.{typed[0]}: send only one"
        )
    if raw_entries:
        if raw_entries != len(request.inputs):
            raise InvalidTensor(
                f"raw_input_contents has {raw_entries} entries for {len(request.inputs)} input(s)"
            )
        return _decode_utf8(deserialize_bytes(request.raw_input_contents[index], count), name)
    if not typed:
        raise InvalidTensor(
            f"input {name} has no data: send raw_input_contents or contents.bytes_contents"
        )
    if typed != ["bytes_contents"]:
        raise InvalidTensor(
            f"{BYTES_DATATYPE} data of input {name} belongs in contents.bytes_contents, "
            f"got contents.{', contents.'.join(typed)}"
        )
    elements = list(tensor.contents.bytes_contents)
    if len(elements) != count:
        raise InvalidTensor(
            f"shape declares {count} elements but contents.bytes_contents holds {len(elements)}"
        )
    return _decode_utf8(elements, name)


def check_requested_outputs(request: Message) -> None:
    """Reject requested outputs other than TRANSLATION (no request = all outputs)."""
    for output in request.outputs:
        if output.name != OUTPUT_NAME:
            name = shown(output.name)
            raise InvalidTensor(f"unknown output {name}: this model's only output is {OUTPUT_NAME}")


def _int_parameter(key: str, value: Message, low: int = 1) -> int:
    """An integer >= low (1 unless told) from an InferParameter given as int64, uint64 or a decimal
    string."""
    kind = value.WhichOneof("parameter_choice")
    if kind in ("int64_param", "uint64_param"):
        number = int(getattr(value, kind))
    elif kind == "string_param":
        text = value.string_param.strip()
        if not text.isdigit() or not text.isascii():
            got = shown(value.string_param)
            raise InvalidTensor(f"parameter {key} must be a whole number, got string {got}")
        digits = text.lstrip("0") or "0"  # int() refuses over 4300 digits: count them first
        if len(digits) > MAX_DIGITS:
            raise InvalidTensor(f"parameter {key} must be a whole number of at most {MAX_DIGITS} digits, "
                                f"got a string of {len(digits)} digits")
        number = int(digits)
    elif kind is None:
        raise InvalidTensor(f"parameter {key} has no value")
    else:
        raise InvalidTensor(
            f"parameter {key} must be an integer (int64_param, uint64_param or a decimal string_param), "
            f"got {kind} {shown(getattr(value, kind))}"
        )
    if number < low:
        raise InvalidTensor(f"parameter {key} must be >= {low}, got {number}")
    return number


def _real_parameter(key: str, value: Message) -> float:
    """A finite number from an InferParameter given as double, int64, uint64 or a decimal string."""
    kind = value.WhichOneof("parameter_choice")
    if kind in ("double_param", "int64_param", "uint64_param"):
        number = float(getattr(value, kind))
    elif kind == "string_param":
        text = value.string_param.strip()
        try:
            number = float(text) if len(text) <= MAX_DIGITS * 2 and text.isascii() else math.nan
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise InvalidTensor(f"parameter {key} must be a finite number, got string "
                                f"{shown(value.string_param)}")
    elif kind is None:
        raise InvalidTensor(f"parameter {key} has no value")
    else:
        raise InvalidTensor(f"parameter {key} must be a number (double_param, int64_param, uint64_param or a "
                            f"decimal string_param), got {kind} {shown(getattr(value, kind))}")
    if not math.isfinite(number):
        raise InvalidTensor(f"parameter {key} must be a finite number, got {number}")
    return number


def _json_list_parameter(key: str, value: Message) -> list[Any]:
    """A non-empty JSON array from an InferParameter given as string_param (HTTP arrays arrive so)."""
    kind = value.WhichOneof("parameter_choice")
    if kind != "string_param":
        got = f"{kind} {shown(getattr(value, kind))}" if kind else "no value"
        raise InvalidTensor(f"parameter {key} must be a JSON array (a string_param holding one), got {got}")
    try:
        data = json.loads(value.string_param)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, list):
        raise InvalidTensor(f"parameter {key} must be a JSON array, got string {shown(value.string_param)}")
    if not data:
        raise InvalidTensor(f"parameter {key} is an empty array: leave it out for none")
    return data


def _token_ids(key: str, data: Any) -> tuple[int, ...]:
    """A JSON array of token ids as a tuple (range checks are the model's: DecodeOptions.resolved)."""
    if not isinstance(data, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in data):
        raise InvalidTensor(f"parameter {key} must be an array of integer token ids, got {shown(data)}")
    return tuple(data)


def _suppressed(value: Message) -> tuple[str | tuple[int, ...], ...]:
    """suppress_sequences: a JSON array whose items are texts or arrays of token ids."""
    items: list[str | tuple[int, ...]] = []
    for i, item in enumerate(_json_list_parameter(SUPPRESS_KEY, value)):
        items.append(item if isinstance(item, str) else _token_ids(f"{SUPPRESS_KEY}[{i}]", item))
    return tuple(items)


def _controls(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The controlled-decoding options among the parameters, by InferOptions field."""
    for key in UNOFFERED_KEYS:
        if key in parameters:
            raise InvalidTensor(f"parameter {key} is not offered here: the {OUTPUT_NAME} output holds one "
                                "translation per text (translator.v1 Translate returns several)")
    given = [key for key in MIN_OUTPUT_TOKENS_KEYS if key in parameters]
    if len(given) > 1:
        raise InvalidTensor(f"give either {' or '.join(MIN_OUTPUT_TOKENS_KEYS)}, not both")
    out: dict[str, Any] = {}
    if given:
        out["min_output_tokens"] = _int_parameter(given[0], parameters[given[0]], low=0)
    for key in (*COUNT_KEYS, SEED_KEY):
        if key in parameters:
            out[key] = _int_parameter(key, parameters[key], low=0)
    for key in REAL_KEYS:
        if key in parameters:
            out[key] = _real_parameter(key, parameters[key])
    for key in FLAG_KEYS:
        out[key] = key in parameters and _bool_parameter(key, parameters[key])
    if TARGET_PREFIX_KEY in parameters and TARGET_PREFIX_IDS_KEY in parameters:
        raise InvalidTensor(f"give either {TARGET_PREFIX_KEY} (text) or {TARGET_PREFIX_IDS_KEY}, not both")
    if TARGET_PREFIX_KEY in parameters:
        out["target_prefix"] = _string_parameter(TARGET_PREFIX_KEY, parameters[TARGET_PREFIX_KEY])
    if TARGET_PREFIX_IDS_KEY in parameters:
        data = _json_list_parameter(TARGET_PREFIX_IDS_KEY, parameters[TARGET_PREFIX_IDS_KEY])
        out["target_prefix"] = _token_ids(TARGET_PREFIX_IDS_KEY, data)
    if SUPPRESS_KEY in parameters:
        out["suppress_sequences"] = _suppressed(parameters[SUPPRESS_KEY])
    return out


def _bool_parameter(key: str, value: Message) -> bool:
    """A boolean from an InferParameter given as bool_param or the string "true" / "false"."""
    kind = value.WhichOneof("parameter_choice")
    if kind == "bool_param":
        return bool(value.bool_param)
    if kind == "string_param" and value.string_param.strip().lower() in ("true", "false"):
        return value.string_param.strip().lower() == "true"
    got = f"{kind} {shown(getattr(value, kind))}" if kind else "no value"
    raise InvalidTensor(f"parameter {key} must be a boolean (bool_param, or string_param \"true\" / "
                        f"\"false\"), got {got}")


def _string_parameter(key: str, value: Message) -> str | None:
    """A string from an InferParameter given as string_param (empty: not given)."""
    kind = value.WhichOneof("parameter_choice")
    if kind != "string_param":
        got = f"{kind} {shown(getattr(value, kind))}" if kind else "no value"
        raise InvalidTensor(f"parameter {key} must be a string (string_param), got {got}")
    return value.string_param or None


def parse_parameters(parameters: Mapping[str, Any]) -> InferOptions:
    """Read decoding options from request parameters (InvalidTensor naming a parameter of the wrong type;
    the values' ranges are checked with the model, by DecodeOptions.resolved); unknown keys are ignored."""
    given = [key for key in MAX_OUTPUT_TOKENS_KEYS if key in parameters]
    if len(given) > 1:
        raise InvalidTensor(f"give either {' or '.join(MAX_OUTPUT_TOKENS_KEYS)}, not both")
    max_output_tokens = _int_parameter(given[0], parameters[given[0]]) if given else None
    beam_size = None
    if BEAM_SIZE_KEY in parameters:
        beam_size = _int_parameter(BEAM_SIZE_KEY, parameters[BEAM_SIZE_KEY])
    flags = {key: key in parameters and _bool_parameter(key, parameters[key])
             for key in (STREAM_KEY, EMPTY_FINAL_KEY)}
    languages = {key: _string_parameter(key, parameters[key]) if key in parameters else None
                 for key in LANGUAGE_KEYS}
    return InferOptions(max_output_tokens=max_output_tokens, beam_size=beam_size, stream=flags[STREAM_KEY],
                        empty_final_response=flags[EMPTY_FINAL_KEY], **languages, **_controls(parameters))


def decode_request(request: Message) -> DecodedRequest:
    """Validate a ModelInferRequest and extract the texts, options and client request id."""
    texts = decode_text_input(request)
    check_requested_outputs(request)
    return DecodedRequest(texts=texts, options=parse_parameters(request.parameters), request_id=request.id)


def encode_translation_output(response: Message, texts: Sequence[str]) -> None:
    """Append the TRANSLATION output (BYTES, shape [N]) to a ModelInferResponse as raw contents."""
    if len(response.raw_output_contents) != len(response.outputs):
        raise ValueError("response mixes raw and typed outputs; raw_output_contents must match outputs")
    tensor = response.outputs.add()
    tensor.name = OUTPUT_NAME
    tensor.datatype = BYTES_DATATYPE
    tensor.shape.append(len(texts))
    response.raw_output_contents.append(serialize_bytes(text.encode("utf-8") for text in texts))


def set_final(response: Message, final: bool) -> None:
    """Flag a streamed ModelInferResponse as its request's last (`triton_final_response`) or not."""
    response.parameters[FINAL_RESPONSE_KEY].bool_param = final
