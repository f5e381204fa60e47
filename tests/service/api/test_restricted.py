"""Restricted protocol groups (--grpc-restricted-protocol, --http-restricted-api) with Triton's semantics:
a call of a restricted group without its header is refused (gRPC UNAVAILABLE naming
`triton-grpc-protocol-<key>`, HTTP 403 naming `<key>`), with it the call passes, other groups need
nothing; the flags refuse bad syntax and a group restricted twice; an open repository API under control
mode explicit is one start-up warning (service/api/restrictions.py, docs/service.md)."""

from __future__ import annotations

import http.client
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from protos.modelmesh import model_runtime_pb2 as mm
from protos.modelmesh import model_runtime_pb2_grpc as mm_grpc
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.api.grpc.catalog import counted_methods
from service.api.restrictions import (
    GRPC,
    GRPC_METHOD_GROUPS,
    HTTP,
    HTTP_ROUTE_GROUPS,
    Restriction,
    exposure_warning,
    restriction_table,
)
from service.config import ServerConfig, parse_config
from service.server import BackgroundServer
from tests.support import conversation
from tests.support.kserve import text_input
from tests.support.server import server_config

MODEL, TEXT = conversation.MODEL, "we 7 big."
ADMIN, INFER = ("admin-key", "admin secret"), ("infer-key", "infer-secret")  # (header key, value)
GRPC_SPECS = ["model-repository,modelmesh:admin-key=admin secret", "inference:infer-key=infer-secret"]
HTTP_SPECS = ["model-repository:admin-key=admin secret", "inference:infer-key=infer-secret"]
WARNING = "nothing restricts"


def grpc_header(key: str) -> str:
    """The metadata key Triton's gRPC restriction of `key` checks."""
    return f"triton-grpc-protocol-{key}"


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    """A two-model repository of the default bundle."""
    return conversation.repository(tmp_path_factory.mktemp("restricted"))


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[BackgroundServer]:
    """Control mode explicit, one model loaded, both ports, ModelMesh served; model-repository (and
    modelmesh on gRPC) and inference restricted, each with its own key."""
    config = server_config(conversation.BUNDLE, model_repository=repository, model_control_mode="explicit",
                           load_model=(MODEL,), http_port=0, modelmesh=True,
                           grpc_restricted_protocol=restriction_table(GRPC, GRPC_SPECS),
                           http_restricted_api=restriction_table(HTTP, HTTP_SPECS))
    with BackgroundServer(config) as srv:
        yield srv


@pytest.fixture(scope="module")
def channel(server: BackgroundServer) -> Iterator[grpc.Channel]:
    """A channel to `server`."""
    with grpc.insecure_channel(server.address) as ch:
        yield ch


def _infer_request() -> v2.ModelInferRequest:
    """ModelInfer of one TEXT."""
    request = v2.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1]).contents.bytes_contents.append(TEXT.encode())
    return request


# name -> (call of a channel with metadata, the restriction it needs or None)
GrpcCall = Callable[[grpc.Channel, tuple[tuple[str, str], ...]], Any]
GRPC_CALLS: dict[str, tuple[GrpcCall, tuple[str, str] | None]] = {
    "RepositoryIndex": (lambda ch, md: v2_grpc.GRPCInferenceServiceStub(ch).RepositoryIndex(
        v2.RepositoryIndexRequest(), metadata=md, timeout=60), ADMIN),
    "runtimeStatus": (lambda ch, md: mm_grpc.ModelRuntimeStub(ch).runtimeStatus(
        mm.RuntimeStatusRequest(), metadata=md, timeout=60), ADMIN),
    "ModelInfer": (lambda ch, md: v2_grpc.GRPCInferenceServiceStub(ch).ModelInfer(
        _infer_request(), metadata=md, timeout=60), INFER),
    "Translate": (lambda ch, md: pb_grpc.TranslatorStub(ch).Translate(
        pb.TranslateRequest(texts=[TEXT], model=MODEL), metadata=md, timeout=60), INFER),
    "TranslateStream": (lambda ch, md: list(pb_grpc.TranslatorStub(ch).TranslateStream(
        pb.TranslateStreamRequest(text=TEXT, model=MODEL), metadata=md, timeout=60)), INFER),
    "TranslateDocument": (lambda ch, md: pb_grpc.TranslatorStub(ch).TranslateDocument(
        pb.TranslateDocumentRequest(document=TEXT, format=pb.DOCUMENT_FORMAT_TEXT, model=MODEL), metadata=md,
        timeout=60), INFER),
    "TranslateDocumentStream": (lambda ch, md: list(pb_grpc.TranslatorStub(ch).TranslateDocumentStream(
        pb.TranslateDocumentRequest(document=TEXT, format=pb.DOCUMENT_FORMAT_TEXT, model=MODEL), metadata=md,
        timeout=60)), INFER),
    "ServerLive": (lambda ch, md: v2_grpc.GRPCInferenceServiceStub(ch).ServerLive(
        v2.ServerLiveRequest(), metadata=md, timeout=60), None),
    "ServerMetadata": (lambda ch, md: v2_grpc.GRPCInferenceServiceStub(ch).ServerMetadata(
        v2.ServerMetadataRequest(), metadata=md, timeout=60), None),
    "ModelMetadata": (lambda ch, md: v2_grpc.GRPCInferenceServiceStub(ch).ModelMetadata(
        v2.ModelMetadataRequest(name=MODEL), metadata=md, timeout=60), None),
    "Check": (lambda ch, md: health_pb2_grpc.HealthStub(ch).Check(
        health_pb2.HealthCheckRequest(), metadata=md, timeout=60), None),
    "GetModelInfo": (lambda ch, md: pb_grpc.TranslatorStub(ch).GetModelInfo(
        pb.GetModelInfoRequest(model=MODEL), metadata=md, timeout=60), None),
    "Score": (lambda ch, md: pb_grpc.TranslatorStub(ch).Score(  # its own group, "score": open here
        pb.ScoreRequest(sources=[TEXT], targets=["we seven big."], model=MODEL), metadata=md, timeout=60),
        None),
}
RESTRICTED = [name for name, (_, needs) in GRPC_CALLS.items() if needs is not None]
OPEN = [name for name, (_, needs) in GRPC_CALLS.items() if needs is None]


@pytest.mark.parametrize("name", RESTRICTED)
def test_grpc_refuses_a_restricted_call_without_its_header(channel, name):
    """No header, a wrong value, the HTTP form of the key: UNAVAILABLE naming the header, never the value."""
    call, (key, value) = GRPC_CALLS[name]
    for metadata in ((), ((grpc_header(key), value + "x"),), ((key, value),)):
        with pytest.raises(grpc.RpcError) as refused:
            call(channel, metadata)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, (name, metadata)
        wanted = f"This protocol is restricted, expecting header '{grpc_header(key)}'"
        assert refused.value.details() == wanted
    other = ADMIN if (key, value) == INFER else INFER  # another group's header opens nothing
    with pytest.raises(grpc.RpcError) as refused:
        call(channel, ((grpc_header(other[0]), other[1]),))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("name", RESTRICTED)
def test_grpc_passes_a_restricted_call_with_its_header(channel, name):
    call, (key, value) = GRPC_CALLS[name]
    assert call(channel, ((grpc_header(key), value),))


@pytest.mark.parametrize("name", OPEN)
def test_grpc_unrestricted_groups_need_no_header(channel, name):
    call, _ = GRPC_CALLS[name]
    assert call(channel, ())


def _http(server: BackgroundServer, method: str, path: str, payload: Any = None,
          headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One HTTP request: (status, JSON body)."""
    host, port = server.http_address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        body = None if payload is None else json.dumps(payload)
        sent = {"Content-Type": "application/json"} | (headers or {})
        connection.request(method, path, body=body, headers=sent)
        answer = connection.getresponse()
        raw = answer.read()
        is_json = answer.getheader("Content-Type", "").startswith("application/json")
        return answer.status, json.loads(raw) if is_json else raw
    finally:
        connection.close()


INFER_BODY = {"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": [TEXT]}]}
HTTP_CALLS = [  # (method, path, body, the restriction it needs or None)
    ("POST", "/v2/repository/index", {}, ADMIN),
    ("POST", f"/v2/models/{MODEL}/infer", INFER_BODY, INFER),
    ("POST", f"/v2/models/{MODEL}/versions/1/infer", INFER_BODY, INFER),
    ("POST", f"/v2/models/{MODEL}/generate", {"text_input": TEXT}, INFER),
    ("POST", f"/v2/models/{MODEL}/generate_stream", {"text_input": TEXT}, INFER),
    ("GET", "/v2/health/ready", None, None),
    ("GET", "/v2", None, None),
    ("GET", f"/v2/models/{MODEL}", None, None),
    ("POST", f"/v2/models/{MODEL}/score", {"source": TEXT, "target": "we seven big."}, None),
]


@pytest.mark.parametrize(("method", "path", "payload", "needs"), HTTP_CALLS)
def test_http_restricted_routes_need_their_header(server, method, path, payload, needs):
    """403 `{"error": ...}` naming the header without it (or with a wrong value); 200 with it (any case)."""
    if needs is None:
        assert _http(server, method, path, payload)[0] == 200
        return
    key, value = needs
    refusal = {"error": f"This API is restricted, expecting header '{key}'"}
    for headers in ({}, {key: value + "x"}, {grpc_header(key): value}):
        assert _http(server, method, path, payload, headers) == (403, refusal), headers
    assert _http(server, method, path, payload, {key: value})[0] == 200
    assert _http(server, method, path, payload, {key.upper(): value})[0] == 200  # HTTP names: any case


def test_tritonclient_grpc_passes_the_header_with_headers(server):
    """tritonclient.grpc sends `headers=` as metadata: Triton's prefixed key opens the group."""
    client = triton_grpc.InferenceServerClient(url=server.address)
    try:
        with pytest.raises(InferenceServerException) as refused:
            client.get_model_repository_index()
        assert refused.value.status() == "StatusCode.UNAVAILABLE"
        assert "expecting header 'triton-grpc-protocol-admin-key'" in refused.value.message()
        index = client.get_model_repository_index(headers={grpc_header(ADMIN[0]): ADMIN[1]}, as_json=True)
        assert {m["name"] for m in index["models"]} == {MODEL, conversation.SPARE}
        answer = client.infer(MODEL, [text_input([TEXT])], headers={grpc_header(INFER[0]): INFER[1]})
        assert answer.as_numpy("TRANSLATION").shape == (1,)
        assert client.is_server_live() and client.is_model_ready(MODEL)  # health: open
    finally:
        client.close()


def test_tritonclient_http_passes_the_header_with_headers(server):
    """tritonclient.http sends `headers=` as HTTP headers: the bare key opens the group."""
    client = triton_http.InferenceServerClient(url=server.http_address, network_timeout=60)
    try:
        with pytest.raises(InferenceServerException) as refused:
            client.get_model_repository_index()
        assert (refused.value.status(), refused.value.message()) == (
            "403", "This API is restricted, expecting header 'admin-key'")
        index = client.get_model_repository_index(headers={ADMIN[0]: ADMIN[1]})
        assert {m["name"] for m in index} == {MODEL, conversation.SPARE}
        tensor = triton_http.InferInput("TEXT", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([TEXT.encode()], dtype=np.object_))
        answer = client.infer(MODEL, [tensor], headers={INFER[0]: INFER[1]})
        assert answer.as_numpy("TRANSLATION").shape == (1,)
        assert client.is_server_live() and client.get_server_metadata()["name"]  # health, metadata: open
    finally:
        client.close()


def test_every_call_of_the_server_has_a_group(server):
    """The tables name every RPC the server implements and every HTTP route it serves, with known groups."""
    reflection = "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
    methods = {*counted_methods(modelmesh=True), reflection}
    assert methods == set(GRPC_METHOD_GROUPS)
    assert set(GRPC_METHOD_GROUPS.values()) <= set(GRPC.groups)
    app = server.running.http.runner.app
    assert {r.canonical for r in app.router.resources()} == set(HTTP_ROUTE_GROUPS)
    assert set(HTTP_ROUTE_GROUPS.values()) <= set(HTTP.groups)


# ----- the flags ----------------------------------------------------------------------------------
def test_flags_and_variables_build_the_restriction_tables():
    """Repeated flags add up; the value keeps what follows the first '=' (':' and '=' included); the
    variable holds ';'-separated specs and counts only without the flag."""
    config = parse_config(["--grpc-restricted-protocol", "model-repository,modelmesh:admin-key=a:b=c",
                           "--grpc-restricted-protocol=inference:infer-key=v"],
                          {"TRANSLATOR_GRPC_RESTRICTED_PROTOCOL": "health:h=1",
                           "TRANSLATOR_HTTP_RESTRICTED_API": "model-repository:Admin-Key=x y ; score:s=2"})
    assert config.grpc_restricted_protocol == {"model-repository": Restriction("admin-key", "a:b=c"),
                                               "modelmesh": Restriction("admin-key", "a:b=c"),
                                               "inference": Restriction("infer-key", "v")}
    assert config.http_restricted_api == {"model-repository": Restriction("Admin-Key", "x y"),
                                          "score": Restriction("s", "2")}
    assert "x y" not in repr(config.http_restricted_api)  # values stay out of reprs and logs
    assert parse_config([], {}).grpc_restricted_protocol == {}


@pytest.mark.parametrize(("argv", "env", "message"), [
    (["--grpc-restricted-protocol", "model-repository"], {}, "--grpc-restricted-protocol takes '<protocol>"),
    (["--http-restricted-api", "inference:key"], {}, "--http-restricted-api takes '<api>"),
    (["--http-restricted-api", ":key=s3cret"], {}, "got ':key=...'"),
    (["--grpc-restricted-protocol", "inference:=s3cret"], {}, "got 'inference:=...'"),
    (["--grpc-restricted-protocol", "bogus:k=s3cret"], {}, "unknown restricted protocol 'bogus'"),
    (["--http-restricted-api", "modelmesh:k=s3cret"], {}, "unknown restricted api 'modelmesh'"),
    (["--grpc-restricted-protocol", "health, inference:k=s3cret"], {},
     "unknown restricted protocol ' inference'"),
    (["--grpc-restricted-protocol", "inference:a=s3cret",
      "--grpc-restricted-protocol", "health,inference:b=2"],
     {}, "restricted protocol 'inference' can not be specified in multiple config groups"),
    (["--http-restricted-api", "inference,inference:a=s3cret"], {},
     "restricted api 'inference' can not be specified in multiple config groups"),
    ([], {"TRANSLATOR_HTTP_RESTRICTED_API": "inference:a=s3cret;inference:b=2"},
     "TRANSLATOR_HTTP_RESTRICTED_API: --http-restricted-api: restricted api 'inference' can not be"),
    (["--grpc-restricted-protocol", "health:my key=s3cret"], {}, "the header key 'my key' must be"),
    (["--grpc-restricted-protocol", "health:token-bin=s3cret"], {}, "not end in '-bin'"),
    (["--http-restricted-api", "health:k=s3cret "], {}, "printable ASCII without leading or trailing blanks"),
])
def test_flags_refuse_bad_restrictions(capsys, argv, env, message):
    """A usage error (exit code 2) that says what is wrong and never shows the value."""
    with pytest.raises(SystemExit) as exc:
        parse_config(argv, env)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err, err
    assert "s3cret" not in err


def test_a_config_built_in_code_is_checked_too():
    with pytest.raises(ValueError, match="unknown restricted protocol 'bogus'"):
        ServerConfig(grpc_restricted_protocol={"bogus": Restriction("k", "v")})
    with pytest.raises(ValueError, match="unknown restricted api 'modelmesh'"):
        ServerConfig(http_restricted_api={"modelmesh": Restriction("k", "v")})


# ----- the start-up warning -----------------------------------------------------------------------
def test_the_warning_names_what_is_open():
    """Only the open groups that can change what is served, and only when the control mode lets them."""
    admin = Restriction(*ADMIN)
    assert exposure_warning("none", True, {}, {}) is None
    assert exposure_warning("explicit", True, {"model-repository": admin, "modelmesh": admin},
                            {"model-repository": admin}) is None
    assert exposure_warning("explicit", False, {"model-repository": admin}, None) is None  # HTTP off
    text = exposure_warning("on-demand", True, {"model-repository": admin}, {})
    assert text is not None and "nothing restricts gRPC modelmesh, HTTP model-repository;" in text
    assert "modelmesh" not in str(exposure_warning("explicit", False, {}, None))  # ModelMesh not served
    assert "\n" not in text and ADMIN[1] not in text


def _start_warnings(caplog, config: ServerConfig) -> list[str]:
    """The warnings about open groups that starting (and stopping) a server with `config` logs."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="service.server"), BackgroundServer(config):
        pass
    messages = [r.getMessage() for r in caplog.records if r.name == "service.server"]
    return [m for m in messages if WARNING in m]


def test_an_open_repository_api_is_one_warning_at_start(caplog, repository):
    """Control mode explicit (no model loaded: a quick start), nothing restricted: one line; every
    group that can change what is served restricted: none."""
    config = server_config(conversation.BUNDLE, model_repository=repository, model_control_mode="explicit",
                           http_port=0, modelmesh=True)
    (line,) = _start_warnings(caplog, config)
    assert "nothing restricts gRPC model-repository, gRPC modelmesh, HTTP model-repository;" in line
    restricted = server_config(conversation.BUNDLE, model_repository=repository,
                               model_control_mode="explicit", http_port=0, modelmesh=True,
                               grpc_restricted_protocol=restriction_table(GRPC, GRPC_SPECS),
                               http_restricted_api=restriction_table(HTTP, HTTP_SPECS))
    assert _start_warnings(caplog, restricted) == []
