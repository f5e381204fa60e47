"""The decoder's self-attention KV cache, in the two layouts a bundle's decoder can take.

Both are row-indexed like the rest of a DecodeBatch (service/runtime/batch.py): `grow` appends hole
rows, `start` gives rows to new requests, `free` turns rows into holes, `keep` drops or gathers
rows, `reorder` copies parent rows over child rows (beam search). `feeds` are the step's inputs
that depend on the layout, `past` the cache tensors to bind, `advance` takes the step's result.

`ConcatCache` (kv_cache "concat"): per layer K and V (n_rows, H, L, Dh). Every run returns
past ++ one new column for every row. Row r owns columns [start[r], L); earlier columns (a former
occupant, or time before r joined) are hidden by `attention_mask` (n_rows, L + 1), and its new
token gets `position_ids` = L - start[r], so rows of different ages share one run. When every
live row starts at column >= c and c >= L / 4, columns [0, c) are dropped (one copy).

`InplaceCache` (kv_cache "inplace", export/inplace.py): per layer K and V in a host buffer
(capacity, H, max_len, Dh) that the decoder updates in place (the same memory is bound as past
and present, so no cache byte is copied per step). Row r holds its own `length[r]` tokens at
columns [0, length[r]); the decoder reads `seqlens_k` = length (so the new token lands at column
length[r]) and nothing beyond. A new occupant just starts at length 0: no mask, no copy.
Rows are views of the first n_rows of the buffer, which doubles its capacity when it must grow.

`CrossCache`: the cross-attention K/V that the encoder computed for each row's request, kept
the same way (views of buffers with spare rows on the host), so that requests joining and
leaving at the end of the batch copy nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from interface.names import ATTENTION_MASK, POSITION_IDS, SEQLENS_K, TOTAL_SEQUENCE_LENGTH
from service.runtime.backends import Backend, CacheTensor


class ConcatCache:
    """Cache that the decoder returns one column longer each step (past ++ new)."""

    inplace = False

    def __init__(self, backend: Backend, n_tensors: int, heads: int, d_head: int, dtype: type, max_len: int
                 ) -> None:
        self._be, self._n, self._shape, self._dtype = backend, n_tensors, (heads, d_head), dtype
        self._max_pos = max_len - 1
        self.reset()

    def reset(self) -> None:
        """No rows, no columns."""
        h, dh = self._shape
        self.length = 0  # L: columns
        self._kv = [self._be.to_device(np.zeros((0, h, 0, dh), self._dtype)) for _ in range(self._n)]
        self._start = np.zeros(0, np.int64)

    def grow(self, k: int) -> None:
        """Append k hole rows (one copy)."""
        h, dh = self._shape
        zeros = np.zeros((k, h, self.length, dh), self._dtype)
        self._kv = [self._be.to_device(np.concatenate([self._be.to_host(x), zeros])) for x in self._kv]
        self._start = np.concatenate([self._start, np.full(k, self.length, np.int64)])

    def start(self, rows: np.ndarray) -> None:
        """Rows taken by a new request: their history begins now."""
        self._start[rows] = self.length

    free = start  # a hole's old columns are hidden from any next owner the same way

    def keep(self, keep: np.ndarray | slice, live: np.ndarray) -> None:
        """Keep only the given rows (a prefix slice is a view, an index array gathers)."""
        self._kv = [self._be.to_device(self._be.to_host(x)[keep]) for x in self._kv]
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
        """cache[dst] = cache[src] for every tensor."""
        self._kv = [self._be.to_device(_copy_rows(self._be.to_host(x), dst, src, None)) for x in self._kv]

    def tidy(self, live: np.ndarray) -> None:
        """Drop the leading columns no live row can see, when they are >= 1/4 of the cache."""
        first = int(self._start[live].min())
        if first > 0 and 4 * first >= self.length:
            self._kv = [self._be.to_device(self._be.to_host(x)[:, :, first:]) for x in self._kv]
            self._start = np.maximum(self._start - first, 0)
            self.length -= first


class _RowBuffers:
    """Per-tensor buffers (rows, H, cols, Dh) on a backend, handed out as their first `rows` rows.

    On a host-memory backend they have spare rows (capacity doubles when full), are edited in
    place, and `tensors()` returns the same view objects until rows or buffers change (a binding
    that holds them need not bind them again). On a device backend they hold exactly `rows` rows
    and every edit goes through host memory.
    """

    def __init__(self, backend: Backend, n_tensors: int, heads: int, d_head: int, dtype: type,
                 max_rows: int | None = None) -> None:
        self._be, self._n, self._shape, self._dtype = backend, n_tensors, (heads, d_head), dtype
        self._host = backend.host_memory
        self.rows = 0
        self.max_rows = max_rows  # the batch's limit: host capacity never doubles beyond it
        self._buf = self._alloc(0, 0)
        self._views: list[CacheTensor] = []

    def _alloc(self, rows: int, cols: int) -> list[CacheTensor]:
        """Zeroed buffers, so that what a hole reads is finite."""
        h, dh = self._shape
        return [self._be.to_device(np.zeros((rows, h, cols, dh), self._dtype)) for _ in range(self._n)]

    def _capacity(self) -> int:
        """Rows the buffers hold."""
        return int(self._buf[0].shape[0]) if self._host else self.rows

    def _edit(self, fn: Callable[..., np.ndarray], *per_tensor: list[CacheTensor]) -> None:
        """buffer = fn(buffer as a host array, *its items of per_tensor), for every buffer."""
        items = zip(self._buf, *per_tensor, strict=True) if per_tensor else ((b,) for b in self._buf)
        if self._host:
            new = [fn(*it) for it in items]
            if all(n is b for n, b in zip(new, self._buf, strict=True)):
                return  # edited in place: the views still show them
            self._buf = new
        else:
            self._buf = [self._be.to_device(fn(self._be.to_host(b), *rest)) for b, *rest in items]
        self._views = []

    def _grown(self, need: int) -> int:
        """Rows to allocate for `need` rows: double the capacity (at most max_rows) on the host,
        exactly need on a device."""
        if not self._host:
            return need
        double = 2 * self._capacity()
        return max(need, double if self.max_rows is None else min(double, self.max_rows))

    def _resize(self, rows: int, cols: int, kept_cols: int) -> None:
        """New buffers of `rows` rows and `cols` columns; the current rows keep their first
        kept_cols columns."""
        h, dh = self._shape

        def resized(old: np.ndarray) -> np.ndarray:
            new = np.zeros((rows, h, cols, dh), self._dtype)
            new[: self.rows, :, :kept_cols] = old[: self.rows, :, :kept_cols]
            return new

        self._edit(resized)

    def _keep(self, keep: np.ndarray | slice, cols: int | None) -> np.ndarray:
        """Keep only the given rows (over their first cols columns; all if None); returns their
        old indices. A prefix is already in place on the host; an index array is gathered."""
        index = np.arange(self.rows)[keep]
        if not self._host:
            self._edit(lambda b: b[index])
        elif not isinstance(keep, slice):
            self._edit(lambda b: _copy_rows(b, np.arange(len(index)), index, cols))
        self.rows = len(index)
        return index

    def tensors(self) -> list[CacheTensor]:
        """The n_rows tensors to bind (on the host, the same view objects until something changes)."""
        if not self._host:
            return self._buf
        if not self._views or len(self._views[0]) != self.rows:
            self._views = [b[: self.rows] for b in self._buf]
        return self._views


class InplaceCache(_RowBuffers):
    """Fixed-length cache updated in place by the decoder; each row has its own length.

    On a host-memory backend the buffers have spare capacity and a step binds views of their
    first n_rows (no copy when rows join or leave at the end). On a device backend (CUDA IO
    binding) they hold exactly n_rows and restructuring goes through host memory, as for
    ConcatCache; steady-state greedy steps move no cache byte at all.
    """

    inplace = True

    def __init__(self, backend: Backend, n_tensors: int, heads: int, d_head: int, dtype: type, max_len: int,
                 max_rows: int | None = None) -> None:
        super().__init__(backend, n_tensors, heads, d_head, dtype, max_rows)
        self._max_len = max_len
        self._buf = self._alloc(0, max_len)
        self._len = np.zeros(0, np.int64)  # per row (capacity long on the host)
        self._feeds = _length_feeds(0)

    def reset(self) -> None:
        """No rows (host buffers are kept for the next requests)."""
        if not self._host:
            self._buf, self._len = self._alloc(0, self._max_len), np.zeros(0, np.int64)
        self.rows = 0
        self._len[:] = 0

    @property
    def length(self) -> int:
        """Longest row's cache length (columns in use)."""
        return int(self._len[: self.rows].max(initial=0))

    def filled(self) -> np.ndarray:
        """Columns each row holds (n_rows,): tokens decoded so far by its request (holes: 0)."""
        return self._len[: self.rows]

    def grow(self, k: int) -> None:
        """Append k empty rows; host buffers double their capacity (one copy) when full."""
        need = self.rows + k
        if need > self._capacity():
            rows = self._grown(need)
            self._resize(rows, self._max_len, self.length)
            self._len = np.concatenate([self._len[: self.rows], np.zeros(rows - self.rows, np.int64)])
        self._len[self.rows : need] = 0
        self.rows = need

    def start(self, rows: np.ndarray) -> None:
        """Rows taken by a new request: empty."""
        self._len[rows] = 0

    free = start

    def keep(self, keep: np.ndarray | slice, live: np.ndarray) -> None:
        """Keep only the given rows: a prefix is a view on the host; an index array is gathered."""
        lens = self._len[np.arange(self.rows)[keep]]
        index = self._keep(keep, int(lens.max(initial=0)))
        if self._host:
            self._len[: len(index)] = lens
        else:
            self._len = lens

    def feeds(self) -> dict[str, np.ndarray]:
        """position_ids (n_rows, 1), seqlens_k (n_rows,), total_sequence_length () of the next step.

        The same arrays, rewritten in place, while n_rows stays the same: a binding that holds
        them (service/runtime/sessions.py DecoderBinding) need not bind them again.
        """
        lens = self._len[: self.rows]
        if len(self._feeds[SEQLENS_K]) != self.rows:
            self._feeds = _length_feeds(self.rows)
        f = self._feeds
        f[POSITION_IDS][:, 0] = lens
        f[SEQLENS_K][:] = lens
        f[TOTAL_SEQUENCE_LENGTH][...] = lens.max(initial=0) + 1
        return f

    def past(self) -> list[CacheTensor]:
        """Cache tensors of the n_rows rows, bound as past and present (updated in place)."""
        return self.tensors()

    def advance(self, presents: list[CacheTensor], live: np.ndarray) -> None:
        """Live rows grew by one token (holes stay empty); the buffers already hold it."""
        if len(live) != self.rows:
            raise ValueError(f"{len(live)} row flags for {self.rows} rows")
        lens = self._len[: self.rows]
        lens += live

    def reorder(self, dst: np.ndarray, src: np.ndarray) -> None:
        """cache[dst] = cache[src] for every buffer, over the columns in use."""
        cols = self.length
        self._edit(lambda b: _copy_rows(b, dst, src, cols))
        self._len[dst] = self._len[src]

    def tidy(self, live: np.ndarray) -> None:
        """Nothing to drop: a row's columns are its own."""


class CrossCache(_RowBuffers):
    """Cross-attention K/V of every decoder layer, each (n_rows, H, S, Dh); S = the longest source.

    Written once per request by `write` (the encoder's output, repeated over its beam rows).
    Rows joining or leaving at the end copy nothing on the host (spare rows, as InplaceCache);
    a change of S copies.
    """

    def __init__(self, backend: Backend, n_tensors: int, heads: int, d_head: int, dtype: type,
                 max_rows: int | None = None) -> None:
        super().__init__(backend, n_tensors, heads, d_head, dtype, max_rows)
        self.src = 0

    def reset(self, keep_src: bool = False) -> None:
        """No rows; host buffers and S are kept for the next requests if keep_src, else S = 0."""
        self.rows = 0
        if not (keep_src and self._host):
            self.src, self._buf, self._views = 0, self._alloc(0, 0), []

    def grow(self, k: int) -> None:
        """Append k rows (zeros); host buffers double their capacity when full."""
        if self.rows + k > self._capacity():
            self._resize(self._grown(self.rows + k), self.src, self.src)
        self.rows += k

    def fit_src(self, s: int) -> None:
        """Zero-pad (s > S) or cut (s < S) the source axis (one copy)."""
        if s != self.src:
            self._resize(self._capacity(), s, min(s, self.src))
            self.src = s

    def write(self, rows: np.ndarray, encoded: list[np.ndarray], owner: np.ndarray) -> None:
        """rows[i] gets encoded[:][owner[i]] (each (B_new, H, S_new, Dh), S_new <= S) in its first S_new
        columns; the rest keep what they held (finite: buffers start zeroed), which no decoder reads
        (per-row source lengths stop before it, a source mask hides it)."""
        width = encoded[0].shape[2]
        pairs = list(zip(rows.tolist(), owner.tolist(), strict=True))

        def written(c: np.ndarray, e: np.ndarray) -> np.ndarray:
            for r, o in pairs:  # basic slicing: no fancy-index temporaries
                c[r, :, :width] = e[o]
            return c

        self._edit(written, encoded)

    def keep(self, keep: np.ndarray | slice) -> None:
        """Keep only the given rows (a prefix is a view on the host; an index array gathers)."""
        self._keep(keep, None)


def _length_feeds(rows: int) -> dict[str, np.ndarray]:
    """Zeroed position_ids (rows, 1), seqlens_k (rows,) and total_sequence_length () arrays."""
    return {
        POSITION_IDS: np.zeros((rows, 1), np.int64),
        SEQLENS_K: np.zeros(rows, np.int32),
        TOTAL_SEQUENCE_LENGTH: np.zeros((), np.int32),
    }


def _copy_rows(x: np.ndarray, dst: np.ndarray, src: np.ndarray, cols: int | None) -> np.ndarray:
    """x[dst] = x[src] in place, over the first cols columns (all if None); returns x."""
    if cols is None:
        x[dst] = x[src]  # the right side is gathered first
    else:
        x[dst, :, :cols] = x[src, :, :cols]
    return x
