"""Prometheus metrics of the service: module-level objects in the default registry.

A side channel: the inference worker (service/scheduling/worker.py) writes the queue, compute and batch
metrics; the servicers call `observe_request` once per RPC. Everything is exposed by `start_metrics_server` on
its own HTTP port (prometheus_client's server thread).

Names (all prefixed `translator_`):
- `requests_total{method, code, protocol, model, version}` counter, `request_latency_seconds{method,
  protocol, model, version}` histogram: per RPC or HTTP request (protocol "grpc" or "http"; HTTP
  requests carry the status name of the same table). `model` / `version` are those of the model that
  served it, as the repository resolved them (`served_by`): NO_MODEL ("") for a call that addresses
  no model or names none that resolves, UNKNOWN_MODEL for a name the repository lacks (an invented
  name never becomes a label value), version "" until a version is chosen. Every method x
  COMMON_CODES exists from start-up with model ""; a loaded model version's series of the methods
  that address a model exist from its load (`init_model_request_counts`).
- `queue_time_seconds`, `time_to_first_token_seconds`, `time_per_output_token_seconds`: per text.
- `encoder_compute_seconds` per encoder call, `decoder_step_seconds` per decoder step.
- `batch_size` (active rows per decoder step), `input_tokens` / `output_tokens` per text.
- `documents_total` counter and `document_segments` histogram: per document call that succeeded.
- `sentence_cache_hits_total` / `sentence_cache_misses_total` counters: texts looked up in the sentence
  cache (service/scheduling/cache.py), answered from it or decoded.
- `queue_depth`, `active_sequences` gauges; `model_info` (provider, batching mode, variant).
  These carry `model` and `version` labels: each loaded model version records its own series
  (service/ops/model_metrics.py).
- The repository: `models_loaded`, `model_resident_bytes{model, version}`,
  `model_loads_total{model, result}`, `model_unloads_total{model, reason}`,
  `model_load_seconds{model}`. A model version's `model_info`, `model_resident_bytes` and per-model
  series above exist while the repository serves it: set as it starts serving (a reload of the same
  version keeps them, with the new copy's values), removed once its unloaded or evicted copy has
  closed and no copy of that version is served.
- `detected_languages_total{model, language}` counter: source languages detected and used (source_language
  "auto"), by the model's code; a detect call that names no model counts under model "" by the detector's
  code (its 176 languages bound the labels).
- The sentence cache, one per server (no labels): `sentence_cache_bytes`, `sentence_cache_entries` gauges.
Time histograms use millisecond-suited buckets from 0.5 ms to 10 s.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram, Info, start_http_server

TIME_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = tuple(float(2**i) for i in range(9))  # 1, 2, 4, ..., 256
TOKEN_BUCKETS = tuple(float(2**i) for i in range(11))  # 1, 2, 4, ..., 1024

MODEL_LABELS = ("model", "version")  # the per-model series (service/ops/model_metrics.py)
REQUESTS = Counter("translator_requests_total",
                   "Requests answered, by method, status code (gRPC's names, HTTP's too), protocol, and "
                   "the model and version that served them.",
                   ["method", "code", "protocol", *MODEL_LABELS])
REQUEST_LATENCY = Histogram("translator_request_latency_seconds", "End-to-end request latency.",
                            ["method", "protocol", *MODEL_LABELS], buckets=TIME_BUCKETS)
PROTOCOLS = ("grpc", "http")  # the `protocol` label: how the request came
NO_MODEL = ""  # model label of a call that addresses no model, or names none that resolves
UNKNOWN_MODEL = "(unknown)"  # model label of a request naming a model the repository lacks (no valid name)
QUEUE_TIME = Histogram("translator_queue_time_seconds", "Time a text waited in the queue before decoding.",
                       MODEL_LABELS, buckets=TIME_BUCKETS)
TIME_TO_FIRST_TOKEN = Histogram("translator_time_to_first_token_seconds",
                                "From submission to the first generated token, per text.",
                                MODEL_LABELS, buckets=TIME_BUCKETS)
TIME_PER_OUTPUT_TOKEN = Histogram("translator_time_per_output_token_seconds",
                                  "Mean time between generated tokens after the first, per text.",
                                  MODEL_LABELS, buckets=TIME_BUCKETS)
ENCODER_COMPUTE = Histogram("translator_encoder_compute_seconds", "One encoder run (all newcomers at once).",
                            MODEL_LABELS, buckets=TIME_BUCKETS)
DECODER_STEP = Histogram("translator_decoder_step_seconds", "One decoder step of the whole batch.",
                         MODEL_LABELS, buckets=TIME_BUCKETS)
BATCH_SIZE = Histogram("translator_batch_size", "Active rows per decoder step (a beam-k text has k rows).",
                       MODEL_LABELS, buckets=BATCH_BUCKETS)
INPUT_TOKENS = Histogram("translator_input_tokens", "Source tokens per text (incl. eos).",
                         MODEL_LABELS, buckets=TOKEN_BUCKETS)
OUTPUT_TOKENS = Histogram("translator_output_tokens", "Generated tokens of the best hypothesis per text.",
                          MODEL_LABELS, buckets=TOKEN_BUCKETS)
QUEUE_DEPTH = Gauge("translator_queue_depth", "Texts waiting in the scheduler queue.", MODEL_LABELS)
ACTIVE_SEQUENCES = Gauge("translator_active_sequences", "Texts being decoded.", MODEL_LABELS)
DOCUMENTS = Counter("translator_documents_total", "Documents translated whole (calls that succeeded).",
                    MODEL_LABELS)
SEGMENT_BUCKETS = tuple(float(4**i) for i in range(8))  # 1, 4, 16, ..., 16384
DOCUMENT_SEGMENTS = Histogram("translator_document_segments", "Segments (sentences sent) per document.",
                              MODEL_LABELS, buckets=SEGMENT_BUCKETS)
SENTENCE_CACHE_HITS = Counter("translator_sentence_cache_hits_total",
                              "Texts answered from the sentence cache, not decoded.", MODEL_LABELS)
SENTENCE_CACHE_MISSES = Counter("translator_sentence_cache_misses_total",
                                "Texts looked up in the sentence cache and decoded.", MODEL_LABELS)
CONSTRAINED_TEXTS = Counter("translator_constrained_texts_total",
                            "Texts decoded with required phrases (constrained beam search).", MODEL_LABELS)
UNMET_PHRASES = Counter("translator_unmet_required_phrases_total",
                        "Required phrases missing from a best translation (no room within its max length).",
                        MODEL_LABELS)
DETECTED_LANGUAGES = Counter("translator_detected_languages_total",
                             "Source languages detected and used, by model and language (the model's code).",
                             ["model", "language"])
GLOSSARY_TEXTS = Counter("translator_glossary_texts_total",
                         "Texts holding glossary terms (applied as required phrases).", MODEL_LABELS)
UNMET_GLOSSARY_TERMS = Counter("translator_unmet_glossary_terms_total",
                               "Glossary terms a text held that its best translation lacks (no room, or "
                               "not placeable: sampling, more terms than a text may require).", MODEL_LABELS)
SENTENCE_CACHE_BYTES = Gauge("translator_sentence_cache_bytes", "Bytes held by the server's sentence cache.")
SENTENCE_CACHE_ENTRIES = Gauge("translator_sentence_cache_entries", "Results held by the sentence cache.")
MODEL = Info("translator_model", "A loaded model version: provider, batching mode, variant.", MODEL_LABELS)
# the model repository (service/models/repository.py)
MODELS_LOADED = Gauge("translator_models_loaded", "Model versions loaded.")
MODEL_RESIDENT_BYTES = Gauge("translator_model_resident_bytes",
                             "Memory charged to a model version: what it holds serving (docs/service.md).",
                             MODEL_LABELS)
MODEL_LOADS = Counter("translator_model_loads_total", "Model loads, by model and result (ok, failed).",
                      ["model", "result"])
MODEL_UNLOADS = Counter("translator_model_unloads_total",
                        "Model unloads, by model and reason (api, evicted, reload, shutdown, budget).",
                        ["model", "reason"])
MODEL_LOAD_SECONDS = Histogram("translator_model_load_seconds", "Time to load a model (all its versions).",
                               ["model"], buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 60.0, 120.0))

# Status codes whose request series exist from start-up for every method (init_request_counts).
COMMON_CODES = ("OK", "CANCELLED", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "RESOURCE_EXHAUSTED",
                "INTERNAL", "UNAVAILABLE")

_servers_lock = threading.Lock()
_servers: list = []  # (server, thread) pairs started by start_metrics_server
_model_methods: dict[str, tuple[str, ...]] = {}  # protocol -> the methods that address a model
_model_versions: set[tuple[str, str]] = set()  # (model, version) of init_model_request_counts
_model_methods_lock = threading.Lock()


@dataclass
class RequestModel:
    """The model and version a request was served by: its request series' `model` / `version` labels."""

    model: str = NO_MODEL
    version: str = ""


_request_model: ContextVar[RequestModel | None] = ContextVar("translator_request_model", default=None)


def start_request() -> RequestModel:
    """The labels of the request this context (its task, and tasks it starts) runs: the gRPC interceptor
    and the HTTP middleware open them, `served_by` fills them, the opener records them."""
    labels = RequestModel()
    _request_model.set(labels)
    return labels


def served_by(model: str, version: str = "") -> None:
    """Label the running request (if any) with the model (version) that serves it: the repository calls
    this with bounded values only (its models, NO_MODEL, UNKNOWN_MODEL)."""
    labels = _request_model.get()
    if labels is not None:
        labels.model, labels.version = model, version


def observe_request(method: str, code: str, seconds: float, protocol: str = "grpc", model: str = NO_MODEL,
                    version: str = "") -> None:
    """Count one answered request (code: a gRPC status name such as "OK", for HTTP requests too: the
    name of the same table's row) and record its latency; protocol "grpc" or "http"; the model and
    version that served it."""
    labels = {"method": method, "protocol": protocol, "model": model, "version": version}
    REQUESTS.labels(code=code, **labels).inc()
    REQUEST_LATENCY.labels(**labels).observe(seconds)


def init_request_counts(methods: Iterable[str], codes: Iterable[str] = COMMON_CODES,
                        protocol: str = "grpc", model_methods: Iterable[str] = ()) -> None:
    """Create the `requests_total` series of every method x code at 0 (model ""), so that Prometheus'
    rate() and increase() see the first call of each (a series born at 1 has no earlier sample to
    differ from); `model_methods`, those that address a model, get each loaded model's series too."""
    codes = tuple(codes)
    for method in methods:
        for code in codes:
            REQUESTS.labels(method=method, code=code, protocol=protocol, model=NO_MODEL, version="")
    with _model_methods_lock:
        _model_methods[protocol] = tuple(model_methods)
        loaded = sorted(_model_versions)
    for model, version in loaded:  # models loaded before this protocol's methods were known
        _init_model_series(protocol, tuple(model_methods), model, version)


def init_model_request_counts(model: str, version: str) -> None:
    """Create a loaded model version's `requests_total` series of the methods that address a model, x
    COMMON_CODES, at 0 (they stay after its unload: the last calls' counts are not lost)."""
    with _model_methods_lock:
        _model_versions.add((model, version))
        chosen = list(_model_methods.items())
    for protocol, methods in chosen:
        _init_model_series(protocol, methods, model, version)


def _init_model_series(protocol: str, methods: tuple[str, ...], model: str, version: str) -> None:
    """The zero series of one model version for `methods` x COMMON_CODES."""
    for method in methods:
        for code in COMMON_CODES:
            REQUESTS.labels(method=method, code=code, protocol=protocol, model=model, version=version)


def set_model_series(model: str, version: str, resident_bytes: int, info: Mapping[str, str]) -> None:
    """Set the repository's series of a model version it starts serving: `model_resident_bytes`, and
    `model_info` when `info` (provider, batching, variant) is given."""
    MODEL_RESIDENT_BYTES.labels(model=model, version=version).set(resident_bytes)
    if info:
        MODEL.labels(model=model, version=version).info(dict(info))


def remove_model_series(model: str, version: str) -> None:
    """Remove the series `set_model_series` set (the repository serves that model version no more)."""
    for metric in (MODEL_RESIDENT_BYTES, MODEL):
        with contextlib.suppress(KeyError):
            metric.remove(model, version)


def start_metrics_server(port: int, host: str = "0.0.0.0") -> int:
    """Serve /metrics over HTTP in a daemon thread; returns the bound port (useful with port 0)."""
    started = start_http_server(port, addr=host)
    if isinstance(started, tuple):  # prometheus_client >= 0.20 returns (server, thread)
        server = started[0]
        with _servers_lock:
            _servers.append(started)
        return int(server.server_port)
    return port  # older versions return None: only a fixed port is known


def stop_metrics_servers() -> None:
    """Shut down every HTTP server started by start_metrics_server (tests, clean shutdown)."""
    with _servers_lock:
        servers, _servers[:] = list(_servers), []
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5.0)


def histogram_count(histogram: Histogram, **labels: str) -> float:
    """Number of observations of a histogram (of one label set if given); for tests and tools."""
    return _sample(histogram, "_count", labels)


def histogram_sum(histogram: Histogram, **labels: str) -> float:
    """Sum of the observations of a histogram (of one label set if given)."""
    return _sample(histogram, "_sum", labels)


def counter_value(counter: Counter, **labels: str) -> float:
    """Current value of a counter (of one label set if given)."""
    return _sample(counter, "_total", labels)


def _sample(metric: Counter | Histogram, suffix: str, labels: dict[str, str]) -> float:
    """Sum of a metric's samples with the given name suffix whose labels include `labels`."""
    total = 0.0
    for family in metric.collect():
        for s in family.samples:
            if s.name.endswith(suffix) and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total
