"""service/runtime/cache/devicemem.py: row copies on numpy arrays and on CPU OrtValues equal numpy's, views
share their buffer's memory and keep it alive; on a CUDA device (the gpu tier) the copies are ORT's own."""

from __future__ import annotations

import gc
import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from service.runtime.cache import devicemem
from service.runtime.cache.devicemem import DeviceMemory, HostArrays, Memory, view

MEMORIES = {
    "host": HostArrays,
    "cpu-memmove": lambda: DeviceMemory("cpu"),
    "cpu-through-host": lambda: DeviceMemory("cpu", transfer="host"),
}


def random(shape: tuple[int, ...], seed: int, dtype: type = np.float32) -> np.ndarray:
    """Standard normal values of a shape."""
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def put(memory: Memory, a: np.ndarray):
    """A tensor of `memory` holding a copy of a."""
    x = memory.zeros(a.shape, a.dtype.type)
    every = np.arange(len(a))
    memory.copy_rows(x, every, a if isinstance(memory, HostArrays) else _ortvalue(a), every)
    return x


def _ortvalue(a: np.ndarray) -> ort.OrtValue:
    """An ORT-allocated CPU OrtValue holding a copy of a."""
    x = ort.OrtValue.ortvalue_from_shape_and_type(list(a.shape), a.dtype.type)
    x.update_inplace(np.ascontiguousarray(a))
    return x


@pytest.fixture(params=list(MEMORIES))
def memory(request) -> Memory:
    """Each memory: numpy, CPU OrtValues copied by memmove, CPU OrtValues copied through host arrays."""
    return MEMORIES[request.param]()


def test_device_memory_on_the_cpu_copies_with_memmove():
    # ORT's environment has no CPU -> CPU data transfer: onnxruntime.copy_tensors raises there
    assert DeviceMemory("cpu").transfer == "memmove"


def test_where_ort_cannot_copy_on_a_device_rows_go_through_host_memory_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(devicemem, "_can_copy_tensors", lambda device, device_id: "no data transfer")
    monkeypatch.setattr(devicemem, "CUDA_LIBRARY", Path("/nonexistent"))  # nothing to register
    with caplog.at_level(logging.WARNING, logger=devicemem.__name__):
        assert devicemem._choose_transfer("cuda", 0) == "host"
    assert "copied through host memory" in caplog.text and "no data transfer" in caplog.text
    assert devicemem._choose_transfer("cpu", 0) == "memmove"


def test_zeros_are_zero(memory):
    for shape in [(3, 2, 5, 4), (0, 2, 0, 4), (2, 1, 300, 1024)]:  # the last is larger than one zero chunk
        x = memory.zeros(shape, np.float32)
        assert memory.shape(x) == shape and not memory.to_host(x).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_gather_between_buffers_with_different_column_counts(memory, dtype):
    src = random((5, 3, 7, 4), 0, dtype)
    dst = random((6, 3, 9, 4), 1, dtype)
    s, d = put(memory, src), put(memory, dst)
    rows, from_rows = np.array([4, 0, 1, 2]), np.array([3, 3, 0, 1])
    memory.copy_rows(d, rows, s, from_rows, cols=5, src_col=2)  # columns [2, 7) of src to [0, 5) of dst
    dst[rows, :, :5] = src[from_rows, :, 2:7]
    np.testing.assert_array_equal(memory.to_host(d), dst)
    assert memory.shape(d) == dst.shape


@pytest.mark.parametrize("cols", [None, 3])
def test_in_place_reorder_with_overlapping_rows_is_numpys_gather(memory, cols):
    a = random((6, 2, 5, 3), 2)
    x = put(memory, a)
    for dst, src in [([0, 1, 2, 3], [1, 1, 0, 3]), ([0, 1, 2], [1, 3, 4]), ([2, 3, 4, 5], [0, 1, 2, 3])]:
        d, s = np.array(dst), np.array(src)
        memory.copy_rows(x, d, x, s, cols)
        a[d, :, : cols or 5] = a[s, :, : cols or 5]  # numpy reads the right side first
        np.testing.assert_array_equal(memory.to_host(x), a)


def test_rows_written_from_another_tensor_over_a_column_range(memory):
    cache, encoded = random((5, 2, 8, 3), 3), random((2, 2, 6, 3), 4)  # S = 8, the newcomers' S_new = 6
    c, e = put(memory, cache), put(memory, encoded)
    rows, owner = np.array([4, 1, 2]), np.array([0, 0, 1])  # request 0 holds two beam rows
    memory.copy_rows(c, rows, e, owner, cols=6)
    cache[rows, :, :6] = encoded[owner]
    np.testing.assert_array_equal(memory.to_host(c), cache)  # columns beyond 6 keep what they held


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_views_share_the_buffers_memory(dtype):
    memory = DeviceMemory("cpu")
    base = memory.zeros((4, 2, 3, 5), dtype)
    first = memory.prefix(base, 2)
    assert first.data_ptr() == base.data_ptr() and memory.shape(first) == (2, 2, 3, 5)
    row = 2 * 3 * 5
    third = view(base, 2 * row, (1, 2, 3, 5))
    assert third.data_ptr() == base.data_ptr() + 2 * row * np.dtype(dtype).itemsize
    third.update_inplace(np.full((1, 2, 3, 5), 7, dtype))  # written through the view
    seen = memory.to_host(base)
    assert (seen[2] == 7).all() and not seen[[0, 1, 3]].any()
    with pytest.raises(ValueError, match="outside"):
        view(base, 3 * row + 1, (1, 2, 3, 5))


def test_a_view_keeps_its_buffer_alive():
    n = 4096  # small enough for the allocator to hand freed memory out again at once
    base = ort.OrtValue.ortvalue_from_shape_and_type([n], np.float32)
    base.update_inplace(np.full(n, 7, np.float32))
    address, part = base.data_ptr(), view(base, 100, (50,))
    del base
    gc.collect()
    others = [ort.OrtValue.ortvalue_from_shape_and_type([n], np.float32) for _ in range(8)]
    for other in others:
        other.update_inplace(np.full(n, -1, np.float32))
    assert address not in {o.data_ptr() for o in others}
    assert (part.numpy() == 7).all()


@pytest.mark.gpu
def test_on_cuda_rows_are_copied_by_onnx_runtime_on_the_device():
    memory = DeviceMemory("cuda")
    assert memory.transfer == "copy_tensors"
    a = random((6, 2, 5, 3), 5)
    x = memory.zeros(a.shape, np.float32)
    x.update_inplace(a)
    memory.copy_rows(x, np.array([0, 1, 2]), x, np.array([1, 1, 0]), cols=4)
    a[[0, 1, 2], :, :4] = a[[1, 1, 0], :, :4]
    np.testing.assert_array_equal(memory.to_host(x), a)
    assert memory.prefix(x, 2).data_ptr() == x.data_ptr()
