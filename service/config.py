"""Server configuration: command-line flags, each with a TRANSLATOR_* environment-variable equivalent.

A flag given on the command line wins over its environment variable, which wins over the default
(`--max-batch-size` <-> `TRANSLATOR_MAX_BATCH_SIZE`). `python -m service.server --help` lists all. Repeatable
flags (`--load-model`, `--grpc-restricted-protocol`, `--http-restricted-api`) add up; their variable counts
only when the flag is not given (restrictions: several specs separated by ';').
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.api.restrictions import GRPC, HTTP, Protocol, Restrictions, check_table, restriction_table
from service.domain.detection import DEFAULT_MIN_CONFIDENCE
from service.domain.types import DEFAULT_MAX_BEAM, BatchingMode
from service.models.repository import ControlMode
from service.runtime.model.sessions import DEFAULT_PROVIDERS

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BUNDLE = REPO_ROOT / "artifacts" / "default" / "bundle"
BATCHING_MODES = tuple(mode.value for mode in BatchingMode)
ENV_PREFIX = "TRANSLATOR_"
CONTROL_MODES = tuple(mode.value for mode in ControlMode)
UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "ki": 2**10, "mi": 2**20, "gi": 2**30}


@dataclass(frozen=True)
class ServerConfig:
    """Everything `service.server.serve` needs; field names match the flags (`--max-batch-size`)."""

    bundle: Path = DEFAULT_BUNDLE
    model_repository: Path | None = None  # Triton's layout (service/models/layout.py); None = --bundle alone
    model_control_mode: str = "none"
    load_model: tuple[str, ...] = ()  # explicit / on-demand: the models loaded at start ("*": all)
    memory_budget: int = 0  # bytes of resident model memory; 0 = no budget
    modelmesh: bool = False  # serve ModelMesh's mmesh.ModelRuntime (only its pod's ModelMesh may reach it)
    host: str = "127.0.0.1"
    port: int = 8001
    http_port: int = 8000  # KServe v2 REST and Triton's generate beside gRPC; 0 = any free port, -1 = off
    http_read_timeout_s: float = 30.0  # longest wait for an HTTP request's body to arrive
    metrics_port: int = 8002  # 0 = any free port, -1 = no metrics endpoint
    metrics_host: str = "127.0.0.1"
    batching: str = "continuous"
    max_batch_size: int = 32
    max_batch_tokens: int = 2048  # 0 = no token budget, rows only
    max_queue_delay_ms: float = 5.0
    queue_size: int = 256
    intra_op_threads: int = 0
    providers: tuple[str, ...] = DEFAULT_PROVIDERS
    provider_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    require_provider: str = ""  # "" = whichever provider loads; else fail start-up unless it runs the model
    variant: str = ""  # "" = the bundle's variant for the provider in use
    max_message_bytes: int = 4 * 1024 * 1024
    max_source_tokens: int = 0  # 0 = the model's limit (bundle max_len)
    max_output_tokens: int = 0  # 0 = the model's limit (bundle max_len - 1)
    max_concurrent_streams: int = 100
    max_connection_age_ms: int = 300_000  # 0 = connections live for ever
    max_connection_age_grace_ms: int = 0  # 0 = calls running when their connection ages out finish
    drain_grace_s: float = 20.0
    watchdog_s: float = 30.0
    max_beam: int = DEFAULT_MAX_BEAM
    max_document_bytes: int = 1 << 20  # largest document of a document call (UTF-8 bytes)
    max_document_sentences: int = 10_000  # most sentences of one document
    sentence_cache_bytes: int = 64 << 20  # LRU of deterministic sentence results; 0 = no cache
    detect_min_confidence: float = DEFAULT_MIN_CONFIDENCE  # source_language auto: floor of a detection
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    port_file: Path | None = None
    log_level: str = "INFO"
    # group -> Restriction (service/api/restrictions.py); parsed from the flags by parse_config
    grpc_restricted_protocol: Restrictions = field(default_factory=dict)
    http_restricted_api: Restrictions = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Reject inconsistent values early, with the flag name in the message."""
        if self.batching not in BATCHING_MODES:
            raise ValueError(f"--batching must be one of {', '.join(BATCHING_MODES)}, got {self.batching!r}")
        if self.model_control_mode not in CONTROL_MODES:
            raise ValueError(f"--model-control-mode must be one of {', '.join(CONTROL_MODES)}, "
                             f"got {self.model_control_mode!r}")
        if self.load_model and self.model_control_mode == "none":
            raise ValueError("--load-model needs --model-control-mode explicit or on-demand "
                             "(under none every model loads)")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key must be given together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS first)")
        check_table(GRPC, self.grpc_restricted_protocol)
        check_table(HTTP, self.http_restricted_api)
        checks = {
            "--port": 0 <= self.port <= 65535,
            "--metrics-port": -1 <= self.metrics_port <= 65535,
            "--http-port": -1 <= self.http_port <= 65535,
            "--http-read-timeout-s": self.http_read_timeout_s > 0,
            "--max-batch-size": self.max_batch_size >= 1,
            "--max-batch-tokens": self.max_batch_tokens >= 0,
            "--max-queue-delay-ms": self.max_queue_delay_ms >= 0,
            "--queue-size": self.queue_size >= 1,
            "--intra-op-threads": self.intra_op_threads >= 0,
            "--max-message-bytes": self.max_message_bytes >= 1024,
            "--max-source-tokens": self.max_source_tokens >= 0,
            "--max-output-tokens": self.max_output_tokens >= 0,
            "--max-concurrent-streams": self.max_concurrent_streams >= 1,
            "--max-connection-age-ms": self.max_connection_age_ms >= 0,
            "--max-connection-age-grace-ms": self.max_connection_age_grace_ms >= 0,
            "--drain-grace-s": self.drain_grace_s >= 0,
            "--watchdog-s": self.watchdog_s > 0,
            "--max-beam": self.max_beam >= 1,
            "--providers": len(self.providers) >= 1,
            "--memory-budget": self.memory_budget >= 0,
            "--max-document-bytes": self.max_document_bytes >= 1,
            "--max-document-sentences": self.max_document_sentences >= 1,
            "--sentence-cache-bytes": self.sentence_cache_bytes >= 0,
            "--detect-min-confidence": 0.0 <= self.detect_min_confidence <= 1.0,
        }
        bad = [flag for flag, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"out-of-range value for {', '.join(bad)}")

    @property
    def address(self) -> str:
        """host:port to bind (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}"

    @property
    def http_host(self) -> str:
        """The host the HTTP server binds (the gRPC one, without brackets)."""
        return self.host.strip("[]")


def _providers(text: str) -> tuple[str, ...]:
    """Comma-separated provider names, blanks dropped."""
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _provider_options(text: str) -> dict[str, dict[str, Any]]:
    """JSON object {provider: {option: value}}."""
    try:
        value = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise argparse.ArgumentTypeError('expected {"ProviderName": {"option": value}}')
    return value


def _bytes(text: str) -> int:
    """A byte count: 4294967296, 4GiB, 512MiB, 2G (decimal), 0 = none."""
    import re

    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmg]i?)?b?\s*", text.lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a byte count: {text!r} (e.g. 4GiB, 512MiB, 2000000000)")
    return int(float(match.group(1)) * UNITS[match.group(2) or ""])


def _switch(text: str) -> bool:
    """On or off: true / false, 1 / 0, yes / no, on / off (any case); a bare flag is on."""
    value = text.strip().lower()
    if value not in ("true", "1", "yes", "on", "false", "0", "no", "off", ""):
        raise argparse.ArgumentTypeError(f"not on or off: {text!r} (true / false)")
    return value in ("true", "1", "yes", "on")


def _names(text: str) -> tuple[str, ...]:
    """Comma-separated model names, blanks dropped."""
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _optional_path(text: str) -> Path | None:
    """A path, or None for the empty string (so an env var can be set empty)."""
    return Path(text) if text else None


# flag, type, help; the default comes from ServerConfig, the env var from the flag name.
_FLAGS: list[tuple[str, Any, str]] = [
    ("--bundle", Path, "model bundle directory (shipped default: artifacts/default/bundle); served as model "
     "'translator' unless --model-repository is given"),
    ("--model-repository", _optional_path, "model repository directory in Triton's layout, "
     "DIR/<model>/<version>/ (docs/service.md); empty = --bundle alone"),
    ("--model-control-mode", str, f"{' | '.join(CONTROL_MODES)}: load every model at start; load "
     "--load-model at start, then through the repository API; besides, load a model on its first request"),
    ("--load-model", _names, "explicit / on-demand: models to load at start, comma-separated or repeated "
     "('*' = all)"),
    ("--memory-budget", _bytes, "most resident memory of the loaded models (e.g. 4GiB); a load beyond it "
     "first unloads the least recently used idle models; 0 = no budget"),
    ("--modelmesh", _switch, "serve KServe ModelMesh's model-runtime interface (mmesh.ModelRuntime: loads, "
     "unloads, sizes by ModelMesh's ids) on the gRPC port; for a ModelMesh Serving pod, whose ModelMesh "
     "container alone may reach that port (docs/deployment.md)"),
    ("--host", str, "address to bind (0.0.0.0 for every interface)"),
    ("--port", int, "gRPC port; 0 = any free port (see --port-file)"),
    ("--http-port", int, "HTTP/REST port (KServe v2 REST, Triton's generate and generate_stream; TLS as for "
     "gRPC); 0 = any free port, -1 = disabled"),
    ("--http-read-timeout-s", float, "HTTP: longest wait for a request body to arrive in full (slow or "
     "short bodies get 408), and for a request's headers on an open connection (closed after)"),
    ("--metrics-port", int, "Prometheus /metrics HTTP port; 0 = any free port, -1 = disabled"),
    ("--metrics-host", str, "address the /metrics endpoint binds (0.0.0.0 for every interface)"),
    ("--batching", str, f"scheduler: {' | '.join(BATCHING_MODES)}"),
    ("--max-batch-size", int, "most texts per request and most rows per model call"),
    ("--max-batch-tokens", int, "texts join the decode batch only while its rows hold at most this many "
     "tokens (source + decoded so far, per row); 0 = no limit"),
    ("--max-queue-delay-ms", float, "dynamic batching: longest wait for a batch to fill"),
    ("--queue-size", int, "most texts waiting; beyond it requests fail with RESOURCE_EXHAUSTED"),
    ("--intra-op-threads", int, "ONNX Runtime intra-op threads (0 = ORT default)"),
    ("--providers", _providers, "comma-separated ONNX Runtime execution providers, in priority order"),
    ("--provider-options", _provider_options, 'JSON, e.g. {"CUDAExecutionProvider": {"device_id": 0}}'),
    ("--require-provider", str, "fail start-up unless this provider (e.g. CUDAExecutionProvider) runs the "
     "model with every compute node placed on it; empty = fall back to the CPU"),
    ("--variant", str, "bundle variant to serve (e.g. fp16, base); empty = the one bundle.json names for "
     "the provider in use"),
    ("--max-message-bytes", int, "largest gRPC message received or sent"),
    ("--max-source-tokens", int, "longest accepted text in tokens incl. eos (0 = the model's max_len)"),
    ("--max-output-tokens", int, "most tokens generated per text (0 = the model's max_len - 1)"),
    ("--max-concurrent-streams", int, "most concurrent calls on one client connection (HTTP/2 streams)"),
    ("--max-connection-age-ms", int, "close client connections after this age (GOAWAY) so clients "
     "reconnect and spread over new replicas; 0 = never"),
    ("--max-connection-age-grace-ms", int,
     "calls still running on a connection past its age get this long (0: they finish, however long)"),
    ("--drain-grace-s", float, "on SIGTERM/SIGINT: seconds for in-flight requests to finish"),
    ("--watchdog-s", float, "a model run longer than this makes health NOT_SERVING and fails its requests "
     "(UNAVAILABLE)"),
    ("--max-beam", int, "largest accepted beam size"),
    ("--max-document-bytes", _bytes, "largest document of a document call, in UTF-8 bytes (e.g. 1MiB); "
     "beyond it INVALID_ARGUMENT / 400 naming the size (docs/documents.md)"),
    ("--max-document-sentences", int, "most sentences of one document; beyond it INVALID_ARGUMENT / 400"),
    ("--sentence-cache-bytes", _bytes, "bytes of the LRU cache of sentence results (deterministic decoding "
     "only; every model and document shares it; docs/documents.md); 0 = no cache"),
    ("--detect-min-confidence", float, "source_language auto: a detected language below this confidence "
     "(0 to 1) is refused, naming it, not guessed; a request's min_language_confidence overrides it "
     "(docs/api.md)"),
    ("--tls-cert", _optional_path, "PEM certificate chain; with --tls-key serves TLS"),
    ("--tls-key", _optional_path, "PEM private key"),
    ("--tls-client-ca", _optional_path, "PEM CA certificate(s): require client certificates signed by it "
     "(mutual TLS; needs --tls-cert)"),
    ("--port-file", _optional_path, "write the bound gRPC port to this file once listening"),
    ("--log-level", str, "DEBUG, INFO, WARNING or ERROR"),
    ("--grpc-restricted-protocol", str, "<protocol>[,<protocol>...]:<key>=<value>, repeatable (Triton's): "
     "calls of these groups need metadata triton-grpc-protocol-<key>: <value>, else UNAVAILABLE; groups: "
     f"{', '.join(GRPC.groups)} (docs/service.md)"),
    ("--http-restricted-api", str, "<api>[,<api>...]:<key>=<value>, repeatable (Triton's): requests of these "
     f"groups need header <key>: <value>, else 403; groups: {', '.join(HTTP.groups)}"),
]
REPEATED = ("--load-model", "--grpc-restricted-protocol", "--http-restricted-api")  # each occurrence adds
RESTRICTIONS = {"--grpc-restricted-protocol": GRPC, "--http-restricted-api": HTTP}


def env_name(flag: str) -> str:
    """Environment variable of a flag: --max-batch-size -> TRANSLATOR_MAX_BATCH_SIZE."""
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def _default_text(value: Any) -> str:
    """A ServerConfig default as the text its flag would take."""
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, dict):
        return json.dumps(value)
    return "" if value is None else str(value)


def build_parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The argument parser; defaults come from `env` (os.environ by default), then ServerConfig."""
    env = os.environ if env is None else env
    defaults = ServerConfig()
    parser = argparse.ArgumentParser(
        prog="python -m service.server",
        description="Serve the translation model over gRPC (translator.v1 and KServe v2), with health, "
        "reflection and Prometheus metrics. Every flag can also be set through the environment "
        "variable shown in brackets.",
    )
    for flag, kind, text in _FLAGS:
        dest = flag.lstrip("-").replace("-", "_")
        # argparse applies `type` to string defaults, so env values are parsed like flag values
        fallback = "" if flag in RESTRICTIONS else _default_text(getattr(defaults, dest))
        default = env.get(env_name(flag), fallback)
        repeated = flag in REPEATED  # each occurrence adds; the env var when none is given
        shown = "set" if flag in RESTRICTIONS and default else default or "none"  # values are secrets
        parser.add_argument(flag, dest=dest, type=kind, default=None if repeated else default,
                            action="append" if repeated else "store",
                            **({"nargs": "?", "const": "true"} if kind is _switch else {}),
                            help=f"{text} [{env_name(flag)}; default: {shown}]" if repeated
                            else f"{text} [{env_name(flag)}; default: %(default)s]")
    return parser


def protocol_dest(protocol: Protocol) -> str:
    """The ServerConfig field of a protocol's restriction flag."""
    return protocol.flag.lstrip("-").replace("-", "_")


def _restrictions(protocol: Protocol, given: list[str] | None, env: Mapping[str, str] | None) -> Restrictions:
    """The restriction table of the flag's occurrences, else of its variable (specs separated by ';')."""
    if given:
        return restriction_table(protocol, given)
    variable = env_name(protocol.flag)
    text = (os.environ if env is None else env).get(variable, "")
    specs = [spec.strip() for spec in text.split(";") if spec.strip()]
    try:
        return restriction_table(protocol, specs)
    except ValueError as exc:
        raise ValueError(f"{variable}: {exc}") from None


def parse_config(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> ServerConfig:
    """ServerConfig from flags and environment; exits with a usage message on bad values."""
    parser = build_parser(env)
    args = parser.parse_args(argv)
    values = vars(args)
    values["batching"] = values["batching"].lower()
    values["log_level"] = values["log_level"].upper()
    values["model_control_mode"] = values["model_control_mode"].lower()
    given = values["load_model"]  # one tuple per --load-model, or None: the environment variable
    env_loads = (os.environ if env is None else env).get(env_name("--load-model"), "")
    values["load_model"] = tuple(n for names in (given or [_names(env_loads)]) for n in names)
    for protocol in RESTRICTIONS.values():
        dest = protocol_dest(protocol)
        try:
            values[dest] = _restrictions(protocol, values[dest], env)
        except ValueError as exc:
            parser.error(str(exc))
    try:
        return ServerConfig(**values)
    except ValueError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits
