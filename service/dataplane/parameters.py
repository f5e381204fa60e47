"""The one vocabulary of request options: their names (the wire's), kinds and reading from plain values into
DecodeOptions, for every protocol whose options come as named parameters (KServe v2 gRPC and REST, generate,
score).

A value is plain data: bool, int, float, str, a list or (a glossary) an object (what JSON gives; a gRPC
InferParameter is unwrapped first). A number may come as a decimal string, a list or an object as the string
of its JSON (what gRPC clients send).
An unknown name is refused with the nearest known one; the names Triton's and KServe's clients send on their
own (RESERVED, and any `triton_` name) pass. A known name of the wrong kind is an InvalidTensor naming it; the
values' ranges are the model's, checked once by DecodeOptions.resolved.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.domain.errors import InvalidTensor
from service.domain.glossary import Glossary
from service.domain.text import shown
from service.domain.types import DecodeOptions, ScoreOptions

MAX_DIGITS = 20  # longest decimal string of a whole number (uint64's maximum), leading zeros aside
TIMEOUT = "timeout"  # Triton's: microseconds for the request (tritonclient sets it)
STREAM = "stream"  # one response per generated piece (ModelStreamInfer only)
EMPTY_FINAL = "triton_enable_empty_final_response"  # tritonclient's enable_empty_final_response
# Sent by Triton's and KServe's clients on their own: accepted, and read only where they mean something here.
RESERVED = ("sequence_id", "sequence_start", "sequence_end", "priority", "binary_data_output", TIMEOUT)
RESERVED_PREFIX = "triton_"

# kinds of values
WHOLE, COUNT, REAL, FLAG, TEXT, IDS, SEQUENCES = "whole", "count", "real", "flag", "text", "ids", "sequences"
PHRASES = "phrases"  # texts, arrays of token ids, and arrays of such forms (a phrase's alternatives)
TERMS = "terms"  # a glossary: an object of source term -> target term(s), or an array of [source, target]

# decoding options: wire name (a DecodeOptions field) -> kind
DECODING: dict[str, str] = {
    "max_output_tokens": WHOLE, "beam_size": WHOLE, "source_language": TEXT, "target_language": TEXT,
    "min_language_confidence": REAL, "task": TEXT,
    "min_output_tokens": COUNT, "length_penalty": REAL, "max_length_ratio": REAL, "repetition_penalty": REAL,
    "no_repeat_ngram_size": COUNT, "temperature": REAL, "top_k": COUNT, "top_p": REAL, "seed": COUNT,
    "disable_unk": FLAG, "target_prefix": TEXT, "target_prefix_ids": IDS, "suppress_sequences": SEQUENCES,
    "required_phrases": PHRASES, "glossary": TERMS,
}
# another wire name of an option -> its field
ALIASES = {"max_tokens": "max_output_tokens", "min_tokens": "min_output_tokens",
           "target_prefix_ids": "target_prefix"}
LANGUAGES = ("source_language", "target_language")
SOURCE_TEXT = (*LANGUAGES, "task")  # what a source is read with: its language, its task's prefix
RESULTS = ("n_best", "return_alternatives", "return_scores", "return_alignment", "return_tokens")
SCORING = ("return_alignment", "return_tokens")
LIST_KINDS = (IDS, SEQUENCES, PHRASES)
LIST_NAMES = tuple(name for name, kind in DECODING.items() if kind in LIST_KINDS)
# other systems' names of our options, for the suggestion
OTHER_NAMES = {"min_length": "min_output_tokens", "max_length": "max_output_tokens",
               "max_new_tokens": "max_output_tokens", "num_beams": "beam_size", "alpha": "length_penalty",
               "num_return_sequences": "n_best", "bad_words": "suppress_sequences",
               "bad_words_ids": "suppress_sequences", "forced_bos_token": "target_language",
               "src_lang": "source_language", "tgt_lang": "target_language",
               "force_words_ids": "required_phrases", "constraints": "required_phrases",
               "terminology": "glossary", "prefix": "task", "task_prefix": "task"}


@dataclass(frozen=True)
class Asked:
    """What a request's parameters ask: its decoding options, the results it wants beyond the best text,
    streaming, and the deadline of Triton's `timeout` (a time.monotonic() value, None: none)."""

    options: DecodeOptions
    n_best: int | None = None
    return_alternatives: bool = False
    return_scores: bool = False
    return_alignment: bool = False
    return_tokens: bool = False
    stream: bool = False
    empty_final_response: bool = False
    deadline: float | None = None

    @property
    def decoding(self) -> DecodeOptions:
        """The decoding options with the results asked (n-best, alternatives, alignment)."""
        return dataclasses.replace(self.options, n_best=self.n_best or 1,
                                   return_alternatives=self.return_alternatives,
                                   return_alignment=self.return_alignment)

    @property
    def extras(self) -> bool:
        """Whether anything beyond the best text is asked."""
        return bool(self.n_best or self.return_alternatives or self.return_scores or self.return_alignment
                    or self.return_tokens)


def check_known(parameters: Mapping[str, Any], accepted: Sequence[str], where: str = "parameter") -> None:
    """InvalidTensor naming the first parameter neither accepted nor reserved, with the nearest known name."""
    for name in parameters:
        if name in accepted or name in RESERVED or name.startswith(RESERVED_PREFIX):
            continue
        near = OTHER_NAMES.get(name) if OTHER_NAMES.get(name) in accepted else None
        near = near or next(iter(difflib.get_close_matches(name, accepted, n=1, cutoff=0.6)), None)
        hint = f"; did you mean {near}?" if near else f"; known: {', '.join(sorted(accepted))}"
        raise InvalidTensor(f"unknown {where} {shown(name)}{hint}")


def whole(name: str, value: Any, low: int = 1) -> int:
    """An integer >= low from an int or a decimal string."""
    if isinstance(value, str):
        text = value.strip()
        if not text.isdigit() or not text.isascii():
            raise InvalidTensor(f"parameter {name} must be a whole number, got string {shown(value)}")
        digits = text.lstrip("0") or "0"  # int() refuses over 4300 digits: count them first
        if len(digits) > MAX_DIGITS:
            raise InvalidTensor(f"parameter {name} must be a whole number of at most {MAX_DIGITS} digits, "
                                f"got a string of {len(digits)} digits")
        value = int(digits)
    elif not isinstance(value, int) or isinstance(value, bool):
        raise InvalidTensor(f"parameter {name} must be an integer (or a decimal string), got {shown(value)}")
    if value < low:
        raise InvalidTensor(f"parameter {name} must be >= {low}, got {value}")
    return value


def real(name: str, value: Any) -> float:
    """A finite number from a number or a decimal string."""
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text) if len(text) <= MAX_DIGITS * 2 and text.isascii() else math.nan
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise InvalidTensor(f"parameter {name} must be a finite number, got string {shown(value)}")
        return number
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InvalidTensor(f"parameter {name} must be a number (or a decimal string), got {shown(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidTensor(f"parameter {name} must be a finite number, got {number}")
    return number


def flag(name: str, value: Any) -> bool:
    """A boolean, or the string "true" / "false"."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidTensor(f"parameter {name} must be a boolean (or the string \"true\" / \"false\"), "
                        f"got {shown(value)}")


def text(name: str, value: Any) -> str | None:
    """A string (empty: not given)."""
    if not isinstance(value, str):
        raise InvalidTensor(f"parameter {name} must be a string, got {shown(value)}")
    return value or None


def array(name: str, value: Any) -> list[Any]:
    """A non-empty list, given as a list or as the string of a JSON array."""
    data = value
    if isinstance(value, str):
        try:
            data = json.loads(value)
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, list):
            raise InvalidTensor(f"parameter {name} must be a JSON array, got string {shown(value)}")
    if not isinstance(data, list):
        raise InvalidTensor(f"parameter {name} must be a JSON array, got {shown(value)}")
    if not data:
        raise InvalidTensor(f"parameter {name} is an empty array: leave it out for none")
    return data


def token_ids(name: str, data: Any) -> tuple[int, ...]:
    """A list of token ids as a tuple (range checks are the model's)."""
    if not isinstance(data, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in data):
        raise InvalidTensor(f"parameter {name} must be an array of integer token ids, got {shown(data)}")
    return tuple(data)


def glossary(name: str, value: Any) -> Glossary:
    """A request's glossary (Glossary.from_request), given as JSON data or the string of a JSON object or
    array (what gRPC clients send)."""
    data = value
    if isinstance(value, str):
        try:
            data = json.loads(value)
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict | list):
            raise InvalidTensor(f"parameter {name} must be a JSON object of source term -> target term(s) or "
                                f"an array of [source, target] pairs, got string {shown(value)}")
    return Glossary.from_request(data, name)


def deadline_of(value: Any) -> float:
    """The time.monotonic() deadline of Triton's `timeout` (microseconds, an integer >= 1)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidTensor(f"parameter {TIMEOUT} must be a positive number of microseconds")
    return time.monotonic() + value / 1e6


def _value(name: str, kind: str, value: Any) -> Any:
    """One decoding option's value of its kind."""
    if kind == WHOLE:
        return whole(name, value)
    if kind == COUNT:
        return whole(name, value, low=0)
    if kind == REAL:
        return real(name, value)
    if kind == FLAG:
        return flag(name, value)
    if kind == TEXT:
        return text(name, value)
    if kind == IDS:
        return token_ids(name, array(name, value))
    if kind == TERMS:
        return glossary(name, value)
    items = array(name, value)  # SEQUENCES: texts and arrays of token ids
    if kind == PHRASES:
        return tuple(_phrase(f"{name}[{i}]", item) for i, item in enumerate(items))
    return tuple(item if isinstance(item, str) else token_ids(f"{name}[{i}]", item) for i,
                 item in enumerate(items))


def _phrase(name: str, item: Any) -> str | tuple[int, ...] | tuple[str | tuple[int, ...], ...]:
    """A required phrase: a text, an array of token ids, or an array of forms (texts, arrays of ids)."""
    if isinstance(item, str):
        return item
    if isinstance(item, list) and item and all(isinstance(x, str | list) for x in item):
        return tuple(x if isinstance(x, str) else token_ids(f"{name}[{j}]", x) for j, x in enumerate(item))
    return token_ids(name, item)


def decoding_options(parameters: Mapping[str, Any]) -> DecodeOptions:
    """DecodeOptions of the decoding parameters among `parameters` (unset: the model's default)."""
    fields: dict[str, Any] = {}
    given: dict[str, str] = {}
    for name, value in parameters.items():
        if name not in DECODING and name not in ALIASES:
            continue
        field = ALIASES.get(name, name)
        kind = DECODING.get(name) or DECODING[field]
        if field in given:
            first = given[field]
            raise InvalidTensor(f"give either {first} or {name}, not both")
        given[field] = name
        fields[field] = _value(name, kind, value)
    for field, neutral in (("max_length_ratio", 0.0), ("top_k", 0), ("top_p", 1.0), ("disable_unk", False)):
        if fields.get(field) is None:
            fields[field] = neutral
    return DecodeOptions(**fields)


def read(parameters: Mapping[str, Any], results: Sequence[str] = (), stream: bool = False) -> Asked:
    """What a translation's parameters ask: the decoding options, the `results` names this call offers
    (n_best, return_scores, ...), `stream` (where a call offers it) and Triton's timeout."""
    accepted = [*DECODING, *ALIASES, *results, *((STREAM,) if stream else ())]
    check_known(parameters, accepted)
    for name in accepted:
        if name in parameters and parameters[name] is None:  # a gRPC InferParameter with no value set
            raise InvalidTensor(f"parameter {name} has no value")
    extras = {name: (whole(name, parameters[name]) if name == "n_best" else flag(name, parameters[name]))
              for name in results if name in parameters}
    return Asked(
        decoding_options(parameters), **extras,
        stream=stream and STREAM in parameters and flag(STREAM, parameters[STREAM]),
        empty_final_response=EMPTY_FINAL in parameters and flag(EMPTY_FINAL, parameters[EMPTY_FINAL]),
        deadline=deadline_of(parameters[TIMEOUT]) if TIMEOUT in parameters else None)


def score_options(given: dict[str, Any], where: str, offered: Sequence[str] = ()) -> ScoreOptions:
    """ScoreOptions of a score request's parameters: the languages and task, and `offered` flags
    (return_alignment); a decoding option is refused as not applying to scoring, an unknown name with the
    nearest known one."""
    accepted = [*SOURCE_TEXT, *offered]
    for key in given:
        if key not in accepted and (key in DECODING or key in ALIASES or key in RESULTS):
            raise InvalidTensor(f"parameter {shown(key)} does not apply to {where}; it takes "
                                f"{', '.join(accepted)}")
    check_known(given, accepted)
    read_with = {key: text(key, given[key]) for key in SOURCE_TEXT if key in given}
    alignment = "return_alignment" in given and flag("return_alignment", given["return_alignment"])
    return ScoreOptions(return_alignment=alignment, **read_with)
