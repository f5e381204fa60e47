"""KServe v2 REST tensors <-> the plain KServe v2 data of service/dataplane/kserve.py.

A JSON inference request (`{"id", "parameters", "inputs": [{"name", "shape", "datatype", "parameters",
"data"}], "outputs": [{"name", "parameters"}]}`) becomes an InferRequest: JSON `data` becomes the tensor's
elements, and with Triton's binary tensor data extension (the JSON header's length in
`Inference-Header-Content-Length`, each binary input's size in its `binary_data_size` parameter, the inputs'
bytes after the header in order) its raw contents. The data plane then checks them exactly as for gRPC. The
response goes back as JSON `data`, or as binary data after a JSON header when the request asks
(`binary_data_output`, or an output's `binary_data`). Every rejection is an InvalidTensor (400) that says what
was wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.dataplane import kserve
from service.domain.errors import InvalidTensor
from service.domain.text import shown

HEADER_LENGTH = "Inference-Header-Content-Length"
BINARY_SIZE_KEY = "binary_data_size"
BINARY_OUTPUT_KEY = "binary_data_output"  # request parameter: every output as binary data
BINARY_KEY = "binary_data"  # requested output parameter
MAX_ELEMENTS = 1 << 20  # most elements a JSON data array may hold (the body limit comes first)


@dataclass(frozen=True)
class HttpInferRequest:
    """A request as the data plane reads it, with what the response's encoding needs."""

    request: kserve.InferRequest
    binary_output: bool  # answer with binary tensor data


def _flatten(data: Any, count: int, name: str) -> list[bytes]:
    """The strings of a BYTES tensor's JSON data (flat, or nested as its shape), as UTF-8 bytes."""
    out: list[bytes] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, str):
            out.append(item.encode("utf-8", "surrogatepass"))
        else:
            raise InvalidTensor(f"input {shown(name)} is BYTES: its data must hold strings, "
                                f"got {shown(item)}")
        if len(out) > MAX_ELEMENTS:
            break
    if len(out) != count:
        raise InvalidTensor(f"input {shown(name)}: shape declares {count} elements but data holds {len(out)}")
    return out


def _shape(tensor: Mapping[str, Any], name: str) -> list[int]:
    """The tensor's shape: a list of non-negative integers."""
    shape = tensor.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise InvalidTensor(f"input {shown(name)} needs a shape: a list of integers, got {shown(shape)}")
    if any(not 0 <= d < (1 << 62) for d in shape):
        raise InvalidTensor(f"input {shown(name)} has invalid shape {shown(shape)}")
    return shape


def _element_count(shape: list[int]) -> int:
    """Number of elements of a shape (capped: a huge product can only be a mismatch)."""
    count = 1
    for dim in shape:
        count = min(count * dim, MAX_ELEMENTS + 1)
    return count


def _input(tensor: Any, binary: memoryview, offset: int) -> tuple[kserve.Tensor, int]:
    """One JSON input as a plain tensor; the offset in `binary` after its binary data, if any."""
    if not isinstance(tensor, dict):
        raise InvalidTensor(f"every input must be a JSON object, got {shown(tensor)}")
    name, datatype = tensor.get("name"), tensor.get("datatype")
    if not isinstance(name, str) or not isinstance(datatype, str):
        raise InvalidTensor(f"every input needs a string name and datatype, got {shown(name)} / "
                            f"{shown(datatype)}")
    shape = _shape(tensor, name)
    given = tensor.get("parameters", {})
    if not isinstance(given, dict):
        raise InvalidTensor(f"input {shown(name)} parameters must be a JSON object, got {shown(given)}")
    size = given.get(BINARY_SIZE_KEY)
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidTensor(f"input {shown(name)}: {BINARY_SIZE_KEY} must be a byte count, "
                                f"got {shown(size)}")
        if "data" in tensor:
            raise InvalidTensor(f"input {shown(name)} has both data and {BINARY_SIZE_KEY}: send only one")
        if offset + size > len(binary):
            raise InvalidTensor(f"input {shown(name)} declares {size} bytes of binary data but only "
                                f"{len(binary) - offset} follow the JSON header")
        return kserve.Tensor(name, datatype, shape, raw=bytes(binary[offset: offset + size])), offset + size
    if "data" not in tensor:
        raise InvalidTensor(f"input {shown(name)} has no data: send data, or binary data with "
                            f"{BINARY_SIZE_KEY}")
    if datatype != kserve.BYTES:  # the data plane refuses it by name
        return kserve.Tensor(name, datatype, shape), offset
    elements = _flatten(tensor["data"], _element_count(shape), name)
    return kserve.Tensor(name, datatype, shape, elements=elements, typed=["bytes_contents"]), offset


def _binary_parts(body: bytes, header_length: str | None) -> tuple[bytes, memoryview]:
    """The JSON header and the binary data after it (none without the header-length header)."""
    if header_length is None:
        return body, memoryview(b"")
    text = header_length.strip()
    if not text.isdigit() or not text.isascii() or len(text) > 12:
        raise InvalidTensor(f"{HEADER_LENGTH} must be a byte count, got {shown(header_length)}")
    length = int(text)
    if length > len(body):
        raise InvalidTensor(f"{HEADER_LENGTH} is {length} but the body has only {len(body)} bytes")
    view = memoryview(body)
    return bytes(view[:length]), view[length:]


def _flag(where: str, value: Any) -> bool:
    """A JSON boolean."""
    if not isinstance(value, bool):
        raise InvalidTensor(f"{where} must be a boolean, got {shown(value)}")
    return value


def infer_request(body: bytes, header_length: str | None, model: str, version: str,
                  parse: Any) -> HttpInferRequest:
    """The InferRequest of an HTTP infer body (`parse`: JSON object of bytes, InvalidInput otherwise)."""
    header, binary = _binary_parts(body, header_length)
    request = parse(header, "inference request JSON")
    request_id = request.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidTensor(f"id must be a string, got {shown(request_id)}")
    parameters = request.get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidTensor(f"parameters must be a JSON object, got {shown(parameters)}")
    binary_output = _flag(f"parameter {BINARY_OUTPUT_KEY}", parameters.get(BINARY_OUTPUT_KEY, False))
    inputs = request.get("inputs")
    if not isinstance(inputs, list):
        raise InvalidTensor(f"inputs must be a list of tensors, got {shown(inputs)}")
    offset, tensors = 0, []
    for tensor in inputs:
        plain, offset = _input(tensor, binary, offset)
        tensors.append(plain)
    if offset != len(binary):
        raise InvalidTensor(f"{len(binary) - offset} bytes of binary data after the JSON header belong to "
                            f"no input (their {BINARY_SIZE_KEY} parameters add up to {offset})")
    raw_entries = sum(t.raw is not None for t in tensors)
    if raw_entries and raw_entries != len(tensors):
        raise InvalidTensor("send every input as binary data or every input as JSON data, not a mix")
    outputs = request.get("outputs", [])
    if not isinstance(outputs, list):
        raise InvalidTensor(f"outputs must be a list, got {shown(outputs)}")
    names = []
    for output in outputs:
        if not isinstance(output, dict) or not isinstance(output.get("name"), str):
            raise InvalidTensor(f"every requested output needs a string name, got {shown(output)}")
        wanted = output.get("parameters", {})
        if not isinstance(wanted, dict):
            raise InvalidTensor(f"output parameters must be a JSON object, got {shown(wanted)}")
        binary_output = _flag(f"output parameter {BINARY_KEY}", wanted.get(BINARY_KEY,
                                                                           False)) or binary_output
        names.append(output["name"])
    plain = kserve.InferRequest(model, version, request_id, tensors, names, dict(parameters), raw_entries)
    return HttpInferRequest(plain, binary_output)


def infer_response(response: kserve.InferResponse, binary: bool) -> tuple[dict[str, Any], bytes]:
    """The JSON of an InferResponse and the binary data after it (b"" in JSON mode)."""
    payload: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        payload["id"] = response.id
    if response.final is not None or response.parameters:
        final = {} if response.final is None else {kserve.FINAL: response.final}
        payload["parameters"] = final | response.parameters
    outputs, data = [], []
    for output in response.outputs:
        entry: dict[str, Any] = {"name": output.name, "datatype": output.datatype,
                                 "shape": list(output.shape)}
        if binary:
            raw = output.raw()
            entry["parameters"] = {BINARY_SIZE_KEY: len(raw)}
            data.append(raw)
        else:  # numbers and booleans flattened in row-major order, as the protocol's JSON
            entry["data"] = output.data()
        outputs.append(entry)
    payload["outputs"] = outputs
    return payload, b"".join(data)
