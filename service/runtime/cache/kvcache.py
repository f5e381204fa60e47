"""The decoder's KV caches: the self-attention cache in the two layouts a bundle's decoder can take, and the
cross-attention K/V.

Both are row-indexed like the rest of a DecodeBatch (service/runtime/decoding/batch.py): `grow` appends hole
rows, `start` gives rows to new requests, `free` turns rows into holes, `keep` drops or gathers rows,
`reorder` copies parent rows over child rows (beam search). `feeds` are the step's inputs that depend on the
layout, `past` the cache tensors to bind, `advance` takes the step's result.

Every tensor lives in the backend's memory (service/runtime/cache/devicemem.py: numpy arrays on the host,
OrtValues on a device) and is restructured only through it (zeroed buffers, views of the first rows, row
copies), so the same code runs on both and a device cache never goes through host memory.

`ConcatCache` (kv_cache "concat"): per layer K and V (n_rows, H, L, Dh). Every run returns past ++ one new
column for every row. Row r owns columns [start[r], L); earlier columns (a former occupant, or time before r
joined) are hidden by `attention_mask` (n_rows, L + 1), and its new token gets `position_ids` = L - start[r],
so rows of different ages share one run. When every live row starts at column >= c and c >= L / 4, columns [0,
c) are dropped. Growing, gathering rows and dropping columns copy into new tensors; a beam reorder copies rows
in place.

`InplaceCache` (kv_cache "inplace", export/lowering/inplace.py): per layer K and V in a buffer (capacity, H,
columns, Dh) that the decoder updates in place (the same memory is bound as past and present, so no cache byte
is copied per step). Row r holds its own `length[r]` tokens at columns [0, length[r]); the decoder reads
`seqlens_k` = length (so the new token lands at column length[r]) and nothing beyond. A new occupant just
starts at length 0: no mask, no copy. Rows are views of the first n_rows of the buffer, which doubles its
capacity (up to the batch's max_rows) when it must grow; its columns are a multiple of 32 (at most max_len)
that grows when a row needs more (in `feeds`, one copy) and shrinks back when the batch empties, so that a
copy of the cache costs what the rows hold, not max_len. Buffers are kept when the batch empties.

`CrossCache`: the cross-attention K/V that the encoder computed for each row's request, kept the same way
(views of buffers with spare rows), so that requests joining and leaving at the end of the batch copy nothing;
a joining request's rows are copied from the encoder's output.
"""

from __future__ import annotations

import numpy as np

from interface.names import (
    ATTENTION_MASK,
    ENCODER_ATTENTION_MASK,
    ENCODER_SEQLENS_K,
    ENCODER_TOTAL_LENGTH,
    POSITION_IDS,
    SEQLENS_K,
    TOTAL_SEQUENCE_LENGTH,
)
from service.runtime.cache.backends import Backend
from service.runtime.cache.devicemem import CacheTensor

SOURCE_AXIS_MIN = 64  # source-lengths mode: the smallest S, doubled as longer sources come
CACHE_COLUMNS_STEP = 32  # the in-place cache's columns: a multiple of this, grown as rows get longer


class ConcatCache:
    """Cache that the decoder returns one column longer each step (past ++ new)."""

    inplace = False

    def __init__(self, backend: Backend, n_tensors: int, heads: int, d_head: int, dtype: type, max_len: int
                 ) -> None:
        self._mem, self._n, self._shape, self._dtype = backend.memory, n_tensors, (heads, d_head), dtype
        self._max_pos = max_len - 1
        self.reset()

    def reset(self) -> None:
        """No rows, no columns."""
        self.length = 0  # L: columns
        self._kv = self._new(0, 0)
        self._start = np.zeros(0, np.int64)

    def _new(self, rows: int, cols: int, zeroed: bool = True) -> list[CacheTensor]:
        """New tensors (rows, H, cols, Dh): zeroed, or uninitialised for ones written whole."""
        h, dh = self._shape
        make = self._mem.zeros if zeroed else self._mem.empty
        return [make((rows, h, cols, dh), self._dtype) for _ in range(self._n)]

    def _copy_into(self, new: list[CacheTensor], rows: np.ndarray, cols: int | None = None, first: int = 0
                   ) -> None:
        """new[i] = old[rows, :, first:first + cols] for every tensor; new becomes the cache."""
        every = np.arange(len(rows))
        for dst, src in zip(new, self._kv, strict=True):
            self._mem.copy_rows(dst, every, src, rows, cols, first)
        self._kv = new

    def grow(self, k: int) -> None:
        """Append k hole rows (one copy)."""
        rows = len(self._start)
        self._copy_into(self._new(rows + k, self.length), np.arange(rows))
        self._start = np.concatenate([self._start, np.full(k, self.length, np.int64)])

    def start(self, rows: np.ndarray) -> None:
        """Rows taken by a new request: their history begins now."""
        self._start[rows] = self.length

    free = start  # a hole's old columns are hidden from any next owner the same way

    def keep(self, keep: np.ndarray | slice, live: np.ndarray) -> None:
        """Keep only the given rows (a prefix slice is a view, an index array gathers)."""
        index = np.arange(len(self._start))[keep]
        if isinstance(keep, slice) and (index == np.arange(len(index))).all():
            self._kv = [self._mem.prefix(x, len(index)) for x in self._kv]
        else:
            self._copy_into(self._new(len(index), self.length, zeroed=False), index)
        self._start = self._start[keep]

    def filled(self) -> np.ndarray:
        """Columns each row holds (n_rows,): tokens decoded so far by its request (holes: stale)."""
        return self.length - self._start

    def feeds(self) -> dict[str, np.ndarray]:
        """position_ids (n_rows, 1) and attention_mask (n_rows, L + 1) of the next step."""
        cols = np.arange(self.length + 1)
        return {
            POSITION_IDS: np.minimum(self.length - self._start, self._max_pos)[:, None],  # holes clamped
            ATTENTION_MASK: (cols[None, :] >= self._start[:, None]).astype(np.int64),
        }

    def past(self) -> list[CacheTensor]:
        """Cache tensors to feed, in the order of the decoder's past_key_values inputs."""
        return self._kv

    def advance(self, presents: list[CacheTensor], live: np.ndarray) -> None:
        """Take the decoder's presents (one column longer) as the cache."""
        self._kv, self.length = list(presents), self.length + 1

    def reorder(self, dst: np.ndarray, src: np.ndarray) -> None:
        """cache[dst] = cache[src] for every tensor, in place."""
        for x in self._kv:
            self._mem.copy_rows(x, dst, x, src)

    def tidy(self, live: np.ndarray) -> None:
        """Drop the leading columns no live row can see, when they are >= 1/4 of the cache."""
        first = int(self._start[live].min())
        if first > 0 and 4 * first >= self.length:
            rows, cols = len(self._start), self.length - first
            self._copy_into(self._new(rows, cols, zeroed=False), np.arange(rows), cols, first)
            self._start = np.maximum(self._start - first, 0)
            self.length -= first


class _RowBuffers:
    """Per-tensor buffers (capacity, H, cols, Dh) in the backend's memory, handed out as views of
    their first `rows` rows.

    Capacity doubles (up to max_rows) when rows must grow beyond it; rows are edited in place by
    the memory's row copies, and `tensors()` returns the same view objects until rows or buffers
    change (a binding that holds them need not bind them again).
    """

    def __init__(self, backend: Backend, n_tensors: int, heads: int, d_head: int, dtype: type,
                 max_rows: int | None = None) -> None:
        self._mem, self._n, self._shape, self._dtype = backend.memory, n_tensors, (heads, d_head), dtype
        self.rows = 0
        self.max_rows = max_rows  # the batch's limit: capacity never doubles beyond it
        self._buf = self._alloc(0, 0)
        self._views: list[CacheTensor] = []

    def _alloc(self, rows: int, cols: int) -> list[CacheTensor]:
        """Zeroed buffers, so that what a hole reads is finite."""
        h, dh = self._shape
        return [self._mem.zeros((rows, h, cols, dh), self._dtype) for _ in range(self._n)]

    def _capacity(self) -> int:
        """Rows the buffers hold."""
        return int(self._mem.shape(self._buf[0])[0])

    def _cols(self, used: int) -> int | None:
        """Columns to copy of rows whose first `used` hold data (None: all, cheaper on a device)."""
        return None if self._mem.whole_rows else used

    def _grown(self, need: int) -> int:
        """Rows to allocate for `need` rows: double the capacity, at most max_rows."""
        double = 2 * self._capacity()
        return max(need, double if self.max_rows is None else min(double, self.max_rows))

    def _resize(self, rows: int, cols: int, kept_cols: int | None) -> None:
        """New buffers of `rows` rows and `cols` columns; the current rows keep their first
        kept_cols columns (all if None)."""
        new, every = self._alloc(rows, cols), np.arange(self.rows)
        for dst, src in zip(new, self._buf, strict=True):
            self._mem.copy_rows(dst, every, src, every, kept_cols)
        self._buf, self._views = new, []

    def _keep(self, keep: np.ndarray | slice, cols: int | None) -> np.ndarray:
        """Keep only the given rows (over their first cols columns; all if None); returns their
        old indices. A prefix is already in place; an index array is gathered in place."""
        index = np.arange(self.rows)[keep]
        if not isinstance(keep, slice):
            every = np.arange(len(index))
            for b in self._buf:
                self._mem.copy_rows(b, every, b, index, cols)
        self.rows = len(index)
        return index

    def tensors(self) -> list[CacheTensor]:
        """Views of the first n_rows rows to bind (the same objects until something changes)."""
        if not self._views or self._mem.shape(self._views[0])[0] != self.rows:
            self._views = [self._mem.prefix(b, self.rows) for b in self._buf]
        return self._views


class InplaceCache(_RowBuffers):
    """Fixed-length cache updated in place by the decoder; each row has its own length.

    The buffers have spare capacity and a step binds views of their first n_rows (no copy when
    rows join or leave at the end); compaction and beam reordering copy rows within the buffers,
    on the device when the cache is there.
    """

    inplace = True

    def __init__(self, backend: Backend, n_tensors: int, heads: int, d_head: int, dtype: type, max_len: int,
                 max_rows: int | None = None) -> None:
        super().__init__(backend, n_tensors, heads, d_head, dtype, max_rows)
        self._max_len = max_len
        self._columns = min(CACHE_COLUMNS_STEP, max_len)
        self._buf = self._alloc(0, self._columns)
        self._len = np.zeros(0, np.int64)  # per row, capacity long
        self._feeds = _length_feeds(0)

    def reset(self) -> None:
        """No rows (the buffers are kept for the next requests, at the fewest columns)."""
        self.rows = 0
        self._len[:] = 0
        if self._columns > CACHE_COLUMNS_STEP:
            self._columns = min(CACHE_COLUMNS_STEP, self._max_len)
            self._buf, self._views = self._alloc(self._capacity(), self._columns), []

    @property
    def length(self) -> int:
        """Longest row's cache length (columns in use)."""
        return int(self._len[: self.rows].max(initial=0))

    def filled(self) -> np.ndarray:
        """Columns each row holds (n_rows,): tokens decoded so far by its request (holes: 0)."""
        return self._len[: self.rows]

    def grow(self, k: int) -> None:
        """Append k empty rows; the buffers double their capacity (one copy) when full."""
        need = self.rows + k
        if need > self._capacity():
            rows = self._grown(need)
            self._resize(rows, self._columns, self._cols(self.length))
            self._len = np.concatenate([self._len[: self.rows], np.zeros(rows - self.rows, np.int64)])
        self._len[self.rows : need] = 0
        self.rows = need

    def start(self, rows: np.ndarray) -> None:
        """Rows taken by a new request: empty."""
        self._len[rows] = 0

    free = start

    def keep(self, keep: np.ndarray | slice, live: np.ndarray) -> None:
        """Keep only the given rows: a prefix is a view; an index array is gathered."""
        lens = self._len[np.arange(self.rows)[keep]]
        index = self._keep(keep, self._cols(int(lens.max(initial=0))))
        self._len[: len(index)] = lens

    def feeds(self) -> dict[str, np.ndarray]:
        """position_ids (n_rows, 1), seqlens_k (n_rows,), total_sequence_length () of the next step, which
        writes one column: the buffers first grow (one copy) if the longest row needs more columns.

        The same arrays, rewritten in place, while n_rows stays the same: a binding that holds
        them (service/runtime/cache/backends.py DecoderBinding) need not bind them again.
        """
        lens = self._len[: self.rows]
        longest = int(lens.max(initial=0))
        if longest + 1 > self._columns < self._max_len:
            need = -(-(longest + 1) // CACHE_COLUMNS_STEP) * CACHE_COLUMNS_STEP
            self._columns = min(need, self._max_len)
            self._resize(self._capacity(), self._columns, longest)  # wider rows: copy the columns held
        if len(self._feeds[SEQLENS_K]) != self.rows:
            self._feeds = _length_feeds(self.rows)
        f = self._feeds
        f[POSITION_IDS][:, 0] = lens
        f[SEQLENS_K][:] = lens
        f[TOTAL_SEQUENCE_LENGTH][...] = longest + 1
        return f

    def past(self) -> list[CacheTensor]:
        """Cache tensors of the n_rows rows, bound as past and present (updated in place)."""
        return self.tensors()

    def advance(self, presents: list[CacheTensor], live: np.ndarray) -> None:
        """Live rows grew by one token (holes stay empty); the buffers already hold it."""
        if len(live) != self.rows:
            raise ValueError(f"{len(live)} row flags for {self.rows} rows")
        lens = self._len[: self.rows]
        lens += live  # bool -> 0/1: one ufunc call

    def reorder(self, dst: np.ndarray, src: np.ndarray) -> None:
        """cache[dst] = cache[src] for every buffer, over the columns in use."""
        cols = self._cols(self.length)
        for b in self._buf:
            self._mem.copy_rows(b, dst, b, src, cols)
        self._len[dst] = self._len[src]

    def tidy(self, live: np.ndarray) -> None:
        """Nothing to drop: a row's columns are its own."""


class CrossCache(_RowBuffers):
    """Cross-attention K/V of every decoder layer, each (n_rows, H, S, Dh); S = the longest source.

    Written once per request by `write` (the encoder's output, repeated over its beam rows).
    Rows joining or leaving at the end copy nothing (spare rows, as InplaceCache); a change of S
    copies into new buffers.
    """

    def __init__(self, backend: Backend, n_tensors: int, heads: int, d_head: int, dtype: type,
                 max_rows: int | None = None, source_lengths: bool = False, max_len: int = 0) -> None:
        super().__init__(backend, n_tensors, heads, d_head, dtype, max_rows)
        self.src = 0
        self.source_lengths, self._max_len = source_lengths, max_len  # else a source mask

    def axis_for(self, longest: int) -> int:
        """S for a newcomer as long as `longest`: with a mask, the longest source present; with
        source lengths (padding costs no compute), a power of two >= 64 that only grows."""
        if not self.source_lengths:
            return max(self.src, longest)
        s = max(self.src, SOURCE_AXIS_MIN)
        while s < longest:
            s *= 2
        return min(s, self._max_len) if s > self.src else self.src

    def feeds(self, live: np.ndarray, row_src: np.ndarray) -> dict[str, np.ndarray]:
        """The decoder's source inputs for rows with these source lengths: per-row lengths - 1 and S
        (holes: column 0), or a mask (holes keep their last owner's, at least column 0)."""
        if self.source_lengths:
            lens = np.where(live, row_src - 1, 0).astype(np.int32)
            return {ENCODER_SEQLENS_K: lens, ENCODER_TOTAL_LENGTH: np.array(self.src, np.int32)}
        mask = np.arange(self.src)[None, :] < np.maximum(row_src, 1)[:, None]
        return {ENCODER_ATTENTION_MASK: mask.astype(np.int64)}

    def reset(self, keep_src: bool = False) -> None:
        """No rows; the buffers and S are kept for the next requests if keep_src, else S = 0."""
        self.rows = 0
        if not keep_src:
            self.src, self._buf, self._views = 0, self._alloc(0, 0), []

    def grow(self, k: int) -> None:
        """Append k rows (zeros); the buffers double their capacity when full."""
        if self.rows + k > self._capacity():
            self._resize(self._grown(self.rows + k), self.src, None)
        self.rows += k

    def fit_src(self, s: int) -> None:
        """Zero-pad (s > S) or cut (s < S) the source axis (one copy)."""
        if s != self.src:
            self._resize(self._capacity(), s, min(s, self.src))
            self.src = s

    def write(self, rows: np.ndarray, encoded: list[CacheTensor], owner: np.ndarray) -> None:
        """rows[i] gets encoded[:][owner[i]] (each (B_new, H, S_new, Dh), S_new <= S) in its first S_new
        columns; the rest keep what they held (finite: buffers start zeroed), which no decoder reads
        (per-row source lengths stop before it, a source mask hides it)."""
        width = int(self._mem.shape(encoded[0])[2])
        for buf, enc in zip(self._buf, encoded, strict=True):
            self._mem.copy_rows(buf, rows, enc, owner, width)

    def keep(self, keep: np.ndarray | slice) -> None:
        """Keep only the given rows (a prefix is a view; an index array is gathered in place)."""
        self._keep(keep, None)


def _length_feeds(rows: int) -> dict[str, np.ndarray]:
    """Zeroed position_ids (rows, 1), seqlens_k (rows,) and total_sequence_length () arrays."""
    return {
        POSITION_IDS: np.zeros((rows, 1), np.int64),
        SEQLENS_K: np.zeros(rows, np.int32),
        TOTAL_SEQUENCE_LENGTH: np.zeros((), np.int32),
    }
