"""Answers of the server as plain data, for recording and comparing them (tests/support/conversation.py):
a gRPC answer is its status code and details, or its messages as protobuf's JSON mapping (KServe tensor
bytes decoded by datatype); an HTTP answer is its status, content type and body (JSON, server-sent events
or Triton's binary tensor data). `normalised` replaces what differs from run to run (ids the server draws,
timings, measured sizes, error ids); `differences` compares exactly, floats within FLOAT_TOLERANCE (kernels
differ in the last bits between CPUs)."""

from __future__ import annotations

import http.client
import json
import math
import re
import struct
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from protos.inference import grpc_service_pb2 as v2
from tests.support.http import parse_sse

FLOAT_TOLERANCE = 1e-3  # absolute + relative
TIMING_KEYS = {"timings", "ns", "last_inference", "lastInference", "sizeInBytes", "capacityInBytes"}
DRAWN_ID = re.compile(r"^[0-9a-f]{32}$")  # a request id the server drew (uuid4 hex)
ERROR_ID = re.compile(r"error id [0-9a-f-]+")
NUMERIC = {"FP32": "<f4", "INT32": "<i4", "BOOL": "?", "INT64": "<i8"}

def normalised(value: Any) -> Any:
    """value with drawn ids, timings and error ids replaced by placeholders."""
    if isinstance(value, dict):
        return {k: ("<timing>" if k in TIMING_KEYS else normalised(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    if isinstance(value, str):
        return "<id>" if DRAWN_ID.match(value) else ERROR_ID.sub("error id <id>", value)
    return value


def _tensors(message: Message, data: dict[str, Any]) -> dict[str, Any]:
    """A KServe response's dict with raw_output_contents decoded by each output's datatype."""
    raw = list(message.raw_output_contents)
    data.pop("raw_output_contents", None)
    if raw:
        pairs = zip(message.outputs, raw, strict=True)
        data["raw_outputs"] = [_decode(output.datatype, bytes(contents)) for output, contents in pairs]
    return data


def _decode(datatype: str, raw: bytes) -> list[Any]:
    """Raw tensor bytes as a flat list."""
    if datatype == "BYTES":
        out, offset = [], 0
        while offset < len(raw):
            (length,) = struct.unpack_from("<I", raw, offset)
            out.append(raw[offset + 4: offset + 4 + length].decode("utf-8"))
            offset += 4 + length
        return out
    return np.frombuffer(raw, NUMERIC[datatype]).tolist()


def message_data(message: Message) -> dict[str, Any]:
    """A protobuf message as protobuf's JSON mapping (proto field names), KServe tensors decoded."""
    data = MessageToDict(message, preserving_proto_field_name=True)
    if isinstance(message, v2.ModelInferResponse):
        data = _tensors(message, data)
    elif isinstance(message, v2.ModelStreamInferResponse) and message.HasField("infer_response"):
        data["infer_response"] = _tensors(message.infer_response, data["infer_response"])
    return data


def grpc_answer(call: Callable[[], Any], stream: bool = False) -> dict[str, Any]:
    """The answer of a unary call (or every message of a streaming one), or its error status."""
    messages: list[dict[str, Any]] = []
    try:
        if stream:
            for message in call():
                messages.append(message_data(message))
            return {"messages": messages}
        return {"message": message_data(call())}
    except grpc.RpcError as exc:
        return {"messages": messages, "code": exc.code().name, "details": exc.details()}


def http_answer(address: str, method: str, path: str, body: Any = None, raw: bytes | None = None,
                headers: dict[str, str] | None = None) -> dict[str, Any]:
    """An HTTP exchange: status, content type and the body as data."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        payload = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=payload, headers=sent | (headers or {}))
        answer = connection.getresponse()
        data = answer.read()
        kind = answer.getheader("Content-Type", "")
        out: dict[str, Any] = {"status": answer.status, "content_type": kind}
        header_length = answer.getheader("Inference-Header-Content-Length")
        if header_length is not None:
            out["json"] = json.loads(data[: int(header_length)])
            out["binary"] = list(data[int(header_length):])
        elif kind.startswith("text/event-stream"):
            out["events"] = parse_sse(data)
        elif kind.startswith("application/json"):
            out["json"] = json.loads(data)
        else:
            out["body"] = data.decode("utf-8", "replace")
        return out
    finally:
        connection.close()


def differences(recorded: Any, got: Any, where: str = "") -> list[str]:
    """Where got differs from recorded: exact, floats within FLOAT_TOLERANCE."""
    if isinstance(recorded, float) or isinstance(got, float):
        if isinstance(recorded, int | float) and isinstance(got, int | float) and not isinstance(got, bool) \
                and math.isclose(recorded, got, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE):
            return []
        return [f"{where}: recorded {recorded!r}, got {got!r}"]
    if isinstance(recorded, dict) and isinstance(got, dict):
        out = [f"{where}.{k}: recorded only" for k in recorded.keys() - got.keys()]
        out += [f"{where}.{k}: new {got[k]!r:.200}" for k in got.keys() - recorded.keys()]
        for k in recorded.keys() & got.keys():
            out += differences(recorded[k], got[k], f"{where}.{k}")
        return out
    if isinstance(recorded, list) and isinstance(got, list):
        if len(recorded) != len(got):
            return [f"{where}: {len(recorded)} items recorded, got {len(got)}: {got!r:.300}"]
        return [d for i, (r, g) in enumerate(zip(recorded, got, strict=True))
                for d in differences(r, g, f"{where}[{i}]")]
    if recorded == got and type(recorded) is type(got):
        return []
    return [f"{where}: recorded {recorded!r:.300}, got {got!r:.300}"]
