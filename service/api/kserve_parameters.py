"""KServe v2 request parameters of the translation model: their names, kinds and parsing into InferOptions.

A parameter is an `InferParameter` (bool, int64, uint64, double or string); a number may come as a decimal
string, a list (target prefix ids, suppressed sequences) as a JSON string in gRPC and a JSON array over
HTTP. Unknown keys are ignored; a known key of the wrong kind is an `InvalidTensor` naming it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from service.api.common import shown
from service.domain.errors import InvalidTensor

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
MAX_DIGITS = 20  # longest decimal string parameter (uint64's maximum), leading zeros aside


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
            raise InvalidTensor(f"parameter {key} is not offered here: the TRANSLATION output holds one "
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
