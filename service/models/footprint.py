"""What a model version holds while it serves, measured once at its load under a memory budget: the memory
budget's first charge of it (docs/service.md, "The model repository").

The charge is the process's peak resident memory during a warm-up at the server's limits, above the resident
memory before the load began (the weights, sessions and what the warm-up translation kept are under that
peak), plus by arithmetic the growth of the decoder's self-attention cache from the warm-up's few steps to
the longest output (`cache_growth`): decoding that far at load would cost far more time than the rest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from service.domain.errors import InvalidInput
from service.domain.types import DecodeOptions
from service.ops.memory import PeakWatch
from service.runtime.cache.kvcache import CACHE_COLUMNS_STEP
from service.runtime.decoding.spec import ModelSpec
from service.runtime.runner import Runner
from service.scheduling.scheduler import Scheduler

WARMUP_STEPS = 8  # decoder steps of each warm-up batch at the limits
FILLER = "Send 4,217 apples to the market by noon , and keep the rest for Anna ."  # words of its texts


@dataclass(frozen=True)
class LimitBatch:
    """One warm-up batch: `rows` texts of `source_tokens` tokens each (eos included)."""

    rows: int
    source_tokens: int


def limit_batches(max_rows: int, max_source: int, max_batch_tokens: int = 0) -> list[LimitBatch]:
    """The batches a model's limits allow at their largest: the most rows with the longest sources the
    token budget leaves them, and under a token budget also the longest sources in as many rows as fit
    (attention grows with the square of the source length)."""
    if not max_batch_tokens:
        return [LimitBatch(max_rows, max_source)]
    wide = LimitBatch(max_rows, max(2, min(max_source, max_batch_tokens // max_rows)))
    long = LimitBatch(max(1, min(max_rows, max_batch_tokens // max_source)), max_source)
    return [wide] if long == wide else [wide, long]


def text_of(count: Callable[[str], int], tokens: int, filler: str = FILLER) -> str:
    """The longest text of `filler`'s words repeated (one word at least) that `count` makes at most `tokens`
    tokens; `count` raises InvalidInput for a text beyond the model's limit."""
    words = filler.split()

    def text(n: int) -> str:
        """The first n words of the filler, repeated as needed."""
        return " ".join(words[i % len(words)] for i in range(n))

    def fits(n: int) -> bool:
        """Whether n words make at most `tokens` tokens."""
        try:
            return count(text(n)) <= tokens
        except InvalidInput:
            return False

    low, high = 1, max(1, tokens)  # a word is at least one token
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return text(low)


def cache_columns(spec: ModelSpec, tokens: int) -> int:
    """Columns of the self-attention cache once `tokens` are decoded: the in-place cache's are a multiple
    of CACHE_COLUMNS_STEP (at most max_len), the concat cache's one per token and the decoder start."""
    if spec.kv_cache == "inplace":
        return min(spec.max_len, -(-(tokens + 1) // CACHE_COLUMNS_STEP) * CACHE_COLUMNS_STEP)
    return tokens + 1


def cache_growth(spec: ModelSpec, rows: int, decoded: int, longest: int) -> int:
    """Bytes the self-attention cache of `rows` rows adds from `decoded` tokens to `longest`: at its peak the
    old and the new cache side by side (a concat step's past and present, an in-place cache's copy when
    it widens)."""
    itemsize = np.dtype(spec.cache_dtype).itemsize
    per_column = rows * spec.n_decoder_layers * 2 * spec.n_heads * spec.d_head * itemsize  # K and V per layer
    return 2 * per_column * max(0, cache_columns(spec, longest) - cache_columns(spec, decoded))


async def charge_at_limits(runner: Runner, scheduler: Scheduler, before: int, options: DecodeOptions,
                           kernel_peak: bool = True) -> int:
    """Bytes the model holds while it serves at its scheduler's limits: the peak resident memory of the
    `limit_batches` (each decoded WARMUP_STEPS tokens, greedy, with `options`' languages) above `before`
    (the resident memory before the load), plus the `cache_growth` to the longest output."""
    settings, limits = scheduler.settings, scheduler.limits
    rows = min(settings.max_batch_size, settings.queue_size)  # one request of a text per row
    steps = min(WARMUP_STEPS, limits.max_output_tokens)
    forced = dataclasses.replace(options, beam_size=1, min_output_tokens=steps, max_output_tokens=steps)

    def count(text: str) -> int:
        """Tokens of the text as a request's source (language prefix and suffix included)."""
        return len(runner.make_request(text, forced).source)

    with PeakWatch(kernel_peak) as watch:
        for batch in limit_batches(rows, limits.max_source_tokens, settings.max_batch_tokens):
            await scheduler.submit([text_of(count, batch.source_tokens)] * batch.rows, forced)
    longest = limits.max_output_tokens
    return max(0, watch.peak - before) + cache_growth(runner.spec, rows, steps, longest)
