"""A server of a model repository on demand under a memory budget, through Triton's own clients
(tritonclient.grpc and .http): a first request gets the model its load brought though another load would
evict it, a failing model is refused with its reason until its backoff passes or an explicit load, and a
model version's metric series follow its reloads, unloads and evictions. The server's loader is wrapped
to count loads, hold one at a gate, fail, and charge each load a fixed size (the budget's arithmetic)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as triton
from prometheus_client import REGISTRY
from tritonclient.utils import InferenceServerException

from service.config import DEFAULT_BUNDLE
from service.models.budget import files_bytes
from service.models.layout import ModelSettings
from service.models.served import Loader, ServedModel
from service.server import BackgroundServer
from tests.support.http import text_input as http_text_input
from tests.support.http import triton_http_client
from tests.support.kserve import text_input, triton_client
from tests.support.polling import wait_until
from tests.support.repository import MIB, link_repository
from tests.support.server import server_config

TEXT = "we 5"
CHARGE = 100 * MIB  # what each load of the on-demand server is charged (the counting loader sets it)
SECRET = "/srv/secret/path: ONNX Runtime's own words"  # a loader exception's text: never a client's


class CountingLoader:
    """The server's loader, counted per model; a model's load waits for its gate (an asyncio.Event set on
    the server's loop) and fails while `failing` holds it; every load is charged `charge` bytes."""

    def __init__(self, real: Loader) -> None:
        """Wrap `real`: no gate, nothing failing."""
        self.real, self.calls, self.charge = real, [], CHARGE
        self.gates: dict[str, asyncio.Event] = {}
        self.failing: set[str] = set()

    async def __call__(self, name: str, version: int, path: Path, settings: ModelSettings,
                       known: int | None = None) -> ServedModel:
        """The real load, once the gate (if any) opens."""
        self.calls.append(name)
        if (gate := self.gates.get(name)) is not None:
            await gate.wait()
        if name in self.failing:
            raise RuntimeError(SECRET)
        model = await self.real(name, version, path, settings, known)
        model.resident_bytes = self.charge
        return model


class FakeClock:
    """The backoff's clock, moved by the test."""

    def __init__(self) -> None:
        """At 1000 s."""
        self.now = 1000.0

    def __call__(self) -> float:
        """The time now."""
        return self.now


def unreadable_copy(bundle: Path, folder: Path) -> Path:
    """A copy of `bundle` in `folder` whose encoder.onnx ONNX Runtime cannot parse, its hash matching."""
    shutil.copytree(bundle, folder)
    garbage = b"not an ONNX graph"
    (folder / "encoder.onnx").write_bytes(garbage)
    manifest = json.loads((folder / "bundle.json").read_text())
    manifest["files"]["encoder.onnx"] = {"sha256": hashlib.sha256(garbage).hexdigest(), "bytes": len(garbage)}
    (folder / "bundle.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture(scope="module")
def on_demand(tmp_path_factory) -> Iterator[BackgroundServer]:
    """Control mode on-demand, models `lazy-a` and `lazy-b` (the default bundle) and `lazy-bad` (one that
    ONNX Runtime refuses), a memory budget that holds one CHARGE and less than half a bundle's files
    more; HTTP on a free port."""
    root = link_repository(tmp_path_factory.mktemp("on-demand"), DEFAULT_BUNDLE,
                           (("lazy-a", 1), ("lazy-b", 1)))
    unreadable_copy(DEFAULT_BUNDLE, root / "lazy-bad" / "1")
    config = server_config(DEFAULT_BUNDLE, model_repository=root, model_control_mode="on-demand",
                           memory_budget=CHARGE + files_bytes(DEFAULT_BUNDLE) // 2, http_port=0)
    with BackgroundServer(config) as srv:
        yield srv


@pytest.fixture
def counted(on_demand: BackgroundServer) -> Iterator[tuple[CountingLoader, FakeClock]]:
    """The on-demand server's loader counted and its backoff on a fake clock; everything unloaded after."""
    repo = on_demand.running.models
    loader, clock, real_clock = CountingLoader(repo.loader), FakeClock(), repo.failures.clock
    repo.loader, repo.failures.clock = loader, clock
    try:
        yield loader, clock
    finally:
        repo.loader, repo.failures.clock = loader.real, real_clock
        for name in list(repo.models):
            on_demand.call(repo.unload(name))
        repo.failures.failures.clear()
        wait_until(lambda: not repo._closing, "the unloaded models to close")


def translate(address: str, name: str) -> list[bytes] | triton.InferenceServerException:
    """A model's translation of TEXT through tritonclient.grpc, or the exception the client raised."""
    with triton_client(address) as c:
        try:
            return c.infer(name, [text_input([TEXT])]).as_numpy("TRANSLATION").tolist()
        except triton.InferenceServerException as exc:
            return exc


def test_a_first_request_gets_the_model_its_load_brought_though_a_load_would_evict_it(on_demand, counted):
    """lazy-a's load ends while lazy-b's first request waits for the repository: lazy-b's load runs before
    lazy-a's request resumes and, lazy-a being idle, would evict it. lazy-a's request still gets lazy-a
    (its load leased it), lazy-b is refused (RESOURCE_EXHAUSTED), and loads once lazy-a is idle."""
    loader, _ = counted
    repo = on_demand.running.models
    loader.gates["lazy-a"] = gate = asyncio.Event()
    answers: dict[str, object] = {}

    def ask(name: str) -> None:
        answers[name] = translate(on_demand.address, name)

    first = threading.Thread(target=ask, args=("lazy-a",))
    first.start()
    wait_until(lambda: loader.calls == ["lazy-a"], "lazy-a's load to start")
    second = threading.Thread(target=ask, args=("lazy-b",))
    second.start()
    wait_until(lambda: "lazy-b" in repo._loading, "lazy-b's load to wait for lazy-a's")
    on_demand.loop().call_soon_threadsafe(gate.set)
    first.join(60)
    second.join(60)
    refused = answers["lazy-b"]
    assert isinstance(refused, triton.InferenceServerException), refused
    assert refused.status() == "StatusCode.RESOURCE_EXHAUSTED" and "memory budget" in refused.message()
    expected = translate(on_demand.address, "lazy-b")  # lazy-a is idle now: it makes room
    assert isinstance(expected, list) and answers["lazy-a"] == expected
    assert loader.calls.count("lazy-a") == 1 and sorted(repo.models) == ["lazy-b"]
    assert "evicted" in dict((e.name, e.reason) for e in repo.index())["lazy-a"]


def test_a_failing_model_is_refused_with_its_reason_until_its_backoff_passes(on_demand, counted):
    """Through tritonclient.grpc and .http: a failing model is loaded once, then refused at once
    (UNAVAILABLE / 503) with its reason and when it is tried again; the next request after the backoff
    loads again (and the wait doubles), an explicit load tries at once. No answer holds the loader's text."""
    loader, clock = counted
    loader.failing.add("lazy-a")
    first = translate(on_demand.address, "lazy-a")
    assert isinstance(first, triton.InferenceServerException) and first.status() == "StatusCode.UNAVAILABLE"
    message = first.message()
    pattern = (r"model 'lazy-a' is not loaded \(load failed: internal error \(error id \w+; details in "
               r"the server log\)\); its load failed once: a request loads it again in 1\.0 s, a load "
               r"through the repository API at once")
    assert re.fullmatch(pattern, message), message
    for _ in range(3):
        again = translate(on_demand.address, "lazy-a")
        assert isinstance(again, triton.InferenceServerException) and again.message() == message
    with triton_http_client(on_demand.http_address) as http, pytest.raises(InferenceServerException) as err:
        http.infer("lazy-a", [http_text_input([TEXT], binary=False)])
    assert err.value.status() == "503" and err.value.message() == message
    assert loader.calls == ["lazy-a"]
    clock.now += 1.0
    second = translate(on_demand.address, "lazy-a")
    assert isinstance(second, triton.InferenceServerException) and loader.calls == ["lazy-a"] * 2
    assert "its load failed 2 times in a row: a request loads it again in 2.0 s" in second.message()
    with triton_client(on_demand.address) as c:
        with pytest.raises(triton.InferenceServerException) as explicit:
            c.load_model("lazy-a")
        assert loader.calls == ["lazy-a"] * 3
        assert "internal error (error id" in explicit.value.message()
        third = translate(on_demand.address, "lazy-a")
        assert isinstance(third, triton.InferenceServerException) and loader.calls == ["lazy-a"] * 3
        assert "failed 3 times in a row: a request loads it again in 4.0 s" in third.message()
        reasons = [m.reason for m in c.get_model_repository_index().models if m.name == "lazy-a"]
        loader.failing.clear()
        c.load_model("lazy-a")
    answers = [first, second, explicit.value, third]
    assert all(SECRET not in str(a) for a in answers) and all(SECRET not in r for r in reasons)
    assert isinstance(translate(on_demand.address, "lazy-a"), list) and loader.calls == ["lazy-a"] * 4


def series(name: str, model: str) -> dict[str, float]:
    """The samples of metric `name` of `model` in this process's registry, by version label."""
    return {s.labels["version"]: s.value for family in REGISTRY.collect() for s in family.samples
            if s.name == name and s.labels.get("model") == model}


PER_VERSION = ("translator_model_resident_bytes", "translator_model_info", "translator_queue_depth",
               "translator_active_sequences")


def test_a_model_versions_series_follow_reload_unload_and_eviction(on_demand, counted):
    """A reload of the same version keeps its series, with the new copy's values, after the old copy
    closed; an unload and an eviction remove them once the copy has closed."""
    loader, _ = counted
    repo = on_demand.running.models

    def closed() -> None:
        wait_until(lambda: not repo._closing, "the retired copies to close")

    with triton_client(on_demand.address) as c:
        c.load_model("lazy-a")
        assert series("translator_model_resident_bytes", "lazy-a") == {"1": CHARGE}
        loader.charge = CHARGE - MIB
        c.load_model("lazy-a")  # the same version again: the old copy closes after the switch
        closed()
        assert series("translator_model_resident_bytes", "lazy-a") == {"1": CHARGE - MIB}
        assert all(series(name, "lazy-a").keys() == {"1"} for name in PER_VERSION)
        c.unload_model("lazy-a")
        closed()
        assert all(series(name, "lazy-a") == {} for name in PER_VERSION)
        c.load_model("lazy-a")
        c.load_model("lazy-b")  # no room beside lazy-a: it is evicted
        closed()
        assert sorted(repo.models) == ["lazy-b"]
        assert all(series(name, "lazy-a") == {} for name in PER_VERSION)
        assert all(series(name, "lazy-b").keys() == {"1"} for name in PER_VERSION)


def test_no_answer_holds_onnx_runtimes_own_text_of_a_failed_load(on_demand, counted):
    """ONNX Runtime refuses a file whose hash matched: the request (UNAVAILABLE), the explicit load
    (INTERNAL) and the index name the exception's type and an error id, never its text (paths, codes)."""
    with triton_client(on_demand.address) as c:
        request = translate(on_demand.address, "lazy-bad")
        assert isinstance(request, triton.InferenceServerException)
        assert request.status() == "StatusCode.UNAVAILABLE"
        with pytest.raises(triton.InferenceServerException) as load:
            c.load_model("lazy-bad")
        assert load.value.status() == "StatusCode.INTERNAL"
        (reason,) = [m.reason for m in c.get_model_repository_index().models if m.name == "lazy-bad"]
    why = r"cannot load the model of bundle \S+: InvalidProtobuf \(error id \w+; details in the server log\)"
    assert re.search(f"^model 'lazy-bad' is not loaded \\(load failed: {why}\\); its load failed once",
                     request.message()), request.message()
    assert re.fullmatch(why, load.value.message()) and re.fullmatch(f"load failed: {why}", reason)
    for text in (request.message(), load.value.message(), reason):  # the raw text names the file and why
        assert "encoder.onnx" not in text and "parsing failed" not in text and "INVALID_PROTOBUF" not in text
