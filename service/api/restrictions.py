"""Restricted protocol groups: Triton's `--grpc-restricted-protocol` and `--http-restricted-api`.

`<group>[,<group>...]:<key>=<value>` (each flag repeatable) restricts the calls of those groups: a call
proceeds only when the request carries the header with exactly that value. As in Triton the gRPC header is
`triton-grpc-protocol-<key>` (metadata, lower case) and the HTTP header `<key>` (any case); a refused gRPC
call gets UNAVAILABLE "This protocol is restricted, expecting header '<header>'", a refused HTTP request 403
`{"error": "This API is restricted, expecting header '<header>'"}` (the expected value is never echoed). A
group is restricted at most once per protocol; bad syntax is refused at start.

This module is the one home of the group of every gRPC method and HTTP route (`GRPC_METHOD_GROUPS`,
`HTTP_ROUTE_GROUPS`) and of the check (`Gate`); it knows strings only, no protocol library: the gRPC
interceptor (service/api/grpc/interceptor.py) and the HTTP middleware (service/api/http/app.py) pass the
call's name and a header lookup.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

# Triton's groups (restricted_features.h), in its order; shared-memory, trace and logging name no
# endpoint here: accepted so that Triton's command lines carry over, they restrict nothing.
TRITON_GROUPS = ("health", "metadata", "inference", "shared-memory", "model-config", "model-repository",
                 "statistics", "trace", "logging")
SCORE, MODELMESH, MODEL_REPOSITORY = "score", "modelmesh", "model-repository"
KEY_PATTERN = re.compile(r"[A-Za-z0-9_.-]+")  # an HTTP token that is also a valid gRPC metadata key
VALUE_PATTERN = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")  # printable ASCII, no edge blanks

_TRANSLATOR, _KSERVE = "translator.v1.Translator", "inference.GRPCInferenceService"
_MESH = "mmesh.ModelRuntime"
GRPC_METHOD_GROUPS: dict[str, str] = {  # "package.Service/Method" -> group
    **{f"{_KSERVE}/{m}": "health" for m in ("ServerLive", "ServerReady", "ModelReady")},
    **{f"{_KSERVE}/{m}": "metadata" for m in ("ServerMetadata", "ModelMetadata")},
    **{f"{_KSERVE}/{m}": "inference" for m in ("ModelInfer", "ModelStreamInfer")},  # TARGET (scoring) too
    f"{_KSERVE}/ModelConfig": "model-config",
    f"{_KSERVE}/ModelStatistics": "statistics",
    **{f"{_KSERVE}/{m}": MODEL_REPOSITORY
       for m in ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload")},
    "grpc.health.v1.Health/Check": "health", "grpc.health.v1.Health/Watch": "health",
    "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": "metadata",
    **{f"{_TRANSLATOR}/{m}": "inference"
       for m in ("Translate", "TranslateStream", "TranslateDocument", "TranslateDocumentStream")},
    f"{_TRANSLATOR}/GetModelInfo": "metadata", f"{_TRANSLATOR}/Score": SCORE,
    f"{_TRANSLATOR}/Detect": "inference",
    **{f"{_MESH}/{m}": MODELMESH
       for m in ("loadModel", "unloadModel", "predictModelSize", "modelSize", "runtimeStatus")},
}
_MODEL_ROUTES = {"": "metadata", "/ready": "health", "/config": "model-config", "/stats": "statistics",
                 "/infer": "inference", "/generate": "inference", "/generate_stream": "inference",
                 "/score": SCORE, "/document": "inference", "/detect": "inference"}
HTTP_ROUTE_GROUPS: dict[str, str] = {  # the route's path pattern (aiohttp's canonical) -> group
    "/v2": "metadata", "/v2/detect": "inference", "/v2/health/live": "health", "/v2/health/ready": "health",
    "/v2/models/stats": "statistics", "/v2/repository/index": MODEL_REPOSITORY,
    "/v2/repository/models/{model}/load": MODEL_REPOSITORY,
    "/v2/repository/models/{model}/unload": MODEL_REPOSITORY,
    **{prefix + suffix: group for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}")
       for suffix, group in _MODEL_ROUTES.items()},
}


@dataclass(frozen=True)
class Restriction:
    """A group's requirement: the request carries the header of `key` with exactly `value`."""

    key: str
    value: str

    def __repr__(self) -> str:
        """The key only: the value is a secret and stays out of logs and reprs."""
        return f"Restriction(key={self.key!r}, value=<hidden>)"


Restrictions = Mapping[str, Restriction]  # group -> its restriction (unrestricted groups absent)


@dataclass(frozen=True)
class Protocol:
    """What differs between gRPC and HTTP: flag, the noun of messages, header prefix, groups, call table."""

    flag: str
    kind: str  # Triton's word in flag errors ("unknown restricted protocol 'x'")
    noun: str  # in refusals ("This protocol is restricted, ...")
    header_prefix: str
    groups: tuple[str, ...]
    calls: Mapping[str, str]


GRPC = Protocol("--grpc-restricted-protocol", "protocol", "protocol", "triton-grpc-protocol-",
                (*TRITON_GROUPS, SCORE, MODELMESH), GRPC_METHOD_GROUPS)
HTTP = Protocol("--http-restricted-api", "api", "API", "", (*TRITON_GROUPS, SCORE), HTTP_ROUTE_GROUPS)


def header_name(protocol: Protocol, key: str) -> str:
    """The header a restriction of `key` checks: `triton-grpc-protocol-<key>` (gRPC), `<key>` (HTTP)."""
    return protocol.header_prefix + key.lower() if protocol.header_prefix else key


def _shown(spec: str) -> str:
    """A spec as an error message may show it: up to the key, never the value."""
    head, equals, _ = spec.partition("=")
    return f"{head}=..." if equals else head


def check_restriction(protocol: Protocol, group: str, restriction: Restriction) -> None:
    """Raise ValueError unless `group` is known to `protocol` and the key and value can travel as a header."""
    if group not in protocol.groups:
        raise ValueError(f"{protocol.flag}: unknown restricted {protocol.kind} '{group}' "
                         f"(known: {', '.join(protocol.groups)})")
    if not KEY_PATTERN.fullmatch(restriction.key) or restriction.key.lower().endswith("-bin"):
        raise ValueError(f"{protocol.flag}: the header key '{restriction.key}' must be letters, digits, '-', "
                         "'_' and '.', and not end in '-bin' (binary gRPC metadata)")
    if not VALUE_PATTERN.fullmatch(restriction.value):
        raise ValueError(f"{protocol.flag}: the value of header key '{restriction.key}' must be printable "
                         "ASCII without leading or trailing blanks")


def parse_spec(protocol: Protocol, spec: str) -> tuple[list[str], Restriction]:
    """One flag value `<group>[,<group>...]:<key>=<value>` -> (groups, restriction); ValueError if malformed.
    Split as Triton does: at the first ':', then the first '=' after it (the value may hold both)."""
    groups, colon, setting = spec.partition(":")
    key, equals, value = setting.partition("=")
    if not (colon and equals and groups and key and value):
        raise ValueError(f"{protocol.flag} takes '<{protocol.kind}>[,<{protocol.kind}>...]:<key>=<value>', "
                         f"got '{_shown(spec)}'")
    restriction = Restriction(key, value)
    names = groups.split(",")
    for group in names:
        check_restriction(protocol, group, restriction)
    return names, restriction


def restriction_table(protocol: Protocol, specs: Sequence[str]) -> dict[str, Restriction]:
    """The table of a flag's values (each `parse_spec`'s form); ValueError when a group comes twice."""
    table: dict[str, Restriction] = {}
    for spec in specs:
        groups, restriction = parse_spec(protocol, spec)
        for group in groups:
            if group in table:
                raise ValueError(f"{protocol.flag}: restricted {protocol.kind} '{group}' can not be "
                                 "specified in multiple config groups")
            table[group] = restriction
    return table


def check_table(protocol: Protocol, table: Restrictions) -> None:
    """Raise ValueError unless every entry of a ready-made table is valid (ServerConfig built in code)."""
    for group, restriction in table.items():
        if not isinstance(restriction, Restriction):
            raise ValueError(f"{protocol.flag}: group '{group}' maps to {type(restriction).__name__}, "
                             "not a Restriction")
        check_restriction(protocol, group, restriction)


def exposure_warning(control_mode: str, modelmesh: bool, grpc: Restrictions,
                     http: Restrictions | None) -> str | None:
    """The start-up warning when clients can change what is served (control mode explicit or on-demand:
    the repository API, and ModelMesh when served, load and unload) and no restriction guards that, else
    None; `http`: the HTTP table, None when HTTP is off."""
    if control_mode == "none":
        return None
    changing = (MODEL_REPOSITORY, MODELMESH) if modelmesh else (MODEL_REPOSITORY,)
    grpc_open = [group for group in changing if group not in grpc]
    http_open = [MODEL_REPOSITORY] if http is not None and MODEL_REPOSITORY not in http else []
    if not grpc_open and not http_open:
        return None
    named = [f"gRPC {group}" for group in grpc_open] + [f"HTTP {group}" for group in http_open]
    flags = [f"{protocol.flag}={','.join(groups)}:<key>=<value>"
             for protocol, groups in ((GRPC, grpc_open), (HTTP, http_open)) if groups]
    return (f"model control mode {control_mode}: any client that reaches the ports can load and unload "
            f"models, as nothing restricts {', '.join(named)}; restrict them with {' and '.join(flags)} "
            "(docs/deployment.md)")


class Gate:
    """One protocol's restrictions at call time: whether a call, by its name, may proceed."""

    def __init__(self, protocol: Protocol, table: Restrictions) -> None:
        """`table`: group -> restriction (already checked: `check_table`)."""
        self.protocol = protocol
        self._headers = {group: (header_name(protocol, r.key), r.value.encode("ascii"))
                         for group, r in table.items()}

    def __bool__(self) -> bool:
        """Whether anything is restricted (an empty gate need not be consulted)."""
        return bool(self._headers)

    def refusal(self, call: str, header: Callable[[str], str | None]) -> str | None:
        """None when `call` (a gRPC method or HTTP route pattern) may proceed with the headers `header`
        looks up, else the refusal message, naming the header it lacks and never the expected value."""
        group = self.protocol.calls.get(call)
        if group is None or group not in self._headers:
            return None
        name, expected = self._headers[group]
        given = header(name)
        if isinstance(given, str) and hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected):
            return None
        return f"This {self.protocol.noun} is restricted, expecting header '{name}'"
