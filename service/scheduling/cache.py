"""The sentence cache: results of deterministic decoding kept per model version, options and source ids.

One `SentenceCache` serves the whole server (service/assembly.py builds it from `--sentence-cache-bytes`);
each scheduler (service/scheduling/scheduler.py) takes an `owner` id of its own at construction, so a
reloaded copy of a model version never sees its predecessor's entries, and drops them when it drains.

Keys are (owner, options, source ids): the ids after tokenization (the language prefix included) and the
text's own `ResolvedOptions` (its glossary terms among its required phrases) with the result-shaping flags
normalised (`return_alignment`, `stream` off), so a result
kept with its alignment answers a request that does not ask for it (stripped), not the other way round.
Sampling without a seed is never cached (`cacheable`). Entries are stored compactly (token ids as int32
bytes, alignment as float32 bytes) and their bytes counted (`entry_bytes`); the least recently used go
first once the total passes `max_bytes`, and a result larger than `max_bytes` is not kept.

Only the event loop touches a cache (submit looks up and stores between awaits): no lock, by design.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from service.domain.types import FinishReason, Hypothesis, ResolvedOptions, Result, Timings
from service.ops import metrics

# bytes of the Python objects around an entry's payload, measured with tracemalloc and rounded up
# (docs/documents.md, "Sentence cache"): the key tuple, the entry object, its hypotheses tuple and its
# size, the OrderedDict's node and table slots
ENTRY_OVERHEAD = 320
HYPOTHESIS_OVERHEAD = 170  # a kept hypothesis' tuple and its two floats
OPTIONS_BYTES = 400  # one distinct ResolvedOptions, kept once for every entry decoded with it

_owners = itertools.count(1)

Key = tuple[int, ResolvedOptions, bytes]
# a hypothesis kept: token bytes, text, log-prob, score, finish reason, alignment bytes, alignment columns,
# unmet required phrases and glossary terms
_Stored = tuple[bytes, str, float, float, FinishReason, bytes | None, int, tuple[int, ...], tuple[str, ...]]


def new_owner() -> int:
    """A fresh owner id: one per scheduler, i.e. per loaded copy of a model version."""
    return next(_owners)


def cacheable(options: ResolvedOptions) -> bool:
    """Whether results of these options may be cached: deterministic decoding (no sampling, or seeded)."""
    return not options.sampling or options.seed is not None


class _Entry:
    """One cached result: its hypotheses (compact), finish reason, whether alignment is kept, its bytes."""

    __slots__ = ("aligned", "finish_reason", "hypotheses", "nbytes")

    def __init__(self, hypotheses: tuple[_Stored, ...], finish_reason: FinishReason, aligned: bool,
                 nbytes: int) -> None:
        self.hypotheses, self.finish_reason = hypotheses, finish_reason
        self.aligned, self.nbytes = aligned, nbytes


class SentenceCache:
    """An LRU of sentence results bounded in bytes, shared by every model version of the server."""

    def __init__(self, max_bytes: int) -> None:
        """An empty cache holding at most `max_bytes` (>= 1) of entries."""
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._options: dict[ResolvedOptions, list] = {}  # interned: options -> [the one copy, its entries]
        self._publish()

    def __len__(self) -> int:
        """Entries held."""
        return len(self._entries)

    @staticmethod
    def keys(owner: int, options: ResolvedOptions | Sequence[ResolvedOptions],
             sources: Sequence[Sequence[int]]) -> list[Key] | None:
        """The key of each source decoded by `owner` with `options` (one for all, or each source's own: a
        text's glossary terms are among its options); None when the results are not cacheable (sampling
        without a seed, or options that do not hash)."""
        each = [options] * len(sources) if isinstance(options, ResolvedOptions) else list(options)
        if not all(cacheable(o) for o in each):
            return None
        distinct = {id(o): dataclasses.replace(o, return_alignment=False, stream=False) for o in each}
        try:
            hash(tuple(distinct.values()))
        except TypeError:
            return None
        return [(owner, distinct[id(o)], np.asarray(ids, np.int32).tobytes())
                for o, ids in zip(each, sources, strict=True)]

    def get(self, key: Key, alignment: bool) -> Result | None:
        """The cached result of `key` (the most recently used now), alignment stripped unless `alignment`
        is asked; None when absent or kept without the alignment asked for."""
        entry = self._entries.get(key)
        if entry is None or (alignment and not entry.aligned):
            return None
        self._entries.move_to_end(key)
        source = np.frombuffer(key[2], np.int32).tolist()
        hypotheses = [Hypothesis(np.frombuffer(tokens, np.int32).tolist(), text, log_prob, score, why,
                                 _alignment(attn, columns) if alignment else None, unmet, terms)
                      for tokens, text, log_prob, score, why, attn, columns, unmet, terms in entry.hypotheses]
        return Result(hypotheses, source, entry.finish_reason, Timings(0.0, 0.0, 0.0), key[1].glossary_terms)

    def put(self, key: Key, result: Result) -> None:
        """Keep `result` under `key`, unless it is cancelled, larger than `max_bytes`, or a kept entry with
        alignment already answers it; then evict the least recently used until the total fits."""
        if not result.hypotheses or result.finish_reason == FinishReason.CANCELLED:
            return
        old = self._entries.get(key)
        aligned = all(h.alignment is not None for h in result.hypotheses)
        if old is not None and old.aligned and not aligned:
            self._entries.move_to_end(key)
            return
        stored = tuple(_stored(h, aligned) for h in result.hypotheses)
        nbytes = entry_bytes(key[2], stored)
        if nbytes > self.max_bytes:
            return
        if old is not None:
            self._remove(key)
        key = (key[0], self._intern(key[1]), key[2])
        self._entries[key] = _Entry(stored, result.finish_reason, aligned, nbytes)
        self.bytes += nbytes
        while self.bytes > self.max_bytes:
            self._remove(next(iter(self._entries)))
        self._publish()

    def drop(self, owner: int) -> int:
        """Remove every entry of `owner` (its model copy stopped); the number removed."""
        gone = [key for key in self._entries if key[0] == owner]
        for key in gone:
            self._remove(key)
        self._publish()
        return len(gone)

    def _intern(self, options: ResolvedOptions) -> ResolvedOptions:
        """The one kept copy of options equal to `options` (counted once in `bytes`), one more use."""
        slot = self._options.get(options)
        if slot is None:
            slot = self._options[options] = [options, 0]
            self.bytes += OPTIONS_BYTES
        slot[1] += 1
        return slot[0]

    def _remove(self, key: Key) -> None:
        """Forget one entry and, with its last entry, its options."""
        entry = self._entries.pop(key)
        self.bytes -= entry.nbytes
        slot = self._options[key[1]]
        slot[1] -= 1
        if not slot[1]:
            del self._options[key[1]]
            self.bytes -= OPTIONS_BYTES

    def _publish(self) -> None:
        """The server-wide gauges."""
        metrics.SENTENCE_CACHE_BYTES.set(self.bytes)
        metrics.SENTENCE_CACHE_ENTRIES.set(len(self._entries))


def entry_bytes(source: bytes, hypotheses: Sequence[_Stored]) -> int:
    """Bytes one entry holds: its source ids, each hypothesis' tokens, text and alignment (the objects'
    sizes) and the fixed overheads; its options are counted once per distinct options."""
    payload = sum(sys.getsizeof(tokens) + sys.getsizeof(text) + (0 if attn is None else sys.getsizeof(attn))
                  + (sys.getsizeof(unmet) if unmet else 0) + sum(map(sys.getsizeof, terms))
                  for tokens, text, _, _, _, attn, _, unmet, terms in hypotheses)
    return ENTRY_OVERHEAD + sys.getsizeof(source) + HYPOTHESIS_OVERHEAD * len(hypotheses) + payload


def _stored(h: Hypothesis, aligned: bool) -> _Stored:
    """A hypothesis as kept: int32 token bytes, float32 alignment bytes (when kept) and its width."""
    attn, columns = None, 0
    if aligned and h.alignment is not None:
        matrix = np.asarray(h.alignment, np.float32)
        columns = matrix.shape[1] if matrix.ndim == 2 else 0
        attn = matrix.tobytes()
    return (np.asarray(h.tokens, np.int32).tobytes(), h.text, float(h.log_prob), float(h.score),
            h.finish_reason, attn, columns, tuple(h.unmet_phrases), tuple(h.unmet_terms))


def _alignment(attn: bytes | None, columns: int) -> list[list[float]] | None:
    """A kept alignment back as the rows of floats a decode returns."""
    if attn is None:
        return None
    if not columns:
        return []
    return np.frombuffer(attn, np.float32).reshape(-1, columns).tolist()
