"""KServe v2 inference of the translation model as plain data: the TEXT, TARGET and TRANSLATION tensors, their
checks, the score outputs, and the raw BYTES form both transports share.

A request's tensor comes as `raw` bytes (gRPC's raw_input_contents, HTTP's binary tensor data), as `elements`
(gRPC's contents.bytes_contents, HTTP's JSON data), or with other typed contents (`typed`: their field names,
refused). TEXT (BYTES, shape [N]) is translated into TRANSLATION (BYTES, [N]); a TARGET input beside TEXT is
scored instead. Every rejection is an InvalidTensor that says what to change.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.dataplane.rendering import Score, Translation, detected_fields
from service.domain.errors import InvalidTensor
from service.domain.text import SHOWN_CHARS, shown

INPUT = "TEXT"
TARGET = "TARGET"
OUTPUT = "TRANSLATION"
BYTES = "BYTES"
FINAL = "triton_final_response"  # response parameter of every streamed response
SCORE_OUTPUTS = {"LOG_PROB": "FP32", "SCORE": "FP32", "TOKEN_LOG_PROBS": "FP32", "TOKEN_COUNT": "INT32",
                 "END_TOKEN_SCORED": "BOOL"}
NUMPY = {"FP32": "<f4", "INT32": "<i4", "BOOL": "?"}  # numeric outputs' element types, little-endian
_LENGTH = struct.Struct("<I")


@dataclass(frozen=True)
class Tensor:
    """An input tensor as sent: name, datatype, shape and its data in one of the forms."""

    name: str
    datatype: str
    shape: list[int]
    raw: bytes | None = None
    elements: list[bytes] | None = None
    typed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class InferRequest:
    """A ModelInferRequest as plain data; `raw_entries`: how many raw contents came (gRPC's count)."""

    model: str
    version: str
    id: str
    inputs: list[Tensor]
    outputs: list[str]
    parameters: dict[str, Any]
    raw_entries: int = 0

    @property
    def scores(self) -> bool:
        """Whether it asks for scoring (it has a TARGET input)."""
        return any(t.name == TARGET for t in self.inputs)


@dataclass(frozen=True)
class Output:
    """An output tensor: BYTES as texts, numbers as an array."""

    name: str
    datatype: str
    shape: list[int]
    value: list[str] | np.ndarray

    def raw(self) -> bytes:
        """Its raw contents: length-prefixed UTF-8 elements, or little-endian numbers."""
        if self.datatype == BYTES:
            return serialize_bytes(text.encode("utf-8") for text in self.value)
        array = np.asarray(self.value)
        return array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()

    def data(self) -> list[Any]:
        """Its elements flat, in row-major order (KServe v2 JSON)."""
        return list(self.value) if self.datatype == BYTES else np.asarray(self.value).ravel().tolist()


@dataclass(frozen=True)
class InferResponse:
    """A ModelInferResponse as plain data; `final` is set on a streamed response (triton_final_response)."""

    model_name: str
    model_version: str
    id: str
    outputs: list[Output] = field(default_factory=list)
    final: bool | None = None
    parameters: dict[str, str] = field(default_factory=dict)  # response parameters (strings) beside `final`


def serialize_bytes(elements: Iterable[bytes]) -> bytes:
    """Raw BYTES tensor contents: each element as a 4-byte little-endian length + its bytes."""
    parts: list[bytes] = []
    for element in elements:
        parts += (_LENGTH.pack(len(element)), element)
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


def deserialize_bytes(raw: bytes, count: int, where: str = "raw_input_contents") -> list[bytes]:
    """Split raw BYTES tensor contents into exactly `count` elements, strictly."""
    if count < 0:
        raise InvalidTensor(f"element count must be >= 0, got {count}")
    view = memoryview(raw)
    elements: list[bytes] = []
    offset = 0
    for index in range(count):
        remaining = len(view) - offset
        if remaining == 0:
            raise InvalidTensor(f"shape declares {count} elements but {where} holds only {index}")
        if remaining < _LENGTH.size:
            raise InvalidTensor(f"truncated BYTES tensor in {where}: element {index} needs a "
                                f"{_LENGTH.size}-byte "
                                f"length prefix but only {remaining} bytes remain")
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += _LENGTH.size
        if length > len(view) - offset:
            raise InvalidTensor(f"truncated BYTES tensor in {where}: element {index} declares {length} "
                                "bytes but "
                                f"only {len(view) - offset} remain")
        elements.append(bytes(view[offset: offset + length]))
        offset += length
    if offset != len(view):
        extra = _count_whole_elements(view[offset:])
        if extra is not None:
            raise InvalidTensor(f"shape declares {count} elements but {where} holds {count + extra}")
        raise InvalidTensor(f"trailing garbage in {where}: {len(view) - offset} unexpected byte(s) after the "
                            f"{count} element(s) declared by the shape")
    return elements


def check_input_names(request: InferRequest, expected: Sequence[str]) -> None:
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


def _check_bytes_tensor(tensor: Tensor, most: int | None = None) -> int:
    """The element count of a BYTES input of shape [N >= 1], N at most `most` (None: any): checked before
    its data is split, so an oversized request costs nothing."""
    name = tensor.name
    if tensor.datatype != BYTES:
        got = tensor.datatype[:SHOWN_CHARS] or "(empty)"
        raise InvalidTensor(f"input {name} has datatype {got}, expected {BYTES}")
    if len(tensor.shape) != 1:
        raise InvalidTensor(f"input {name} must be 1-D with shape [N], got shape {shown(tensor.shape)}")
    if tensor.shape[0] < 0:
        raise InvalidTensor(f"input {name} has invalid shape {tensor.shape}: N must be the element count")
    if tensor.shape[0] == 0:
        raise InvalidTensor(f"input {name} is empty (shape [0]): send at least one text")
    if most is not None and tensor.shape[0] > most:
        raise InvalidTensor(f"input {name} declares {tensor.shape[0]} texts; this server accepts at most "
                            f"{most} in one request (max_batch_size)")
    return int(tensor.shape[0])


def _decode_utf8(elements: Sequence[bytes], name: str) -> list[str]:
    """Decode every element as UTF-8, naming the first element that is not."""
    texts = []
    for index, element in enumerate(elements):
        try:
            texts.append(element.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InvalidTensor(f"element {index} of input {name} is not valid UTF-8 ({exc.reason} at byte "
                                f"{exc.start})") from None
    return texts


def texts_of(request: InferRequest, index: int, most: int | None = None) -> list[str]:
    """The N texts of the request's index-th input (BYTES, shape [N] with N <= most) from raw or typed
    contents."""
    tensor = request.inputs[index]
    count = _check_bytes_tensor(tensor, most)
    name = tensor.name
    if request.raw_entries and tensor.typed:
        raise InvalidTensor(f"input {name} has both raw_input_contents and contents.{tensor.typed[0]}: send "
                            "only one")
    if request.raw_entries:
        if request.raw_entries != len(request.inputs):
            raise InvalidTensor(f"raw_input_contents has {request.raw_entries} entries for "
                                f"{len(request.inputs)} input(s)")
        return _decode_utf8(deserialize_bytes(tensor.raw or b"", count), name)
    if not tensor.typed:
        raise InvalidTensor(f"input {name} has no data: send raw_input_contents or contents.bytes_contents")
    if tensor.typed != ["bytes_contents"]:
        raise InvalidTensor(f"{BYTES} data of input {name} belongs in contents.bytes_contents, "
                            f"got contents.{', contents.'.join(tensor.typed)}")
    elements = tensor.elements or []
    if len(elements) != count:
        raise InvalidTensor(f"shape declares {count} elements but contents.bytes_contents holds "
                            f"{len(elements)}")
    return _decode_utf8(elements, name)


def translation_texts(request: InferRequest, most: int | None = None) -> list[str]:
    """The texts (at most `most`) of a translation request's TEXT input; only TRANSLATION may be asked for."""
    check_input_names(request, [INPUT])
    texts = texts_of(request, 0, most)
    for name in request.outputs:
        if name != OUTPUT:
            raise InvalidTensor(f"unknown output {shown(name)}: this model's only output is {OUTPUT}")
    return texts


def score_pairs(request: InferRequest, most: int | None = None) -> tuple[list[str], list[str]]:
    """Sources and targets (at most `most` pairs) of a score request (TEXT and TARGET); only the score
    outputs may be asked for."""
    check_input_names(request, [INPUT, TARGET])
    sources, targets = texts_of(request, 0, most), texts_of(request, 1, most)
    if len(sources) != len(targets):
        raise InvalidTensor(f"input {TARGET} holds {len(targets)} texts for {len(sources)} in {INPUT}: send "
                            "one target per source")
    for name in request.outputs:
        if name not in SCORE_OUTPUTS:
            raise InvalidTensor(f"unknown output {shown(name)}: scoring gives {', '.join(SCORE_OUTPUTS)}")
    return sources, targets


UNMET = "unmet_required_phrases"  # response parameter: per text, the required phrases its translation lacks
TERMS = "glossary_terms"  # response parameter: per text, the glossary terms (by source) it holds
UNMET_TERMS = "unmet_glossary_terms"  # response parameter: per text, the glossary terms its translation lacks
DETECTED = "detected_language"  # response parameter: per text, the language detected (source_language auto)


def unmet_parameters(unmet: Sequence[Sequence[int]]) -> dict[str, str]:
    """The response parameter of a translation that required phrases: per text, the indexes of those its
    translation lacks, as a JSON array of arrays (a string, as gRPC's parameters carry lists)."""
    return {UNMET: json.dumps([list(u) for u in unmet])}


def glossary_parameters(terms: Sequence[Sequence[str]], unmet: Sequence[Sequence[str]]) -> dict[str, str]:
    """The response parameters of a translation that applied glossary terms: per text, the source terms it
    holds and those its translation lacks, each a JSON array of arrays (a string, as unmet_parameters)."""
    return {TERMS: json.dumps([list(t) for t in terms], ensure_ascii=False),
            UNMET_TERMS: json.dumps([list(u) for u in unmet], ensure_ascii=False)}


def translation_output(texts: Sequence[str]) -> Output:
    """The TRANSLATION output of these texts."""
    return Output(OUTPUT, BYTES, [len(texts)], list(texts))


def translation_response(request: InferRequest, model: str, version: str, results: Sequence[Translation],
                         required: bool, final: bool | None = None) -> InferResponse:
    """The response of translated texts, ModelInfer's or a stream's last (`final`): TRANSLATION, with
    required phrases (`required`) the unmet_required_phrases parameter, where a text held glossary terms
    the glossary_terms / unmet_glossary_terms parameters, and where a language was detected the
    detected_language parameter, on every call alike."""
    unmet = unmet_parameters([r.unmet for r in results]) if required else {}
    if any(r.glossary_terms for r in results):
        unmet |= glossary_parameters([r.glossary_terms for r in results], [r.unmet_terms for r in results])
    if any(r.detected is not None for r in results):
        unmet[DETECTED] = json.dumps([None if r.detected is None else detected_fields(r.detected)
                                      for r in results], ensure_ascii=False)
    return InferResponse(model, version, request.id, [translation_output([r.text for r in results])],
                         final=final, parameters=unmet)


def score_outputs(scores: Sequence[Score], wanted: Sequence[str]) -> list[Output]:
    """The score outputs a request names (all when it names none), in the order of SCORE_OUTPUTS."""
    longest = max(len(s.log_probs) for s in scores)
    token_log_probs = np.zeros((len(scores), longest), np.float32)
    for i, s in enumerate(scores):
        token_log_probs[i, : len(s.log_probs)] = s.log_probs
    values = {
        "LOG_PROB": np.array([s.log_prob for s in scores], np.float32),
        "SCORE": np.array([s.score for s in scores], np.float32),
        "TOKEN_LOG_PROBS": token_log_probs,
        "TOKEN_COUNT": np.array([len(s.log_probs) for s in scores], np.int32),
        "END_TOKEN_SCORED": np.array([s.end_token_scored for s in scores], np.bool_),
    }
    return [Output(name, SCORE_OUTPUTS[name], list(array.shape), array) for name, array in values.items()
            if not wanted or name in wanted]
