"""service/runtime/cache/kvcache.py CrossCache: cross-attention K/V rows with spare capacity, the same on
numpy arrays and on device OrtValues (service/runtime/cache/devicemem.py, here on the CPU device)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from service.runtime.cache.devicemem import DeviceMemory, HostArrays, Memory
from service.runtime.cache.kvcache import CrossCache


@dataclass
class Backend:
    """What a cache needs of a backend: its memory."""

    memory: Memory


def encoded(memory: Memory, batch: int, src: int, seed: int, n: int = 2) -> tuple[list, list[np.ndarray]]:
    """Random encoder outputs (batch, H=2, src, Dh=3) for n tensors, in `memory` and as numpy."""
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal((batch, 2, src, 3)).astype(np.float32) for _ in range(n)]
    tensors = []
    for v in values:
        t = memory.zeros(v.shape, np.float32)
        if isinstance(t, np.ndarray):
            t[...] = v
        else:
            t.update_inplace(v)
        tensors.append(t)
    return tensors, values


def address(x) -> int:
    """Where a tensor's data starts."""
    return x.ctypes.data if isinstance(x, np.ndarray) else x.data_ptr()


@pytest.fixture(params=["host", "device"])
def memory(request) -> Memory:
    """numpy arrays, or OrtValues of the CPU device."""
    return HostArrays() if request.param == "host" else DeviceMemory("cpu")


def test_rows_keep_their_values_through_growth_source_changes_and_compaction(memory):
    cache = CrossCache(Backend(memory), 2, 2, 3, np.float32)
    cache.fit_src(4)
    cache.grow(3)
    first, want = encoded(memory, 2, 4, 0)
    cache.write(np.array([0, 1, 2]), first, np.array([0, 0, 1]))  # request 0 holds rows 0 and 1 (a beam)
    expected = {0: [w[0] for w in want], 1: [w[0] for w in want], 2: [w[1] for w in want]}

    cache.grow(4)  # beyond the first capacity: the rows move to bigger buffers
    cache.fit_src(6)  # a longer source joined: zero-padded
    later, want = encoded(memory, 1, 6, 1)
    cache.write(np.array([5]), later, np.array([0]))
    expected[5] = [w[0] for w in want]
    t = [memory.to_host(x) for x in cache.tensors()]
    assert cache.rows == 7 and all(x.shape == (7, 2, 6, 3) for x in t)
    for row, values in expected.items():
        for x, w in zip(t, values, strict=True):
            np.testing.assert_array_equal(x[row, :, : w.shape[1]], w)
            assert not x[row, :, w.shape[1]:].any()  # padding is zeros
    assert not any(x[[3, 4, 6]].any() for x in t)  # rows never written stay zero

    cache.keep(np.array([1, 5]))  # compaction: gather
    cache.fit_src(4)  # the longest source left: cut
    t = [memory.to_host(x) for x in cache.tensors()]
    assert cache.rows == 2 and all(x.shape == (2, 2, 4, 3) for x in t)
    for new, old in ((0, 1), (1, 5)):
        for x, w in zip(t, expected[old], strict=True):
            np.testing.assert_array_equal(x[new], w[:, :4])


def test_rows_join_and_leave_at_the_end_without_copies(memory):
    cache = CrossCache(Backend(memory), 2, 2, 3, np.float32)
    cache.fit_src(5)
    cache.grow(4)
    starts = [address(x) for x in cache.tensors()]
    assert cache._capacity() == 4
    cache.keep(slice(0, 2))  # trailing rows leave: views of the same buffers
    cache.grow(2)  # and come back within capacity: still the same buffers
    assert [address(x) for x in cache.tensors()] == starts and cache._capacity() == 4
    views = cache.tensors()
    assert cache.tensors() is views  # the same objects while nothing changed (bound once)
    cache.grow(1)  # beyond capacity: doubled
    assert cache._capacity() == 8 and memory.shape(cache.tensors()[0])[0] == 5


def test_capacity_doubles_up_to_the_batch_limit_only(memory):
    cache = CrossCache(Backend(memory), 2, 2, 3, np.float32, max_rows=6)
    cache.fit_src(4)
    cache.grow(4)
    cache.write(np.arange(4), encoded(memory, 4, 4, seed=1)[0], np.arange(4))
    before = [memory.to_host(x) for x in cache.tensors()]
    cache.grow(1)  # doubling would give 8 rows; the batch never holds more than 6
    assert cache._capacity() == 6
    assert all(np.array_equal(memory.to_host(x)[:4], b) for x, b in zip(cache.tensors(), before, strict=True))
    cache.grow(1)  # the 6th row fits without a copy
    assert cache.rows == 6 and cache._capacity() == 6


def test_inplace_columns_grow_in_steps_of_32_keeping_rows_and_shrink_when_empty(memory):
    """InplaceCache: a step needing more columns than the buffers have grows them to the next multiple of
    32 (at most max_len), rows keep their written columns; an emptied batch gets 32 columns back."""
    from service.runtime.cache.kvcache import CACHE_COLUMNS_STEP, InplaceCache

    cache = InplaceCache(Backend(memory), 2, 2, 3, np.float32, max_len=80)
    cache.grow(2)
    shape = memory.shape(cache.past()[0])
    assert shape == (2, 2, CACHE_COLUMNS_STEP, 3)
    values, _ = encoded(memory, 2, CACHE_COLUMNS_STEP, 5)  # what the decoder would have written
    for buf, v in zip(cache.past(), values, strict=True):
        memory.copy_rows(buf, np.arange(2), v, np.arange(2))
    live = np.array([True, True])

    def advance(tokens: int) -> None:
        """Every row `tokens` steps further."""
        for _ in range(tokens):
            cache.advance([], live)

    advance(30)  # 30 tokens per row
    want = [memory.to_host(x)[:, :, :30].copy() for x in cache.past()]
    advance(1)
    cache.feeds()  # 31 + 1 fits
    assert memory.shape(cache.past()[0])[2] == 32
    advance(1)
    feeds = cache.feeds()  # 33 columns: one more step of 32
    assert memory.shape(cache.past()[0])[2] == 64 and int(feeds["total_sequence_length"]) == 33
    for x, w in zip(cache.past(), want, strict=True):
        np.testing.assert_array_equal(memory.to_host(x)[:, :, :30], w)
    advance(32)
    cache.feeds()  # 64 + 1 columns: 96, capped at max_len
    assert memory.shape(cache.past()[0])[2] == 80
    for x, w in zip(cache.past(), want, strict=True):
        np.testing.assert_array_equal(memory.to_host(x)[:, :, :30], w)
    cache.reset()
    cache.grow(1)
    assert memory.shape(cache.past()[0]) == (1, 2, CACHE_COLUMNS_STEP, 3)
