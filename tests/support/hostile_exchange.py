"""Sending the management calls of tests/support/hostile_management.py to a live server, judging each
answer, and putting the server back after a round.

The oracle (`Exchange.judge`): a call whose restriction header is not right (the first value of the
header decides, over both protocols; HTTP drops a value's edge blanks, gRPC does not) is refused before
it is handled, with exactly Triton's status and message (UNAVAILABLE / 403 naming the header); a call
over a transport limit gets that limit's answer (gRPC metadata over its 16 KiB hard limit
RESOURCE_EXHAUSTED, an HTTP header line or request line over 8190 bytes aiohttp's 400, a body over the
limit 413, a gRPC message over it RESOURCE_EXHAUSTED); any other answer is a clear status: gRPC OK,
INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, RESOURCE_EXHAUSTED or UNAVAILABLE (never INTERNAL or
UNKNOWN), HTTP 200, 400, 404, 413 or 503 with a JSON `{"error": ...}`, its message clean
(tests/support/hostile.py `check_message`: no internals beyond what the client sent) and never the
restriction's refusal. What was accepted must
have been acceptable: a load of a model of the repository with only a `config` parameter whose settings
are a JSON object of known keys and finite numbers, a ModelMesh path inside the repository.
`Exchange.settle` then purges ModelMesh's models, unloads the spare model, reloads the served one and
checks that the server is ready over both protocols and translates.
"""

from __future__ import annotations

import http.client
import json
import math
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from protos.modelmesh import model_runtime_pb2 as mm
from protos.modelmesh import model_runtime_pb2_grpc as mm_grpc
from service.api.status import MAX_MESSAGE_CHARS
from tests.support.hostile import check_message
from tests.support.hostile_management import GRPC_PREFIX, ROUTES, Admin, Call

TIMEOUT_S = 120.0  # a load opens sessions and warms up; a call past this counts as hanging
GRPC_ALLOWED = frozenset({"OK", "INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED",
                          "UNAVAILABLE"})
HTTP_ALLOWED = frozenset({200, 400, 404, 413, 503})
METADATA_SOFT, METADATA_HARD = 8 * 1024, 16 * 1024  # gRPC's default metadata limits (a server may refuse
HEADER_BYTES = 8190  # past the soft one); aiohttp's longest request line / header field
SETTINGS = frozenset({"batching", "max_batch_size", "max_batch_tokens", "queue_size", "max_queue_delay_ms",
                      "variant", "version_policy"})
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # a model name (docs/service.md), independently
MESH_REQUESTS = (mm.LoadModelRequest, mm.UnloadModelRequest, mm.ModelSizeRequest, mm.PredictModelSizeRequest,
                 mm.RuntimeStatusRequest)
CHANNEL_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", 64 << 20)]


@dataclass
class Outcome:
    """An answer: the gRPC code's name (HTTP: the status), its message, and for HTTP whether it was JSON."""

    code: str | int
    message: str
    json_body: bool = True


def restriction(admin: Admin) -> tuple[str, str]:
    """Triton's refusals of a call without the header: (gRPC message, HTTP message)."""
    return (f"This protocol is restricted, expecting header '{GRPC_PREFIX}{admin.key.lower()}'",
            f"This API is restricted, expecting header '{admin.key}'")


def passes(call: Call, admin: Admin) -> bool:
    """Whether the call's headers open the restricted group: the first value of the header decides."""
    for key, value in call.headers:
        raw = value if isinstance(value, bytes) else value.encode("latin-1" if call.protocol == "http" else
                                                                   "utf-8")
        if call.protocol == "grpc" and key == GRPC_PREFIX + admin.key.lower():
            return raw == admin.value.encode()
        if call.protocol == "http" and key.lower() == admin.key.lower():
            return raw.strip(b" \t") == admin.value.encode()
    return False


def _finite(value: Any) -> bool:
    """No NaN or infinity anywhere in a JSON value."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def _depth(value: Any) -> int:
    """Levels of nesting of a JSON value."""
    if isinstance(value, dict | list):
        items = value.values() if isinstance(value, dict) else value
        return 1 + max((_depth(v) for v in items), default=0)
    return 0


def config_problem(text: Any) -> str | None:
    """Why a load's `config` cannot be accepted (None: it may be)."""
    if not isinstance(text, str):
        return f"config is {type(text).__name__}, not a JSON string"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return "config is not JSON"
    if not isinstance(value, dict):
        return "config is not a JSON object"
    if unknown := set(value) - SETTINGS:
        return f"config has unknown settings {sorted(unknown)}"
    if not _finite(value):
        return "config holds a number that is not finite"
    if _depth(value) > 8:
        return "config nests deeper than 8 levels"
    return None


def mesh_target(admin: Admin, path: str) -> str | None:
    """The repository model a ModelMesh path names, None when it names none inside the repository."""
    pure = PurePosixPath(path)
    if pure.is_absolute():
        bases = (admin.root.absolute(), admin.root.resolve())
        base = next((b for b in bases if pure.is_relative_to(b)), None)
        if base is None:
            return None
        pure = pure.relative_to(base)
    parts = pure.parts
    return parts[0] if len(parts) == 1 and parts[0] in (admin.model, admin.spare) else None


def accepted_problem(call: Call, admin: Admin) -> str | None:
    """Why an OK answer to the call is wrong (None: it may be right)."""
    models = (admin.model, admin.spare)
    if call.protocol == "grpc" and getattr(call.request, "repository_name", ""):
        return f"accepted repository {call.request.repository_name!r}: the server has one, named by \"\""
    if call.name == ROUTES["index"] and isinstance(call.parameters, dict) and not isinstance(
            call.parameters.get("ready", False), bool):
        return f"accepted ready {call.parameters['ready']!r}"
    if (call.loads or call.unloads) and call.model not in models:
        return f"accepted a call on model {call.model!r}, which the repository lacks"
    if call.loads:
        given = call.parameters if call.parameters is not None else {}
        if not isinstance(given, dict):
            return f"accepted load parameters {given!r}"
        if set(given) - {"config"}:
            return f"accepted load parameters {sorted(given)}"
        if "config" in given and (problem := config_problem(given["config"])):
            return f"accepted a load whose {problem}"
    if call.name in ("loadModel", "predictModelSize") and mesh_target(admin, call.mesh_path or "") is None:
        return f"accepted modelPath {call.mesh_path!r}, which names no model of the repository"
    if call.name == "loadModel" and (not NAME.fullmatch(call.model or "") or ".." in (call.model or "")):
        return f"accepted modelId {call.model!r}"
    return None


class Exchange:
    """Calls to one server over one gRPC channel and fresh HTTP connections; the oracle of each answer."""

    def __init__(self, admin: Admin) -> None:
        self.admin = admin
        self.channel = grpc.insecure_channel(admin.grpc, options=CHANNEL_OPTIONS)
        self.kserve = v2_grpc.GRPCInferenceServiceStub(self.channel)
        self.mesh = mm_grpc.ModelRuntimeStub(self.channel)
        self.changed = False  # an OK answer may have changed what is loaded since the last settle

    def close(self) -> None:
        """Close the channel."""
        self.channel.close()

    # ----- sending --------------------------------------------------------------------------------
    def send_grpc(self, call: Call) -> Outcome:
        """The call over gRPC."""
        stub = self.mesh if isinstance(call.request, MESH_REQUESTS) else self.kserve
        try:
            getattr(stub, call.name)(call.request, metadata=tuple(call.headers), timeout=TIMEOUT_S)
        except grpc.RpcError as exc:
            return Outcome(exc.code().name, exc.details() or "")
        return Outcome("OK", "")

    def send_http(self, call: Call) -> Outcome:
        """The call over HTTP/1.1 on a new connection (headers sent as given, duplicates included)."""
        assert self.admin.http is not None, "an HTTP call needs the server's HTTP port"
        host, port = self.admin.http.rsplit(":", 1)
        path, body = call.request
        connection = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
        try:
            connection.putrequest("POST", path, skip_accept_encoding=True)
            connection.putheader("Content-Type", "application/json")
            for key, value in call.headers:
                connection.putheader(key, value)
            connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            answer = connection.getresponse()
            raw = answer.read()
        except (ConnectionError, http.client.HTTPException) as exc:
            return Outcome(0, f"no answer: {type(exc).__name__}", json_body=False)
        finally:
            connection.close()
        if not answer.getheader("Content-Type", "").startswith("application/json"):
            return Outcome(answer.status, raw.decode("utf-8", "replace"), json_body=False)
        message = json.loads(raw).get("error", "") if answer.status != 200 else ""
        return Outcome(answer.status, message)

    # ----- the oracle -----------------------------------------------------------------------------
    def judge(self, call: Call) -> bool:
        """Send the call and check its answer (AssertionError says what is wrong); True when accepted."""
        outcome = self.send_grpc(call) if call.protocol == "grpc" else self.send_http(call)
        where = f"{call.protocol} {call.name} {call.model!r:.80}: {outcome.code} {outcome.message[:300]!r}"
        if self._over_a_limit(call, outcome, where):
            return False
        grpc_refusal, http_refusal = restriction(self.admin)
        refusal = grpc_refusal if call.protocol == "grpc" else http_refusal
        name = call.model
        if call.protocol == "http" and name is not None and (not name or "{" in name or "}" in name):
            assert outcome.code == 404 and outcome.json_body, f"an unknown route: {where}"
            return False
        if not passes(call, self.admin):
            expected = ("UNAVAILABLE" if call.protocol == "grpc" else 403, refusal)
            assert (outcome.code, outcome.message) == expected, f"expected the refusal {expected}: {where}"
            return False
        assert outcome.message != refusal, f"refused with the right header: {where}"
        if call.protocol == "grpc":
            assert outcome.code in GRPC_ALLOWED, f"status not allowed: {where}"
        else:
            assert outcome.code in HTTP_ALLOWED and outcome.json_body, f"status not allowed: {where}"
        if outcome.code in ("OK", 200):
            assert (problem := accepted_problem(call, self.admin)) is None, f"{problem}: {where}"
            self.changed = self.changed or call.changes
            return True
        check_message(outcome.message, call.echoed)
        assert len(outcome.message) <= MAX_MESSAGE_CHARS, f"message too long: {where}"
        return False

    def _over_a_limit(self, call: Call, outcome: Outcome, where: str) -> bool:
        """Check the answer of a call over a transport limit; whether it was one."""
        if call.protocol == "grpc":
            size = sum(len(k) + len(v) + 32 for k, v in call.headers)  # HPACK's accounting
            limited = outcome.code == "RESOURCE_EXHAUSTED" and "metadata" in outcome.message
            if size > METADATA_HARD:
                assert limited, f"metadata of {size} bytes: {where}"
            if call.request.ByteSize() > self.admin.max_message_bytes and not limited:
                assert outcome.code == "RESOURCE_EXHAUSTED" and "larger than max" in outcome.message, where
                return True
            return size > METADATA_SOFT and limited
        path, _ = call.request
        longest = max([len(path), *(max(len(k), len(v)) for k, v in call.headers)])
        if longest > HEADER_BYTES:  # a request line (its URL) or a header's name or value
            assert outcome.code == 400, f"a request line or header field of {longest} bytes: {where}"
            return True
        assert outcome.json_body, f"an answer that is not JSON: {where}"
        return False

    # ----- after a round --------------------------------------------------------------------------
    def settle(self) -> str | None:
        """Put the repository back (ModelMesh's models purged, the spare unloaded, the served model
        reloaded) when a round may have changed it, then check the server serves; a finding, or None."""
        metadata = ((GRPC_PREFIX + self.admin.key.lower(), self.admin.value),)
        try:
            if self.changed:
                if self.admin.modelmesh:
                    self.mesh.runtimeStatus(mm.RuntimeStatusRequest(), metadata=metadata, timeout=TIMEOUT_S)
                self.kserve.RepositoryModelUnload(v2.RepositoryModelUnloadRequest(model_name=self.admin.spare),
                                                  metadata=metadata, timeout=TIMEOUT_S)
                self.kserve.RepositoryModelLoad(v2.RepositoryModelLoadRequest(model_name=self.admin.model),
                                                metadata=metadata, timeout=TIMEOUT_S)
                self.changed = False
            return self.not_serving()
        except grpc.RpcError as exc:
            return f"the server could not be put back: {exc.code().name} {exc.details()!r}"

    def not_serving(self) -> str | None:
        """None when the server is ready over both protocols and translates with its model; else why not."""
        health = health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
        if health.status != health_pb2.HealthCheckResponse.SERVING:
            return "the gRPC health service is not SERVING"
        if not self.kserve.ServerReady(v2.ServerReadyRequest(), timeout=30).ready:
            return "ServerReady answers false"
        if not self.kserve.ModelReady(v2.ModelReadyRequest(name=self.admin.model), timeout=30).ready:
            return f"model {self.admin.model} is not ready"
        request = v2.ModelInferRequest(model_name=self.admin.model)
        tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
        tensor.contents.bytes_contents.append(b"we 7 big.")
        if not self.kserve.ModelInfer(request, timeout=TIMEOUT_S).outputs:
            return "ModelInfer answered no output"
        if self.admin.http is not None:
            host, port = self.admin.http.rsplit(":", 1)
            connection = http.client.HTTPConnection(host, int(port), timeout=30)
            try:
                connection.request("GET", "/v2/health/ready")
                if (status := connection.getresponse().status) != 200:
                    return f"/v2/health/ready answers {status}"
            finally:
                connection.close()
        return None

