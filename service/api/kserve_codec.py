"""KServe v2 tensor codec of the translation model: TEXT in, TRANSLATION out, both 1-D BYTES.

Works on `inference.ModelInferRequest` / `ModelInferResponse` messages of any generated module
(ours or tritonclient's): only field names are used. A BYTES tensor in raw form is the
concatenation, for every element, of a 4-byte little-endian length and that many bytes; in typed
form it is `contents.bytes_contents`, one entry per element without prefixes. Every rejection is
an `InvalidTensor` whose message tells the client what to change.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from google.protobuf.message import Message

from service.api.common import SHOWN_CHARS, shown
from service.api.kserve_parameters import InferOptions, parse_parameters
from service.domain.errors import InvalidTensor

INPUT_NAME = "TEXT"
OUTPUT_NAME = "TRANSLATION"
BYTES_DATATYPE = "BYTES"
FINAL_RESPONSE_KEY = "triton_final_response"  # response parameter of every streamed response
_LENGTH = struct.Struct("<I")


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
