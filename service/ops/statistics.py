"""Cumulative per-model inference statistics as Triton keeps them (KServe v2 `ModelStatistics`).

A side channel next to the Prometheus metrics (service/ops/metrics.py), module-level and thread-safe: the
scheduler times every request (service/scheduling/timer.py `RequestTimer`), the inference worker
(service/scheduling/worker.py) reports every model execution, and the KServe v2 servicer reads a `snapshot()`.
Both APIs (translator.v1 and KServe v2) count: these are the model's statistics, not one protocol's.

Definitions, following Triton's for a model that batches inside its backend:
- A *request* is one scheduler call: a `Translate` / `ModelInfer` of N texts, or one streamed text.
- `success` / `fail`: requests that ended with results / with an error (invalid text, queue
  full, deadline, cancellation, failed batch), with their total durations from the scheduler
  receiving them to their results being ready. Tensors rejected by the v2 codec never reach it.
- Of successful requests only, split so that the four parts add up to `success`:
  `compute_input` (tokenizing and validating, until queued), `queue` (queued until the first
  text joins the decode batch; a single text's equals its `translator_queue_time_seconds`
  observation), `compute_infer` (first text joined until the last finished: encoder run and
  every decoder step, shared with the rest of the batch as Triton counts a batch's compute for
  each of its requests), `compute_output` (last text finished until the results are back with
  the caller).
- `inference_count`: texts of successful requests (a request of N texts counts N, as Triton
  counts a batch-N request).
- `execution_count`: model executions. An execution is the hand-over of a group of texts to the
  model: one encoder run that admits them into the decode batch (a `translator_encoder_compute_
  seconds` observation). So it is one per batch in `dynamic` mode, one per text in `none` mode,
  and one per group of newcomers joining before a step in `continuous` mode;
  inference_count / execution_count is the mean batch size in Triton's sense.
- `batch_stats`: per execution size (texts admitted together), the executions and their
  encoder time (`compute_infer`); decoder steps are shared between executions and not split.
- `last_inference`: when the last request ended (success or failure), ms since the Unix epoch.
- `cache_hit` / `cache_miss` (the sentence cache, service/scheduling/cache.py, in Triton's terms of its
  response cache): a request whose every text the cache held is a hit, counted in `success` too, with the
  time from its submission to its answer and no `queue` / `compute_*` part, no inference or execution; a
  request with at least one text to decode is a miss, with the time of its lookups and stores (its
  success and parts as for any request, its inference_count the texts it decoded).
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Duration:
    """How often something happened and how long it took in total (nanoseconds)."""

    count: int = 0
    ns: int = 0

    def add(self, seconds: float) -> None:
        """Count one occurrence lasting `seconds` (negative clock noise counts as 0)."""
        self.count += 1
        self.ns += max(0, round(seconds * 1e9))


@dataclass
class Snapshot:
    """The statistics of the model at one moment (a copy: safe to read without the lock)."""

    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    batches: dict[int, Duration] = field(default_factory=dict)  # execution size -> encoder runs
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)


class ModelStatistics:
    """Thread-safe accumulator of one model's statistics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data = Snapshot()

    def record_execution(self, texts: int, seconds: float) -> None:
        """Worker thread: one encoder run admitted `texts` texts into the decode batch."""
        with self._lock:
            self._data.execution_count += 1
            self._data.batches.setdefault(texts, Duration()).add(seconds)

    def record_success(self, texts: int, compute_input: float, queue: float, compute_infer: float,
                       compute_output: float) -> None:
        """A request of `texts` texts succeeded; its four parts in seconds."""
        with self._lock:
            data = self._data
            data.success.add(compute_input + queue + compute_infer + compute_output)
            data.compute_input.add(compute_input)
            data.queue.add(queue)
            data.compute_infer.add(compute_infer)
            data.compute_output.add(compute_output)
            data.inference_count += texts
            data.last_inference_ms = int(time.time() * 1000)

    def record_cache_hit(self, seconds: float) -> None:
        """A request answered wholly from the sentence cache, `seconds` after its submission."""
        with self._lock:
            self._data.success.add(seconds)
            self._data.cache_hit.add(seconds)
            self._data.last_inference_ms = int(time.time() * 1000)

    def record_cache_miss(self, seconds: float) -> None:
        """A request with texts to decode spent `seconds` looking up and storing in the sentence cache."""
        with self._lock:
            self._data.cache_miss.add(seconds)

    def record_failure(self, seconds: float) -> None:
        """A request failed after `seconds`."""
        with self._lock:
            self._data.fail.add(seconds)
            self._data.last_inference_ms = int(time.time() * 1000)

    def snapshot(self) -> Snapshot:
        """A consistent copy of everything recorded so far."""
        with self._lock:
            return copy.deepcopy(self._data)

