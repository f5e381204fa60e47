"""Scoring (source, target) pairs by forced decoding: each target token's log-prob given the source and the
tokens before it, as CTranslate2's `score_batch` and transformers' teacher-forced log-probs.

A pair becomes a `ScoreRequest` (`score_requests`): the source ids as a translation's (language prefix +
tokenizer ids + suffix), the target's ids from the model's target tokenizer, and the tokens fed but not scored
(a many-to-many model's target language: its forced first token, whose own log-prob is not counted, as a
translation's log_prob leaves it out). The decoder reads [start, *forced, *target[:-1]] and position j's
`logprobs` (the graph's log_softmax of the logits, no bundle rules applied) give log P(sequence[j + 1] |
source, sequence[:j + 1]).

The end token (`end_target`): a translation generates at most max_len - 1 tokens
(ModelSpec.max_output_tokens), a forced target language, a target prefix and eos all counted; a hypothesis
holds them less its eos. So a target of `most` = max_len - 1 - len(forced) tokens is what a translation cut at
the maximum length returns (finish_reason "length", no eos): it is scored as it is. A shorter target gets eos
appended and scored, as CTranslate2's score_batch appends its end token and as a finished hypothesis ended; a
longer one no translation can give, and is refused.

`Scorer` runs a set of requests in chunks of similar target length (at most max_rows pairs, and a bounded
number of source tokens): one encoder run, then the decoder over the targets, right-padded (causal
self-attention keeps a row's padding unseen by its real tokens), in windows of positions with the
self-attention cache carried from window to window, as a translation decodes. A decoder run covers at most
`run_tokens` rows x positions, and keeps of its (rows, positions, vocabulary) log-probs only each position's
log-prob of the token it predicts: a run's time and memory are bounded whatever the pairs, and a Score call is
a series of such runs (`ScoreWork`, which the worker interleaves with its decode steps). Modes: "windows",
as many positions per run as `run_tokens` allows (new_len > 1: interface/names.py); "steps", one position per
run. Both give the same numbers. "auto" (the default) takes "windows" for a concatenated cache and "steps" for
an in-place one: ONNX Runtime's GroupQueryAttention, the in-place decoder's attention, takes several new
tokens only for a batch of one row (docs/performance.md compares the modes). The tensors live in the
backend's memory, so both backends run it; a run never touches a DecodeBatch.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from interface.names import (
    ATTENTION_MASK,
    ENCODER_ATTENTION_MASK,
    ENCODER_SEQLENS_K,
    ENCODER_TOTAL_LENGTH,
    INPUT_IDS,
    POSITION_IDS,
    SEQLENS_K,
    TOTAL_SEQUENCE_LENGTH,
    past_name,
    self_cache_io,
)
from service.domain.errors import InvalidInput
from service.domain.languages import Languages
from service.domain.tasks import Tasks
from service.domain.types import ScoreOptions, ScoreRequest, ScoreResult, Timings
from service.runtime.cache.backends import Backend
from service.runtime.cache.devicemem import CacheTensor
from service.runtime.decoding.spec import ModelSpec

MODES = ("auto", "windows", "steps")
RUN_TOKENS = 128  # decoder positions x rows of one run (a run's time and memory bound)
ENCODE_FACTOR = 8  # an encoder run takes up to ENCODE_FACTOR x RUN_TOKENS padded source tokens

# Runner.encode_texts (texts, language prefix, task prefix) and Runner.encode_target
TextEncoder = Callable[[Sequence[str], Sequence[int], Sequence[int]], list[list[int]]]
TargetEncoder = Callable[[Sequence[str]], list[list[int]]]


def score_requests(sources: Sequence[str], targets: Sequence[str], options: ScoreOptions, spec: ModelSpec,
                   languages: Languages, tasks: Tasks, encode_texts: TextEncoder,
                   encode_target: TargetEncoder, target_vocab: int) -> list[ScoreRequest]:
    """Validated ScoreRequests of (source, target) text pairs, each target with or without eos by
    `end_target`; InvalidInput saying what is wrong (no pair, lists of different lengths, an empty or too
    long source, a target longer than a translation can be)."""
    for name, texts in (("sources", sources), ("targets", targets)):
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise InvalidInput(f"{name} must be a list of strings, got {type(texts).__name__}")
    if not sources:
        raise InvalidInput("no (source, target) pair to score: give at least one source and its target")
    if len(sources) != len(targets):
        raise InvalidInput(f"{len(sources)} source(s) but {len(targets)} target(s): give one target per "
                           "source")
    if not isinstance(options, ScoreOptions):
        raise InvalidInput(f"options must be ScoreOptions, got {type(options).__name__}")
    prefix, forced_first = languages.resolve(options.source_language, options.target_language)
    forced = [] if forced_first is None else [forced_first]
    source_ids = encode_texts(sources, prefix, tasks.resolve(options.task))
    target_ids = encode_target(targets)
    most = spec.max_output_tokens - len(forced)  # a cut translation's target tokens (module docstring)
    out = []
    for i, (src, tgt) in enumerate(zip(source_ids, target_ids, strict=True)):
        spec.check_source(src)
        if any(not 0 <= t < target_vocab for t in tgt):
            raise InvalidInput(f"target {i} has a token outside the model's output vocabulary of "
                               f"{target_vocab}")
        scored, ended = end_target(i, list(tgt), most, spec.special.eos)
        out.append(ScoreRequest(src, forced, scored, options, end_token_scored=ended))
    return out


def end_target(index: int, target: list[int], most: int, eos: int) -> tuple[list[int], bool]:
    """The tokens to score of a target's ids and whether eos is among them (the module's rule): shorter
    than `most`, the target then eos; exactly `most`, a translation cut at the maximum length, as it is;
    longer, InvalidInput naming the figures."""
    if len(target) < most:
        return [*target, eos], True
    if len(target) == most:
        return target, False
    raise InvalidInput(
        f"target {index} is {len(target)} tokens long; the model scores at most {most}: a target of fewer "
        f"tokens is scored with the end token (eos) appended, one of exactly {most} (a translation cut at "
        "the maximum length) without it")


class Scorer:
    """Forced decoding of ScoreRequests with a model's graphs, in runs of bounded size (module docstring)."""

    def __init__(self, spec: ModelSpec, backend: Backend, max_rows: int = 64, mode: str = "auto",
                 run_tokens: int = RUN_TOKENS) -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        if run_tokens < 1:
            raise ValueError(f"run_tokens must be >= 1, got {run_tokens}")
        if mode not in MODES:
            raise ValueError(f"unknown scoring mode {mode!r}; choose one of {', '.join(MODES)}")
        if mode == "auto":
            mode = "windows" if spec.kv_cache == "concat" else "steps"
        if mode == "windows" and spec.kv_cache != "concat":
            raise ValueError("the 'windows' scoring mode needs a decoder with a concatenated cache")
        self.spec, self.backend, self.max_rows, self.mode = spec, backend, max_rows, mode
        self.run_tokens = run_tokens
        n = spec.n_decoder_layers
        self._self_names = list(self_cache_io(n))
        self._cross_names = [past_name(i, "encoder", kv) for i in range(n) for kv in ("key", "value")]

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        """Each request's ScoreResult, in order, every run at once (timings: its chunk's compute time)."""
        work = self.work(requests)
        while not work.done:
            work.advance()
        return work.results()

    def work(self, requests: Sequence[ScoreRequest]) -> ScoreWork:
        """These requests' scoring as a series of model runs, each started by `ScoreWork.advance`."""
        return ScoreWork(self, requests)

    def _chunks(self, requests: Sequence[ScoreRequest]) -> list[list[int]]:
        """Indices of requests in chunks of similar length (less padding): at most max_rows, and at most
        ENCODE_FACTOR x run_tokens padded source tokens per encoder run (one pair at least)."""
        order = sorted(range(len(requests)), key=lambda i: len(requests[i].forced) + len(requests[i].target))
        chunks: list[list[int]] = []
        chunk: list[int] = []
        longest = 0
        for i in order:
            n = len(requests[i].source)
            if chunk and (len(chunk) == self.max_rows
                          or (len(chunk) + 1) * max(longest, n) > ENCODE_FACTOR * self.run_tokens):
                chunks.append(chunk)
                chunk, longest = [], 0
            chunk.append(i)
            longest = max(longest, n)
        return [*chunks, chunk] if chunk else chunks

    def _runs(self, requests: list[ScoreRequest]) -> Iterator[list[ScoreResult]]:
        """One chunk, one model run per item: the encoder, then the decoder over windows of positions
        (rows x positions <= run_tokens; one position per run in "steps" mode), the cache carried from window
        to window; each window keeps its rows' log-prob of the token each position predicts as it comes, so
        memory holds (rows, t) numbers, never (rows, t, vocabulary). Yields [] after each run but the last,
        and the chunk's results after it."""
        spec, rows = self.spec, len(requests)
        enc_feeds = spec.encoder_feeds([r.source for r in requests])
        cross = dict(zip(self._cross_names, self.backend.encode(enc_feeds), strict=True))
        inputs = [[spec.decoder_start, *r.forced, *r.target[:-1]] for r in requests]
        t = max(len(x) for x in inputs)
        ids = np.full((rows, t), spec.special.pad, np.int64)  # what each position reads
        nexts = np.full((rows, t), spec.special.pad, np.int64)  # the token each position predicts
        for b, (x, r) in enumerate(zip(inputs, requests, strict=True)):
            ids[b, : len(x)] = x
            nexts[b, : len(x)] = [*r.forced, *r.target]
        src_mask = enc_feeds[ATTENTION_MASK]
        if spec.kv_cache == "inplace":
            source: dict[str, np.ndarray] = {
                ENCODER_SEQLENS_K: (src_mask.sum(axis=1) - 1).astype(np.int32),
                ENCODER_TOTAL_LENGTH: np.array(src_mask.shape[1], np.int32)}
        else:
            source = {ENCODER_ATTENTION_MASK: src_mask}
        yield []
        width = max(1, self.run_tokens // rows) if self.mode == "windows" else 1
        inplace = spec.kv_cache == "inplace"  # one cache of t columns, written in place: no copy per run
        past = self._past(rows, t if inplace else 0)
        logp = np.zeros((rows, t), np.float32)  # each position's log-prob of its next token
        wanted = any(r.options.return_alignment for r in requests)
        attn = np.zeros((rows, t, src_mask.shape[1]), np.float32) if wanted else None
        for start in range(0, t, width):
            new = min(width, t - start)
            feeds = {INPUT_IDS: ids[:, start: start + new],
                     POSITION_IDS: np.tile(np.arange(start, start + new, dtype=np.int64), (rows, 1)),
                     **self._lengths(rows, start, new), **source}
            # log-probs, cross-attention, presents (none when updated in place; and more a backend may add)
            out = self.backend.decode(feeds, {**past, **cross}, inplace=inplace)
            if not inplace:
                past = dict(zip(self._self_names, out[2], strict=True))
            window = nexts[:, start: start + new, None]
            logp[:, start: start + new] = np.take_along_axis(np.asarray(out[0]), window, axis=2)[:, :, 0]
            if attn is not None:
                attn[:, start: start + new] = np.asarray(out[1])
            if start + new < t:
                yield []
        yield [self._result(b, r, logp, attn) for b, r in enumerate(requests)]

    @staticmethod
    def _result(b: int, r: ScoreRequest, logp: np.ndarray, attn: np.ndarray | None) -> ScoreResult:
        """Row b's ScoreResult: the log-probs of the positions that predict its target."""
        cols = np.arange(len(r.forced), len(r.forced) + len(r.target))
        lp = logp[b, cols].astype(np.float64)
        align = (attn[b, cols, : len(r.source)].astype(np.float64).tolist()
                 if attn is not None and r.options.return_alignment else None)
        total = float(lp.sum())
        return ScoreResult(list(r.target), lp.tolist(), total, total / len(r.target), r.end_token_scored,
                           list(r.source), align, Timings(0.0, 0.0, 0.0))

    def _past(self, rows: int, cols: int) -> dict[str, CacheTensor]:
        """An empty self-attention cache of `cols` columns (zeros) in the backend's memory."""
        shape = (rows, self.spec.n_heads, cols, self.spec.d_head)
        return {n: self.backend.memory.zeros(shape, self.spec.cache_dtype) for n in self._self_names}

    def _lengths(self, rows: int, start: int, new: int) -> dict[str, np.ndarray]:
        """The self-attention inputs of a run of `new` positions after `start` cached ones (every row)."""
        if self.spec.kv_cache == "inplace":
            return {SEQLENS_K: np.full(rows, start + new - 1, np.int32),
                    TOTAL_SEQUENCE_LENGTH: np.array(start + new, np.int32)}
        return {ATTENTION_MASK: np.ones((rows, start + new), np.int64)}


class ScoreWork:
    """The scoring of a set of requests, one model run per `advance`: the worker interleaves these runs with
    its decode steps, so no translation waits for a whole Score call. A chunk none of whose requests is
    still wanted (`withdraw`) is not run."""

    def __init__(self, scorer: Scorer, requests: Sequence[ScoreRequest]) -> None:
        self.requests = list(requests)
        self._scorer = scorer
        self._pending = deque(scorer._chunks(self.requests))
        self._chunk: list[int] = []
        self._runs: Iterator[list[ScoreResult]] | None = None
        self._spent = 0.0  # seconds of the current chunk's model runs
        self._results: dict[int, ScoreResult] = {}
        self._withdrawn: set[int] = set()

    @property
    def done(self) -> bool:
        """No run left: every chunk was run, or is not wanted any more."""
        return self._runs is None and all(self._withdrawn.issuperset(c) for c in self._pending)

    def withdraw(self, index: int) -> None:
        """Request `index` needs no result (its caller gave up)."""
        self._withdrawn.add(index)

    def advance(self) -> list[tuple[int, ScoreResult]]:
        """Run the next model run; (index, result) of the requests it completed (at their chunk's last
        run). Nothing when done."""
        while self._runs is None:
            if not self._pending:
                return []
            chunk = self._pending.popleft()
            if not self._withdrawn.issuperset(chunk):
                self._chunk, self._spent = chunk, 0.0
                self._runs = self._scorer._runs([self.requests[i] for i in chunk])
        t0 = time.perf_counter()
        finished = next(self._runs)
        self._spent += time.perf_counter() - t0
        if not finished:
            return []
        self._runs = None
        ms = self._spent * 1e3
        for r in finished:
            r.timings = Timings(0.0, ms, ms)
        out = list(zip(self._chunk, finished, strict=True))
        self._results.update(out)
        return out

    def results(self) -> list[ScoreResult]:
        """Every request's result, in order (once done, nothing withdrawn)."""
        return [self._results[i] for i in range(len(self.requests))]
