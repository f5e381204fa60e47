"""What one model version's worker records: its series of the per-model metrics (labels `model`,
`version` bound once) and its Triton statistics (service/ops/statistics.py)."""

from __future__ import annotations

import threading
from collections import Counter

from interface.names import MODEL_NAME
from service.ops import metrics
from service.ops.statistics import ModelStatistics

# live recorders per (model, version): two of one version (a reload's new beside the old) share the
# same series, which go only when the last of them is removed
_live: Counter[tuple[str, str]] = Counter()
_live_lock = threading.Lock()

PER_MODEL = (metrics.QUEUE_TIME, metrics.TIME_TO_FIRST_TOKEN, metrics.TIME_PER_OUTPUT_TOKEN,
             metrics.ENCODER_COMPUTE, metrics.DECODER_STEP, metrics.BATCH_SIZE, metrics.INPUT_TOKENS,
             metrics.OUTPUT_TOKENS, metrics.QUEUE_DEPTH, metrics.ACTIVE_SEQUENCES, metrics.DOCUMENTS,
             metrics.DOCUMENT_SEGMENTS, metrics.SENTENCE_CACHE_HITS, metrics.SENTENCE_CACHE_MISSES,
             metrics.CONSTRAINED_TEXTS, metrics.UNMET_PHRASES, metrics.GLOSSARY_TEXTS,
             metrics.UNMET_GLOSSARY_TERMS)


class ModelMetrics:
    """The recorder a model version's worker and scheduler report to."""

    def __init__(self, model: str = MODEL_NAME, version: str = "1") -> None:
        """Bind the per-model series of `model` / `version` and start empty statistics."""
        self.model, self.version = model, version
        self._removed = False
        with _live_lock:
            _live[model, version] += 1
        labels = {"model": model, "version": version}
        self.stats = ModelStatistics()
        self._queue_time, self._ttft, self._tpot = (m.labels(**labels) for m in PER_MODEL[:3])
        self._encoder, self._step, self._rows = (m.labels(**labels) for m in PER_MODEL[3:6])
        self._input_tokens, self._output_tokens = (m.labels(**labels) for m in PER_MODEL[6:8])
        self._queue_depth, self._active = (m.labels(**labels) for m in PER_MODEL[8:10])
        self._documents, self._segments = (m.labels(**labels) for m in PER_MODEL[10:12])
        self._cache_hits, self._cache_misses = (m.labels(**labels) for m in PER_MODEL[12:14])
        self._constrained, self._unmet = (m.labels(**labels) for m in PER_MODEL[14:16])
        self._glossary_texts, self._unmet_terms = (m.labels(**labels) for m in PER_MODEL[16:18])
        metrics.init_model_request_counts(model, version)

    def admitted(self, waited_s: float, source_tokens: int) -> None:
        """A text left the queue for the batch."""
        self._queue_time.observe(waited_s)
        self._input_tokens.observe(source_tokens)

    def encoded(self, texts: int, seconds: float) -> None:
        """One encoder run of `texts` newcomers."""
        self._encoder.observe(seconds)
        self.stats.record_execution(texts, seconds)

    def scored(self, pairs: int, seconds: float) -> None:
        """One forced-decoding run (Score: service/runtime/decoding/scoring.py) of `pairs` (source, target)
        pairs."""
        self.stats.record_execution(pairs, seconds)

    def stepped(self, seconds: float, rows: int) -> None:
        """One decoder step over `rows` rows, in `seconds`."""
        self._step.observe(seconds)
        self._rows.observe(rows)

    def first_token(self, seconds: float) -> None:
        """A text's first token, `seconds` after its submission."""
        self._ttft.observe(seconds)

    def finished(self, output_tokens: int | None, per_token_s: float | None, required: int = 0,
                 unmet: int = 0) -> None:
        """A text finished: its best hypothesis' length, its mean time per token after the first, and the
        phrases it was required to hold and of them those its best hypothesis lacks."""
        if required:
            self._constrained.inc()
            if unmet:
                self._unmet.inc(unmet)
        if output_tokens is not None:
            self._output_tokens.observe(output_tokens)
        if per_token_s is not None:
            self._tpot.observe(per_token_s)

    def glossary(self, terms: int, unmet: int) -> None:
        """A decoded text held `terms` glossary terms, `unmet` of which its best hypothesis lacks."""
        if terms:
            self._glossary_texts.inc()
            if unmet:
                self._unmet_terms.inc(unmet)

    def documented(self, segments: int) -> None:
        """A document call succeeded, its text cut into `segments` segments."""
        self._documents.inc()
        self._segments.observe(segments)

    def cache_lookups(self, hits: int, misses: int) -> None:
        """Texts of a request looked up in the sentence cache: answered from it, or to decode."""
        if hits:
            self._cache_hits.inc(hits)
        if misses:
            self._cache_misses.inc(misses)

    def gauges(self, queue_depth: int, active: int) -> None:
        """Texts waiting and texts being decoded."""
        self._queue_depth.set(queue_depth)
        self._active.set(active)

    def remove(self) -> None:
        """Drop this model version's series (it was unloaded), unless another live recorder shares them."""
        with _live_lock:
            if self._removed:
                return
            self._removed = True
            _live[self.model, self.version] -= 1
            if _live[self.model, self.version] > 0:
                return
            del _live[self.model, self.version]
        for metric in PER_MODEL:
            try:
                metric.remove(self.model, self.version)
            except KeyError:
                continue
