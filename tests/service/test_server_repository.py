"""A server of a model repository (two tiny models), through Triton's own client and translator.v1:
the repository extension, models addressed by name and version, a reload, loads that may lower the
server's limits but never raise them, and an unload while a stream runs."""

from __future__ import annotations

import gc
import json
import shutil
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as triton

from protos.inference import grpc_service_pb2 as v2
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.decoding import best_texts, best_tokens
from tests.support.http import post_json
from tests.support.kserve import text_input, triton_client
from tests.support.metrics import sample
from tests.support.polling import wait_until
from tests.support.repository import link_repository
from tests.support.server import server_config

TEXT = "we 5"


@pytest.fixture(scope="module")
def repository(tmp_path_factory, tiny_bundle: Path) -> Path:
    """DIR/a/1, DIR/b/1 and DIR/b/2: the tiny bundle under three versions of two models."""
    return link_repository(tmp_path_factory.mktemp("repository"), tiny_bundle, (("a", 1), ("b", 1), ("b", 2)),
                           {"b": {"version_policy": {"all": {}}, "max_batch_size": 3}})


@pytest.fixture(scope="module")
def server(repository: Path, tiny_bundle: Path) -> Iterator[BackgroundServer]:
    """Control mode explicit, model `a` loaded at start; HTTP on a free port."""
    config = server_config(tiny_bundle, model_repository=repository, model_control_mode="explicit",
                           load_model=("a",), http_port=0)
    with BackgroundServer(config) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: BackgroundServer) -> Iterator[triton.InferenceServerClient]:
    """tritonclient.grpc, unchanged."""
    with triton_client(server.address) as c:
        yield c


@pytest.fixture(scope="module")
def translator(server: BackgroundServer) -> Iterator[pb_grpc.TranslatorStub]:
    """A translator.v1 stub."""
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.TranslatorStub(channel)


def index(client: triton.InferenceServerClient) -> list[tuple[str, str, str]]:
    """(name, version, state) of every entry of the repository index."""
    return [(m.name, m.version, m.state) for m in client.get_model_repository_index().models]


def test_the_repository_api_through_tritonclient(client, translator, runner: Runner):
    assert index(client) == [("a", "1", "READY"), ("b", "", "UNAVAILABLE")]
    assert client.is_model_ready("a") and client.is_model_ready("a", "1")
    assert not client.is_model_ready("b")
    with pytest.raises(triton.InferenceServerException, match="not loaded"):
        client.infer("b", [text_input([TEXT])])
    client.load_model("b")
    assert index(client) == [("a", "1", "READY"), ("b", "1", "READY"), ("b", "2", "READY")]
    assert client.is_model_ready("b", "1") and client.is_model_ready("b", "2")
    expected = runner.tokenizer.decode(best_tokens(runner, TEXT, DecodeOptions()))
    for name, version in (("a", ""), ("b", "1"), ("b", "2"), ("b", "")):
        result = client.infer(name, [text_input([TEXT])], model_version=version)
        assert result.as_numpy("TRANSLATION").tolist() == [expected.encode()]
        response = result.get_response()
        latest = "1" if name == "a" else "2"
        assert (response.model_name, response.model_version) == (name, version or latest)
    config = client.get_model_config("b").config
    assert config.name == "b" and config.parameters["max_batch_size"].string_value == "3"  # its model.json
    assert list(client.get_model_metadata("b").versions) == ["1", "2"]
    with pytest.raises(grpc.RpcError) as err:  # two loaded: a call must name one
        translator.Translate(pb.TranslateRequest(texts=[TEXT]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "['a', 'b']" in err.value.details()
    reply = translator.Translate(pb.TranslateRequest(texts=[TEXT], model="b", model_version="1"))
    assert reply.results[0].hypotheses[0].text == expected
    info = translator.GetModelInfo(pb.GetModelInfoRequest(model="b"))
    assert info.model_name == "b" and info.limits.max_batch_size == 3
    client.unload_model("b")
    assert index(client)[1][1:] == ("", "UNAVAILABLE")
    reply = translator.Translate(pb.TranslateRequest(texts=[TEXT]))  # one model again: the empty name
    assert reply.results[0].hypotheses[0].text == expected


def test_load_config_overrides_the_models_settings(client):
    client.load_model("b", config=json.dumps({"max_batch_size": 2, "version_policy": {"latest": {}}}))
    try:
        assert [v for n, v, s in index(client) if n == "b"] == ["2"]
        assert client.get_model_config("b").config.parameters["max_batch_size"].string_value == "2"
        with pytest.raises(triton.InferenceServerException, match="unknown settings"):
            client.load_model("b", config=json.dumps({"max_batch": 2}))
        assert client.is_model_ready("b")  # the refused load changed nothing
    finally:
        client.unload_model("b")


def test_a_load_may_lower_the_servers_limits_never_raise_them(client, server):
    """Over gRPC and HTTP, a load's config beyond a flag is refused naming the setting, its value and the
    server's limit (400 / INVALID_ARGUMENT), and changes nothing; one below the flags loads."""
    ready = client.is_model_ready("b")
    limit = server.config.queue_size
    with pytest.raises(triton.InferenceServerException) as err:
        client.load_model("b", config=json.dumps({"queue_size": 1e9}))
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert err.value.message() == ("load parameter 'config': queue_size 1000000000 exceeds this server's "
                                   f"--queue-size {limit}")
    url = f"http://{server.http_address}/v2/repository/models/b/load"
    status, _, body = post_json(url, {"parameters": {"config": json.dumps({"max_queue_delay_ms": 1000})}})
    assert status == 400 and json.loads(body)["error"] == (
        "load parameter 'config': max_queue_delay_ms 1000 exceeds this server's --max-queue-delay-ms "
        f"{server.config.max_queue_delay_ms}")
    assert client.is_model_ready("b") == ready
    client.load_model("b", config=json.dumps({"queue_size": limit // 2, "version_policy": {"latest": {}}}))
    try:
        assert client.get_model_config("b").config.parameters["queue_size"].string_value == str(limit // 2)
    finally:
        client.unload_model("b")


def test_a_load_config_nested_too_deeply_is_invalid_input(client, server):
    """Nesting that defeats Python's recursion limit is the client's error (400 / INVALID_ARGUMENT), never a
    server error, as a JSON string over gRPC and HTTP or as a JSON value in the HTTP body."""
    deep = "[" * 20_000 + "]" * 20_000
    with pytest.raises(triton.InferenceServerException) as err:
        client.load_model("b", config=deep)
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT" and "not readable JSON" in err.value.message()
    url = f"http://{server.http_address}/v2/repository/models/b/load"
    value: list = []
    for _ in range(900):
        value = [value]
    for config in (deep, json.dumps({"version_policy": value}), value):
        status, _, body = post_json(url, {"parameters": {"config": config}})
        assert status == 400, body[:200]


@pytest.mark.parametrize("name", ["..", "../a", "a/../a", "/etc", "b/1"])
def test_names_outside_the_repository_are_refused(client, name):
    with pytest.raises(triton.InferenceServerException) as err:
        client.load_model(name)
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT" and "invalid model name" in err.value.message()
    with pytest.raises(triton.InferenceServerException, match="INVALID_ARGUMENT|invalid model name"):
        client.infer(name, [text_input([TEXT])])


def test_unknown_models_and_repositories_are_not_found(client, server):
    for call in (lambda: client.load_model("nope"), lambda: client.infer("nope", [text_input([TEXT])])):
        with pytest.raises(triton.InferenceServerException) as err:
            call()
        assert err.value.status() == "StatusCode.NOT_FOUND"
    with grpc.insecure_channel(server.address) as channel, pytest.raises(grpc.RpcError) as err:
        v2_grpc.GRPCInferenceServiceStub(channel).RepositoryIndex(v2.RepositoryIndexRequest(repository_name="x"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "unknown model repository 'x'" in err.value.details()


def test_an_unload_lets_a_running_stream_finish(client, translator, runner: Runner):
    client.load_model("b")
    options = pb.TranslateOptions(max_output_tokens=40)
    stream = translator.TranslateStream(pb.TranslateStreamRequest(text=TEXT * 6, options=options, model="b"))
    first = next(stream)
    assert first.HasField("piece")
    unloaded = threading.Thread(target=client.unload_model, args=("b",))
    unloaded.start()
    rest = list(stream)  # the stream in flight completes with its result
    unloaded.join(timeout=60)
    assert not unloaded.is_alive() and rest[-1].HasField("result")
    final = rest[-1].result.hypotheses[0]
    assert "".join(m.piece.text for m in [first, *rest[:-1]]) == final.text
    assert list(final.token_ids) == best_tokens(runner, TEXT * 6, DecodeOptions(max_output_tokens=40))
    with pytest.raises(grpc.RpcError) as err:
        translator.Translate(pb.TranslateRequest(texts=[TEXT], model="b"))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "unloaded through the API" in err.value.details()


def test_an_unloaded_model_leaves_no_runner_session_or_batch_behind(client, server):
    """Unloading frees the memory: after the model served requests, nothing holds its runners, their ONNX
    Runtime sessions or its workers' decode batches any more."""
    client.load_model("b")
    for version in ("1", "2"):
        client.infer("b", [text_input([TEXT])], model_version=version)
    loaded = server.running.models.models["b"].values()
    held = [o for m in loaded for o in (m.runner, m.runner.sessions.encoder, m.runner.sessions.decoder,
                                        m.scheduler._worker.batch)]  # noqa: SLF001 - the worker's batch
    refs = [weakref.ref(o) for o in held]
    kinds = {type(o).__name__ for o in held}
    assert len(refs) == 8 and kinds == {"Runner", "InferenceSession", "DecodeBatch"}
    del held, loaded
    assert sample("translator_model_resident_bytes", model="b", version="2") > 0  # measured at its load
    assert sample("translator_models_loaded") == 3  # versions: a 1, b 1 and b 2
    client.unload_model("b")

    def freed() -> bool:
        gc.collect()
        return all(r() is None for r in refs)

    wait_until(freed, "the unloaded versions' runners, sessions and batches to be freed", timeout=30)
    assert sample("translator_model_resident_bytes", model="b") == 0  # its series went with it
    assert sample("translator_model_unloads_total", model="b", reason="api") >= 1


def test_a_reload_from_a_broken_bundle_keeps_the_old_model_serving(tmp_path, tiny_bundle, runner):
    """The bundle on disk breaks after the load: a reload fails with the reason and the loaded model
    keeps answering, the same translations as before."""
    root = tmp_path / "repo"
    shutil.copytree(tiny_bundle, root / "c" / "1")
    config = server_config(tiny_bundle, model_repository=root, model_control_mode="explicit",
                           load_model=("c",))
    (expected,) = best_texts(runner, [TEXT])
    with BackgroundServer(config) as srv, triton_client(srv.address) as c:
        (root / "c" / "1" / "decoder.onnx").write_bytes(b"not a graph")  # its hash no longer matches
        with pytest.raises(triton.InferenceServerException) as err:
            c.load_model("c")
        assert "decoder.onnx" in err.value.message()
        assert c.is_model_ready("c")
        assert index(c) == [("c", "1", "READY")]
        result = c.infer("c", [text_input([TEXT])])
        assert result.as_numpy("TRANSLATION").tolist() == [expected.encode()]
