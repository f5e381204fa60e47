"""service/runtime/kvcache.py CrossCache: cross-attention K/V rows with spare capacity on the host."""

from __future__ import annotations

import numpy as np
import pytest

from service.runtime.kvcache import CrossCache


class Host:
    """A host-memory backend (as service/runtime/sessions.py HostBackend)."""

    host_memory = True

    def to_host(self, x: np.ndarray) -> np.ndarray:
        """Already numpy."""
        return x

    def to_device(self, a: np.ndarray) -> np.ndarray:
        """Contiguous numpy."""
        return np.ascontiguousarray(a)


class Device(Host):
    """A device backend: tensors live elsewhere (copies both ways)."""

    host_memory = False

    def to_host(self, x: np.ndarray) -> np.ndarray:
        """A copy, as a device -> host transfer."""
        return np.array(x, copy=True)

    to_device = to_host


def encoded(batch: int, src: int, seed: int, n: int = 2) -> list[np.ndarray]:
    """Random encoder outputs (batch, H=2, src, Dh=3) for n tensors."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((batch, 2, src, 3)).astype(np.float32) for _ in range(n)]


@pytest.mark.parametrize("backend", [Host(), Device()], ids=["host", "device"])
def test_rows_keep_their_values_through_growth_source_changes_and_compaction(backend):
    cache = CrossCache(backend, 2, 2, 3, np.float32)
    cache.fit_src(4)
    cache.grow(3)
    first = encoded(2, 4, 0)
    cache.write(np.array([0, 1, 2]), first, np.array([0, 0, 1]))  # request 0 holds rows 0 and 1 (a beam)
    expected = {0: [e[0] for e in first], 1: [e[0] for e in first], 2: [e[1] for e in first]}

    cache.grow(4)  # beyond the first capacity: the rows move to bigger buffers
    cache.fit_src(6)  # a longer source joined: zero-padded
    later = encoded(1, 6, 1)
    cache.write(np.array([5]), later, np.array([0]))
    expected[5] = [e[0] for e in later]
    t = cache.tensors()
    assert cache.rows == 7 and all(x.shape == (7, 2, 6, 3) for x in t)
    for row, want in expected.items():
        for x, w in zip(t, want, strict=True):
            np.testing.assert_array_equal(x[row, :, : w.shape[1]], w)
            assert not x[row, :, w.shape[1]:].any()  # padding is zeros
    assert not any(x[[3, 4, 6]].any() for x in t)  # rows never written stay zero

    cache.keep(np.array([1, 5]))  # compaction: gather
    cache.fit_src(4)  # the longest source left: cut
    t = cache.tensors()
    assert cache.rows == 2 and all(x.shape == (2, 2, 4, 3) for x in t)
    for new, old in ((0, 1), (1, 5)):
        for x, w in zip(t, expected[old], strict=True):
            np.testing.assert_array_equal(x[new], w[:, :4])


def test_host_rows_join_and_leave_at_the_end_without_copies():
    cache = CrossCache(Host(), 2, 2, 3, np.float32)
    cache.fit_src(5)
    cache.grow(4)
    buffers = [x.base for x in cache.tensors()]
    assert all(b is not None and b.shape[0] == 4 for b in buffers)
    cache.keep(slice(0, 2))  # trailing rows leave: views of the same buffers
    cache.grow(2)  # and come back within capacity: still the same buffers
    assert all(x.base is b for x, b in zip(cache.tensors(), buffers, strict=True))
    views = cache.tensors()
    assert cache.tensors() is views  # the same objects while nothing changed (bound once)
    cache.grow(1)  # beyond capacity: doubled
    assert cache.tensors()[0].base.shape[0] == 8


def test_host_capacity_doubles_up_to_the_batch_limit_only():
    cache = CrossCache(Host(), 2, 2, 3, np.float32, max_rows=6)
    cache.fit_src(4)
    cache.grow(4)
    cache.write(np.arange(4), encoded(4, 4, seed=1), np.arange(4))
    before = [x.copy() for x in cache.tensors()]
    cache.grow(1)  # doubling would give 8 rows; the batch never holds more than 6
    assert [x.base.shape[0] for x in cache.tensors()] == [6, 6]
    assert all(np.array_equal(x[:4], b) for x, b in zip(cache.tensors(), before, strict=True))
    cache.grow(1)  # the 6th row fits without a copy
    assert cache.rows == 6 and cache.tensors()[0].base.shape[0] == 6
