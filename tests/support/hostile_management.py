"""Hostile calls of the management surfaces, as hypothesis strategies: Triton's repository API over gRPC and
HTTP (load with bad, huge, deep or non-finite `config`, bad parameter types, Triton's `file:` overrides,
unknown and huge names), ModelMesh's model-runtime calls (bad ids, paths and types), each carrying the
restricted groups' header right or wrong (missing, wrong key, wrong value, duplicated, huge, non-ASCII).

A `Call` is what to send and what the oracle (tests/support/hostile_exchange.py) needs to judge its answer:
the protocol, the call's name, the request, the headers, and the client's own strings a message may quote.
The target server is an `Admin`: its addresses, the restriction's key and value, the model it serves, a
spare model of its repository, the repository folder. Echoed strings come from tests/support/hostile.py's
alphabet (no capitals, '.', '/', '"' or 'x'), besides fixed values that probe paths and limits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

from protos.inference import grpc_service_pb2 as v2
from protos.modelmesh import model_runtime_pb2 as mm
from tests.support.hostile import INT64, _one_of, any_text, echoed

GRPC_PREFIX = "triton-grpc-protocol-"
ROUTES = {"index": "/v2/repository/index", "load": "/v2/repository/models/{model}/load",
          "unload": "/v2/repository/models/{model}/unload"}
HUGE = 9000  # past aiohttp's 8190-byte header field and gRPC's 8 KiB metadata (soft limit); sizes stay off
# those limits by a margin, as the oracle's accounting of them is not byte-exact


@dataclass(frozen=True)
class Admin:
    """The server under test: where it listens and what its repository and restriction are."""

    grpc: str  # host:port
    http: str | None  # host:port, None: HTTP off
    key: str  # the restriction of model-repository (gRPC and HTTP) and modelmesh (gRPC)
    value: str
    model: str  # loaded at start: must serve again after every round
    spare: str  # in the repository, not loaded at start
    root: Path  # the repository folder
    modelmesh: bool = True
    max_message_bytes: int = 4 << 20  # the server's --max-message-bytes (gRPC messages, HTTP bodies)


@dataclass
class Call:
    """One call: protocol, name (a gRPC method or an HTTP route's pattern), request, headers, and the
    client's strings a status message may quote."""

    protocol: str  # "grpc" | "http"
    name: str  # RepositoryModelLoad, loadModel, /v2/repository/models/{model}/load, ...
    request: Any  # a protobuf message (gRPC), or (path, body bytes) (HTTP)
    headers: list[tuple[str, str | bytes]]
    echoed: list[str] = field(default_factory=list)
    model: str | None = None  # the model name the call targets (repository calls)
    parameters: Any = None  # the load parameters as sent (dict, or the JSON value of an HTTP body's)
    mesh_path: str | None = None  # ModelMesh's modelPath

    @property
    def loads(self) -> bool:
        """Whether it is a repository load."""
        return self.name in ("RepositoryModelLoad", ROUTES["load"])

    @property
    def unloads(self) -> bool:
        """Whether it is a repository unload."""
        return self.name in ("RepositoryModelUnload", ROUTES["unload"])

    @property
    def changes(self) -> bool:
        """Whether an OK answer may have changed what is loaded."""
        return self.loads or self.unloads or self.name in ("loadModel", "unloadModel", "runtimeStatus")


# ----- the restriction's header -------------------------------------------------------------------
def header_name(protocol: str, key: str) -> str:
    """The header a restriction of `key` checks: gRPC metadata is prefixed, lower case; HTTP is the key."""
    return GRPC_PREFIX + key.lower() if protocol == "grpc" else key


@st.composite
def headers(draw: st.DrawFn, protocol: str, key: str, value: str) -> list[tuple[str, str | bytes]]:
    """The restriction's header, mostly right; else missing, wrong key or value, duplicated, huge, with a
    huge neighbour, case and blanks changed (HTTP), non-ASCII (HTTP: gRPC clients cannot send it)."""
    name = header_name(protocol, key)
    right = (name, value)
    long = "a" * draw(st.sampled_from([1, 99, 4000, 20_000]))
    wrong_values = [value + "x", value[:-1], "", value.swapcase(), long, value + "a" * HUGE]
    if protocol == "http":
        accented = value + "\u00e9"
        wrong_values += [value.encode() + b"\xff", accented.encode(), accented.encode("latin-1")]
    other_key = key + "-x" if protocol == "http" else GRPC_PREFIX + key + "-x"
    wrong_keys = [other_key, key.replace("-", "_"), GRPC_PREFIX + key if protocol == "http" else key]
    kind = draw(st.sampled_from(["right"] * 6 + ["none", "value", "key", "first right", "first wrong",
                                                  "twice", "neighbour", "variant"]))
    wrong = draw(st.sampled_from(wrong_values))
    chosen: list[tuple[str, str | bytes]] = {
        "right": [right], "none": [], "value": [(name, wrong)],
        "key": [(draw(st.sampled_from(wrong_keys)), value)],
        "first right": [right, (name, wrong)], "first wrong": [(name, wrong), right], "twice": [right, right],
        "neighbour": [("padding", "p" * draw(st.sampled_from([4000, 3 * HUGE]))), right],
    }.get(kind, [])
    if kind == "variant":
        variants = ([(key.upper(), value), (key, f"  {value}\t")] if protocol == "http"
                    else [(name, f" {value}"), (name, value.encode("ascii"))])
        chosen = [draw(st.sampled_from(variants))]
    return chosen


# ----- names, parameters and configs --------------------------------------------------------------
def names(admin: Admin, served: bool) -> st.SearchStrategy[str]:
    """Model names: the spare model (and the served one when `served`), unknown, reserved, path-like,
    too long, any."""
    known = [admin.spare, admin.model] if served else [admin.spare]
    return _one_of(*known, "", "nope", "stats", "..", ".", "-a", "a/b", "../" + admin.spare, "a" * 129,
                   "a" * 20_000, "sp\u00e4re", "spare\x00", admin.spare.upper(), other=echoed)


SETTING_KEYS = ["max_batch_size", "max_batch_tokens", "queue_size", "max_queue_delay_ms", "batching",
                "variant", "version_policy", "unknown"]
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 40), INT64, st.floats(), echoed)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                                  st.dictionaries(echoed, inner, max_size=3)),
                           max_leaves=8)
VALID_CONFIGS = ['{}', '{"max_batch_size": 2}', '{"batching": "continuous"}', '{"queue_size": 16}',
                 '{"max_queue_delay_ms": 1}', '{"version_policy": {"latest": {"num_versions": 1}}}']
ODD_CONFIGS = ['{"max_batch_size": 1e400}', '{"max_queue_delay_ms": NaN}', '{"max_queue_delay_ms": Infinity}',
               '{"max_batch_size": -Infinity}', '{"max_batch_size": ' + "9" * 5000 + '}',
               '{"max_batch_size": 2.5}',
               '{"max_batch_size": true}', '{"batching": null}', '{"variant": "../default"}', '[]', '"{}"',
               'null', '', '{"max_batch_size": 2, "max_batch_size": 3}', '{"version_policy": []}',
               '{"version_policy": {"specific": {"versions": [0, -1, 99]}}}']


def _deep(depth: int, kind: str) -> str:
    """JSON nested `depth` levels: lists, or objects under a settings key."""
    return "[" * depth + "]" * depth if kind == "list" else '{"version_policy": ' * depth + "1" + "}" * depth


configs = st.one_of(
    st.sampled_from(VALID_CONFIGS), st.sampled_from(ODD_CONFIGS),
    st.dictionaries(st.sampled_from(SETTING_KEYS), json_values, max_size=3).map(json.dumps),
    st.builds(_deep, st.integers(2, 5000), st.sampled_from(["list", "object"])),
    st.builds(lambda n: '{"unknown": "' + "a" * n + '"}', st.integers(1000, 200_000)),
    any_text,
)
grpc_values = st.one_of(  # a ModelRepositoryParameter's kind and value; None: no value
    st.tuples(st.just("string_param"), configs), st.tuples(st.just("bool_param"), st.booleans()),
    st.tuples(st.just("int64_param"), INT64), st.tuples(st.just("bytes_param"), st.binary(max_size=64)),
    st.tuples(st.just("bytes_param"), configs.map(str.encode)), st.just((None, None)))
parameter_keys = _one_of("config", "config", "file:1/model.onnx", "file:config.pbtxt", "", "Config",
                         other=echoed)


def _grpc_parameters(target: Any, chosen: dict[str, tuple[str | None, Any]]) -> None:
    """Fill a repository request's parameters map."""
    for key, (kind, value) in chosen.items():
        entry = target[key]
        if kind is not None:
            setattr(entry, kind, value)


def _strings(*values: Any) -> list[str]:
    """The strings among values (and inside dicts), for the oracle's echo list."""
    out: list[str] = []
    for value in values:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, bytes):
            out.append(value.decode("utf-8", "replace"))
        elif isinstance(value, dict):
            out += _strings(*value.keys(), *value.values())
        elif isinstance(value, tuple | list):
            out += _strings(*value)
    return out


# ----- repository calls ---------------------------------------------------------------------------
@st.composite
def grpc_repository_calls(draw: st.DrawFn, admin: Admin) -> Call:
    """RepositoryIndex, RepositoryModelLoad or RepositoryModelUnload over gRPC."""
    name = draw(st.sampled_from(["RepositoryIndex", "RepositoryModelLoad", "RepositoryModelLoad",
                                 "RepositoryModelUnload"]))
    repository = draw(_one_of("", "", "", "models", other=echoed))
    metadata = draw(headers("grpc", admin.key, admin.value))
    if name == "RepositoryIndex":
        request = v2.RepositoryIndexRequest(repository_name=repository, ready=draw(st.booleans()))
        return Call("grpc", name, request, metadata, [repository])
    model = draw(names(admin, served=name.endswith("Load")))
    chosen = draw(st.dictionaries(parameter_keys, grpc_values, max_size=2))
    kind = v2.RepositoryModelLoadRequest if name.endswith("Load") else v2.RepositoryModelUnloadRequest
    request = kind(repository_name=repository, model_name=model)
    _grpc_parameters(request.parameters, chosen)
    parameters = {k: v for k, (_, v) in chosen.items()}
    echo = [repository, model, *_strings(parameters)]
    return Call("grpc", name, request, metadata, echo, model, parameters)


@st.composite
def http_bodies(draw: st.DrawFn, action: str) -> tuple[bytes, Any]:
    """A repository request's body and the JSON value it holds (None when it is no JSON)."""
    if action == "index":
        value = draw(st.one_of(st.just({}), st.fixed_dictionaries({"ready": st.booleans()}),
                               st.fixed_dictionaries({"ready": json_values}), json_values))
    else:
        parameters = st.dictionaries(parameter_keys, st.one_of(configs, json_values), max_size=2)
        value = draw(st.one_of(st.fixed_dictionaries({"parameters": parameters}), st.just({}),
                               st.fixed_dictionaries({"parameters": json_values}), json_values))
    raw = draw(st.sampled_from(["json"] * 8 + ["empty", "broken", "not utf-8"]))
    if raw == "json":
        return json.dumps(value).encode(), value
    return {"empty": b"", "broken": b'{"parameters": {', "not utf-8": b"\xff\xfe{}"}[raw], None


@st.composite
def http_repository_calls(draw: st.DrawFn, admin: Admin) -> Call:
    """POST /v2/repository/index, .../models/{m}/load or .../unload over HTTP."""
    action = draw(st.sampled_from(["index", "load", "load", "unload"]))
    model = None if action == "index" else draw(names(admin, served=action == "load"))
    path = ROUTES[action].replace("{model}", quote(model or "", safe=""))
    body, value = draw(http_bodies(action))
    parameters = value.get("parameters", {}) if isinstance(value, dict) else value
    echo = _strings(value) + ([model] if model is not None else [])
    return Call("http", ROUTES[action], (path, body), draw(headers("http", admin.key, admin.value)), echo,
                model, parameters)


# ----- ModelMesh ----------------------------------------------------------------------------------
def mesh_ids(admin: Admin) -> st.SearchStrategy[str]:
    """ModelMesh model ids: a few good ones, repository names (a shadow), empty, path-like, long, any."""
    return _one_of("m-1", "m-2", admin.spare, admin.model, "", "..", "a/b", "-a", "a" * 129, "a" * 20_000,
                   "m\u00e9", other=echoed)


def mesh_paths(admin: Admin) -> st.SearchStrategy[str]:
    """ModelMesh model paths: the spare model relative and absolute, outside the repository, empty, odd."""
    root = str(admin.root)
    return _one_of(admin.spare, admin.spare, f"{root}/{admin.spare}", f"{root}/../{admin.spare}",
                   f"{admin.spare}/1", f"{admin.spare}/..", "", "/", "..", "nope", root, "~/spare", "/etc",
                   f"{root}/{admin.spare}/1", "spare\x00", admin.model, other=echoed)


@st.composite
def modelmesh_calls(draw: st.DrawFn, admin: Admin) -> Call:
    """One mmesh.ModelRuntime call with hostile ids, paths, types and keys."""
    name = draw(st.sampled_from(["loadModel", "loadModel", "unloadModel", "modelSize", "predictModelSize",
                                 "runtimeStatus"]))
    model_id, path = draw(mesh_ids(admin)), draw(mesh_paths(admin))
    kind, key = draw(_one_of("", "rt", other=any_text)), draw(_one_of("", "{}", other=any_text))
    metadata = draw(headers("grpc", admin.key, admin.value))
    request: Any = {
        "loadModel": lambda: mm.LoadModelRequest(modelId=model_id, modelType=kind, modelPath=path,
                                                 modelKey=key),
        "unloadModel": lambda: mm.UnloadModelRequest(modelId=model_id),
        "modelSize": lambda: mm.ModelSizeRequest(modelId=model_id),
        "predictModelSize": lambda: mm.PredictModelSizeRequest(modelId=model_id, modelType=kind,
                                                               modelPath=path, modelKey=key),
        "runtimeStatus": lambda: mm.RuntimeStatusRequest(),
    }[name]()
    uses_path = name in ("loadModel", "predictModelSize")
    return Call("grpc", name, request, metadata, [model_id, path, kind, key], model_id,
                mesh_path=path if uses_path else None)

