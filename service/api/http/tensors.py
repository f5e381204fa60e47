"""KServe v2 REST tensors <-> the KServe v2 protobuf messages the servicer reads and writes.

A JSON inference request (`{"id", "parameters", "inputs": [{"name", "shape", "datatype",
"parameters", "data"}], "outputs": [{"name", "parameters"}]}`) becomes an `inference.ModelInferRequest`:
JSON `data` goes to `contents.bytes_contents`, and with Triton's binary tensor data extension (the
JSON header's length in `Inference-Header-Content-Length`, each binary input's size in its
`binary_data_size` parameter, the inputs' bytes after the header in order) to `raw_input_contents`.
The codec (service/api/kserve_codec.py) then checks them exactly as for gRPC. Parameters become
InferParameters by their JSON type (bool, int64, double, string; a JSON array, for the parameters that
take one, as the string of its JSON, what a gRPC client sends). The response goes back as JSON
`data`, or as binary data after a JSON header when the request asks (`binary_data_output`, or an
output's `binary_data`). Every rejection is an InvalidTensor (400) that says what was wrong.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from protos.inference import grpc_service_pb2 as pb
from service.api import kserve_codec, kserve_parameters
from service.api.kserve_codec import shown
from service.domain.errors import InvalidTensor

HEADER_LENGTH = "Inference-Header-Content-Length"
BINARY_SIZE_KEY = "binary_data_size"
BINARY_OUTPUT_KEY = "binary_data_output"  # request parameter: every output as binary data
BINARY_KEY = "binary_data"  # requested output parameter
TIMEOUT_KEY = "timeout"  # request parameter, Triton's: microseconds for the request (tritonclient sets it)
NUMERIC = {"FP32": "<f4", "INT32": "<i4", "BOOL": "?"}  # our outputs' numeric datatypes, little-endian numpy
MAX_ELEMENTS = 1 << 20  # most elements a JSON data array may hold (the body limit comes first)


@dataclass(frozen=True)
class HttpInferRequest:
    """A request as the servicer reads it, with what the response's encoding needs."""

    message: pb.ModelInferRequest
    binary_output: bool  # answer with binary tensor data
    deadline: float | None  # time.monotonic() value from Triton's `timeout` parameter


def parameter_field(key: str, value: Any) -> str:
    """The parameter field of a JSON value: bool_param, int64_param, double_param or string_param (a
    JSON array for a parameter that takes one: kserve_parameters.LIST_KEYS)."""
    if isinstance(value, bool):
        return "bool_param"
    if isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            raise InvalidTensor(f"parameter {key} is out of the int64 range: {shown(value)}")
        return "int64_param"
    if isinstance(value, float):
        return "double_param"
    if isinstance(value, str):
        return "string_param"
    if isinstance(value, list) and key in kserve_parameters.LIST_KEYS:
        return "string_param"  # the JSON array itself, as gRPC clients send it
    listed = ", ".join(kserve_parameters.LIST_KEYS)
    arrays = f" (only {listed} take arrays)" if isinstance(value, list) else ""
    raise InvalidTensor(f"parameter {key} must be a string, number or boolean{arrays}, got {shown(value)}")


def set_parameters(target: Any, parameters: Any, where: str) -> None:
    """Copy a JSON parameters object into a protobuf parameters map (InferParameter, or the
    repository's ModelRepositoryParameter, which has no double)."""
    if not isinstance(parameters, dict):
        raise InvalidTensor(f"{where} parameters must be a JSON object, got {shown(parameters)}")
    for key, value in parameters.items():
        field = parameter_field(key, value)
        entry = target[key]
        if field not in entry.DESCRIPTOR.fields_by_name:
            del target[key]
            raise InvalidTensor(f"parameter {key} cannot be a number with a fraction here, "
                                f"got {shown(value)}")
        setattr(entry, field, json.dumps(value) if isinstance(value, list) else value)


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


def _add_input(message: pb.ModelInferRequest, tensor: Any, binary: memoryview, offset: int) -> int:
    """Add one JSON input to the message; the offset in `binary` after its binary data, if any."""
    if not isinstance(tensor, dict):
        raise InvalidTensor(f"every input must be a JSON object, got {shown(tensor)}")
    name, datatype = tensor.get("name"), tensor.get("datatype")
    if not isinstance(name, str) or not isinstance(datatype, str):
        raise InvalidTensor(f"every input needs a string name and datatype, got {shown(name)} / "
                            f"{shown(datatype)}")
    shape = _shape(tensor, name)
    added = message.inputs.add(name=name, datatype=datatype, shape=shape)
    given = tensor.get("parameters", {})
    if not isinstance(given, dict):
        raise InvalidTensor(f"input {shown(name)} parameters must be a JSON object, got {shown(given)}")
    parameters = dict(given)
    size = parameters.pop(BINARY_SIZE_KEY, None)
    set_parameters(added.parameters, parameters, f"input {shown(name)}")
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidTensor(f"input {shown(name)}: {BINARY_SIZE_KEY} must be a byte count, "
                                f"got {shown(size)}")
        if "data" in tensor:
            raise InvalidTensor(f"input {shown(name)} has both data and {BINARY_SIZE_KEY}: send only one")
        if offset + size > len(binary):
            raise InvalidTensor(f"input {shown(name)} declares {size} bytes of binary data but only "
                                f"{len(binary) - offset} follow the JSON header")
        message.raw_input_contents.append(bytes(binary[offset: offset + size]))
        return offset + size
    if "data" not in tensor:
        raise InvalidTensor(f"input {shown(name)} has no data: send data, or binary data with "
                            f"{BINARY_SIZE_KEY}")
    if datatype == kserve_codec.BYTES_DATATYPE:
        added.contents.bytes_contents.extend(_flatten(tensor["data"], _element_count(shape), name))
    # any other datatype: the codec refuses it by name
    return offset


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


def infer_request(body: bytes, header_length: str | None, model: str, version: str,
                  parse: Any) -> HttpInferRequest:
    """The ModelInferRequest of an HTTP infer body (`parse`: JSON object of bytes, InvalidInput
    otherwise)."""
    header, binary = _binary_parts(body, header_length)
    request = parse(header, "inference request JSON")
    message = pb.ModelInferRequest(model_name=model, model_version=version)
    request_id = request.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidTensor(f"id must be a string, got {shown(request_id)}")
    message.id = request_id
    parameters = request.get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidTensor(f"parameters must be a JSON object, got {shown(parameters)}")
    parameters = dict(parameters)
    binary_output = parameters.pop(BINARY_OUTPUT_KEY, False)
    if not isinstance(binary_output, bool):
        raise InvalidTensor(f"parameter {BINARY_OUTPUT_KEY} must be a boolean, got {shown(binary_output)}")
    deadline = None
    if TIMEOUT_KEY in parameters:
        micros = parameters.pop(TIMEOUT_KEY)
        if not isinstance(micros, int) or isinstance(micros, bool) or micros < 1:
            raise InvalidTensor(f"parameter {TIMEOUT_KEY} must be a positive number of microseconds, "
                                f"got {shown(micros)}")
        deadline = time.monotonic() + micros / 1e6
    set_parameters(message.parameters, parameters, "request")
    inputs = request.get("inputs")
    if not isinstance(inputs, list):
        raise InvalidTensor(f"inputs must be a list of tensors, got {shown(inputs)}")
    offset = 0
    for tensor in inputs:
        offset = _add_input(message, tensor, binary, offset)
    if offset != len(binary):
        raise InvalidTensor(f"{len(binary) - offset} bytes of binary data after the JSON header belong to "
                            f"no input (their {BINARY_SIZE_KEY} parameters add up to {offset})")
    if message.raw_input_contents and len(message.raw_input_contents) != len(message.inputs):
        raise InvalidTensor("send every input as binary data or every input as JSON data, not a mix")
    outputs = request.get("outputs", [])
    if not isinstance(outputs, list):
        raise InvalidTensor(f"outputs must be a list, got {shown(outputs)}")
    for output in outputs:
        if not isinstance(output, dict) or not isinstance(output.get("name"), str):
            raise InvalidTensor(f"every requested output needs a string name, got {shown(output)}")
        wanted = output.get("parameters", {})
        if not isinstance(wanted, dict):
            raise InvalidTensor(f"output parameters must be a JSON object, got {shown(wanted)}")
        wanted = dict(wanted)
        flag = wanted.pop(BINARY_KEY, False)
        if not isinstance(flag, bool):
            raise InvalidTensor(f"output parameter {BINARY_KEY} must be a boolean, got {shown(flag)}")
        binary_output = binary_output or flag
        message.outputs.add(name=output["name"])
    return HttpInferRequest(message, binary_output, deadline)


def parameters_json(parameters: Mapping[str, pb.InferParameter]) -> dict[str, Any]:
    """A protobuf parameters map as JSON values."""
    out = {}
    for key, value in parameters.items():
        kind = value.WhichOneof("parameter_choice")
        if kind is not None:
            out[key] = getattr(value, kind)
    return out


def infer_response(response: pb.ModelInferResponse, binary: bool) -> tuple[dict[str, Any], bytes]:
    """The JSON of a ModelInferResponse and the binary data after it (b"" in JSON mode)."""
    payload: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        payload["id"] = response.id
    if response.parameters:
        payload["parameters"] = parameters_json(response.parameters)
    outputs, data = [], []
    for tensor, raw in zip(response.outputs, response.raw_output_contents, strict=True):
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype,
                                 "shape": list(tensor.shape)}
        if binary:
            entry["parameters"] = {BINARY_SIZE_KEY: len(raw)}
            data.append(raw)
        elif tensor.datatype == kserve_codec.BYTES_DATATYPE:
            count = int(tensor.shape[0]) if tensor.shape else 0
            entry["data"] = [e.decode("utf-8") for e in kserve_codec.deserialize_bytes(raw, count)]
        else:  # numbers, booleans (a score's outputs): flattened in row-major order, as the protocol's JSON
            entry["data"] = np.frombuffer(raw, NUMERIC[tensor.datatype]).tolist()
        outputs.append(entry)
    payload["outputs"] = outputs
    return payload, b"".join(data)


def texts_of(response: pb.ModelInferResponse) -> list[str]:
    """The TRANSLATION texts of a response ([] when it has no output)."""
    return [e.decode("utf-8")
            for tensor, raw in zip(response.outputs, response.raw_output_contents, strict=True)
            for e in kserve_codec.deserialize_bytes(raw, int(tensor.shape[0]))]
