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

`Scorer` runs a set of requests in chunks of at most max_rows: one encoder run, then the decoder over the
targets, right-padded (causal self-attention keeps a row's padding unseen by its real tokens). Modes: "whole",
every row's every position in ONE decoder run from an empty self-attention cache (new_len > 1:
interface/names.py); "steps", one run per position for every row, the cache carried from run to run (as a
translation decodes). Both give the same numbers. "auto" (the default) takes "whole" for a concatenated cache
and "steps" for an in-place one: ONNX Runtime's GroupQueryAttention, the in-place decoder's attention, takes
several new tokens only for a batch of one row, and, as its cross-attention treats the encoder's K/V as a
cache the new tokens end, only up to the source's length (docs/performance.md compares the modes). The tensors
live in the backend's memory, so both backends run it; a run never touches a DecodeBatch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

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
from service.domain.types import ScoreOptions, ScoreRequest, ScoreResult, Timings
from service.runtime.cache.backends import Backend
from service.runtime.cache.devicemem import CacheTensor
from service.runtime.decoding.spec import ModelSpec

MODES = ("auto", "whole", "steps")

TextEncoder = Callable[[Sequence[str], Sequence[int]], list[list[int]]]  # Runner.encode_texts
TargetEncoder = Callable[[Sequence[str]], list[list[int]]]  # Runner.encode_target


def score_requests(sources: Sequence[str], targets: Sequence[str], options: ScoreOptions, spec: ModelSpec,
                   languages: Languages, encode_texts: TextEncoder, encode_target: TargetEncoder,
                   target_vocab: int) -> list[ScoreRequest]:
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
    source_ids = encode_texts(sources, prefix)
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
    """Forced decoding of ScoreRequests with a model's graphs, max_rows pairs per run."""

    def __init__(self, spec: ModelSpec, backend: Backend, max_rows: int = 64, mode: str = "auto") -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        if mode not in MODES:
            raise ValueError(f"unknown scoring mode {mode!r}; choose one of {', '.join(MODES)}")
        if mode == "auto":
            mode = "whole" if spec.kv_cache == "concat" else "steps"
        self.spec, self.backend, self.max_rows, self.mode = spec, backend, max_rows, mode
        n = spec.n_decoder_layers
        self._self_names = list(self_cache_io(n))
        self._cross_names = [past_name(i, "encoder", kv) for i in range(n) for kv in ("key", "value")]

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        """Each request's ScoreResult, in order (timings: this call's compute time, no queue)."""
        order = sorted(range(len(requests)), key=lambda i: len(requests[i].forced) + len(requests[i].target))
        results: list[ScoreResult | None] = [None] * len(requests)
        for first in range(0, len(order), self.max_rows):  # similar lengths together: less padding
            chunk = order[first: first + self.max_rows]
            t0 = time.perf_counter()
            scored = self._run([requests[i] for i in chunk])
            ms = (time.perf_counter() - t0) * 1e3
            for i, r in zip(chunk, scored, strict=True):
                r.timings = Timings(0.0, ms, ms)
                results[i] = r
        return [r for r in results if r is not None]

    def _run(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        """One chunk: an encoder run and the decoder over every row's whole decoder input."""
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
        run = self._whole if self.mode == "whole" else self._stepwise
        logp, attn = run(ids, nexts, source, cross)  # (rows, t) predicted tokens' log-probs, (rows, t, S)
        out = []
        for b, r in enumerate(requests):
            cols = np.arange(len(r.forced), len(r.forced) + len(r.target))  # positions predicting the target
            lp = logp[b, cols].astype(np.float64)
            wanted = r.options.return_alignment
            align = attn[b, cols, : len(r.source)].astype(np.float64).tolist() if wanted else None
            total = float(lp.sum())
            out.append(ScoreResult(list(r.target), lp.tolist(), total, total / len(r.target),
                                   r.end_token_scored, list(r.source), align, Timings(0.0, 0.0, 0.0)))
        return out

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

    def _whole(self, ids: np.ndarray, nexts: np.ndarray, source: dict[str, np.ndarray],
               cross: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """Every position in one decoder run; of each position only its log-prob of `nexts` is kept."""
        rows, t = ids.shape
        feeds = {INPUT_IDS: ids, POSITION_IDS: np.tile(np.arange(t, dtype=np.int64), (rows, 1)),
                 **self._lengths(rows, 0, t), **source}
        cols = t if self.spec.kv_cache == "inplace" else 0  # an in-place buffer must hold them
        out = self.backend.decode(feeds, {**self._past(rows, cols), **cross})
        # log-probs, cross-attention (then presents, and more a backend may add)
        gathered = np.take_along_axis(np.asarray(out[0]), nexts[:, :, None], axis=2)[:, :, 0]
        return gathered, out[1]

    def _stepwise(self, ids: np.ndarray, nexts: np.ndarray, source: dict[str, np.ndarray],
                  cross: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """One position per decoder run, the cache carried from run to run; each step keeps its rows' log-prob
        of `nexts` as it comes, so memory holds (rows, t) numbers, never (rows, t, vocabulary)."""
        rows, t = ids.shape
        past = self._past(rows, t if self.spec.kv_cache == "inplace" else 0)
        every = np.arange(rows)
        gathered = np.zeros((rows, t), np.float32)
        attns = []
        for j in range(t):
            feeds = {INPUT_IDS: ids[:, j: j + 1], POSITION_IDS: np.full((rows, 1), j, np.int64),
                     **self._lengths(rows, j, 1), **source}
            out = self.backend.decode(feeds, {**past, **cross})
            logp, attn = out[0], out[1]
            past = dict(zip(self._self_names, out[2], strict=True))  # the presents
            gathered[:, j] = np.asarray(logp[:, 0])[every, nexts[:, j]]
            attns.append(np.array(attn[:, 0], copy=True))
        return gathered, np.stack(attns, axis=1)
