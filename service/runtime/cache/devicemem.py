"""Where the KV cache lives and how its rows are copied: numpy arrays on the host, OrtValues on a device.

Both implement `Memory`: zeroed (or uninitialised) buffers, a view of a buffer's first rows, and `copy_rows`,
which does `dst[dst_rows, :, :cols] = src[src_rows, :, src_col:src_col + cols]` on (rows, H, L, Dh) tensors
with numpy's gather semantics (the right side is read first, so dst and src may be the same buffer, as in a
beam reorder). Every restructuring of the cache (rows joining or leaving, compaction, beam reordering,
cross-attention writes, a new source length) is one `copy_rows` per tensor.

`HostArrays` (the CPU provider's HostBackend): numpy indexing.

`DeviceMemory` (the IO-binding backend: "cuda", or "cpu" in the tests): buffers are OrtValues that ONNX
Runtime allocates, and nothing goes through host memory but a zero tensor that new buffers are filled from
(uploaded once per dtype, again only when a larger one is needed, at most ZERO_CHUNK elements).

Views. Elements [a, b) of a C-contiguous OrtValue, as an OrtValue over the same memory: ORT's own DLPack
capsule of the buffer (`OrtValue.__dlpack__`) with its data pointer moved by a * itemsize and its shape
replaced, consumed by `OrtValue.from_dlpack`. ORT copies the shape, ignores byte_offset, and maps kDLCUDA to
the NVIDIA-vendor device of its own CUDA allocations. The capsule's DLManagedTensor holds an OrtValue of the
buffer, released by its deleter when the view dies: a view keeps its buffer alive, bindings that hold it
included, with no Python callback.

Copies. `copy_rows` cuts the rows into contiguous pieces (runs of whole rows when every column is copied, else
one piece per row and head), each a pair of 1-D views, all copied by one call: `onnxruntime.copy_tensors` on a
device (device to device). With stream None, ORT's CUDA data transfer follows a device-to-device cudaMemcpy
with cudaStreamSynchronize on the default stream, so the copy is complete when it returns; a session run ends
with its stream synchronised (unless the run option disable_synchronize_execution_providers is set); so the
runs and copies of one thread are ordered without further synchronisation. ORT's environment has no CPU -> CPU
data transfer (copy_tensors raises), so on the "cpu" device each pair is a memmove. Where copy_tensors cannot
copy on the device, even after the CUDA provider library is registered with ORT's environment, the pairs go
through host memory (a warning says so). An in-place copy whose destination rows are also source rows is
gathered through a temporary first.
"""

from __future__ import annotations

import ctypes
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import onnxruntime as ort

from service.runtime.model.cuda import CUDA, PROVIDER_LIBRARY

log = logging.getLogger(__name__)

CacheTensor = np.ndarray | ort.OrtValue  # a KV-cache tensor: numpy on the host, an OrtValue on a device
Shape = tuple[int, ...]
Pairs = list[tuple[ort.OrtValue, ort.OrtValue]]  # (source, destination) views of equal size
CUDA_LIBRARY = Path(ort.__file__).parent / "capi" / PROVIDER_LIBRARY
ZERO_CHUNK = 1 << 20  # elements of the largest zero tensor a DeviceMemory uploads


class Memory(Protocol):
    """Buffers of (rows, H, L, Dh) cache tensors and the row copies between them."""

    whole_rows: bool  # copying whole rows is cheaper than a column range (contiguous runs)

    def zeros(self, shape: Shape, dtype: type) -> CacheTensor:
        """A zero-filled buffer (what a hole reads is finite)."""
        ...

    def empty(self, shape: Shape, dtype: type) -> CacheTensor:
        """An uninitialised buffer, for one that is written whole."""
        ...

    def shape(self, x: CacheTensor) -> Shape:
        """The shape of a tensor."""
        ...

    def prefix(self, x: CacheTensor, rows: int) -> CacheTensor:
        """A view of the first rows of x (no copy)."""
        ...

    def copy_rows(self, dst: CacheTensor, dst_rows: np.ndarray, src: CacheTensor, src_rows: np.ndarray,
                  cols: int | None = None, src_col: int = 0) -> None:
        """dst[dst_rows, :, :cols] = src[src_rows, :, src_col:src_col + cols] (cols None: all of dst's)."""
        ...

    def to_host(self, x: CacheTensor) -> np.ndarray:
        """A tensor as a numpy array that owns its memory."""
        ...


class HostArrays:
    """Cache tensors as numpy arrays in host memory (the CPU provider)."""

    whole_rows = False

    def zeros(self, shape: Shape, dtype: type) -> np.ndarray:
        """A zero-filled array."""
        return np.zeros(shape, dtype)

    def empty(self, shape: Shape, dtype: type) -> np.ndarray:
        """An uninitialised array."""
        return np.empty(shape, dtype)

    def shape(self, x: np.ndarray) -> Shape:
        """The shape of an array."""
        return x.shape

    def prefix(self, x: np.ndarray, rows: int) -> np.ndarray:
        """The first rows of x, a view."""
        return x[:rows]

    def copy_rows(self, dst: np.ndarray, dst_rows: np.ndarray, src: np.ndarray, src_rows: np.ndarray,
                  cols: int | None = None, src_col: int = 0) -> None:
        """dst[dst_rows, :, :cols] = src[src_rows, :, src_col:src_col + cols]; runs of rows are sliced."""
        cols = dst.shape[2] if cols is None else cols
        if len(dst_rows):
            dst[_run(dst_rows), :, :cols] = src[_run(src_rows), :, src_col : src_col + cols]

    def to_host(self, x: np.ndarray) -> np.ndarray:
        """The array itself."""
        return x


class DeviceMemory:
    """Cache tensors as OrtValues on an ONNX Runtime device; row copies stay on the device."""

    whole_rows = True

    def __init__(self, device: str = "cuda", device_id: int = 0, transfer: str | None = None) -> None:
        self.device, self.device_id = device, device_id
        # "copy_tensors", "memmove" or "host"; None: the first that works here (tests force one)
        self.transfer = transfer or _choose_transfer(device, device_id)
        self._copy: Callable[[Pairs], None] = _TRANSFERS[self.transfer]
        self._zero: dict[type, ort.OrtValue] = {}  # 1-D zeros per dtype, copied into new buffers

    def zeros(self, shape: Shape, dtype: type) -> ort.OrtValue:
        """A zero-filled buffer, copied piecewise on the device from this memory's zero tensor."""
        x = self.empty(shape, dtype)
        size = math.prod(shape)
        if size:
            zero = self._zero.get(dtype)
            if zero is None or zero.shape()[0] < min(size, ZERO_CHUNK):
                zero = self._zero[dtype] = self.empty((min(max(size, 1024), ZERO_CHUNK),), dtype)
                zero.update_inplace(np.zeros(zero.shape(), dtype))
            chunk = zero.shape()[0]
            self._copy([(view(zero, 0, (min(chunk, size - at),)), view(x, at, (min(chunk, size - at),)))
                        for at in range(0, size, chunk)])
        return x

    def empty(self, shape: Shape, dtype: type) -> ort.OrtValue:
        """An uninitialised buffer allocated by ONNX Runtime."""
        return ort.OrtValue.ortvalue_from_shape_and_type(list(shape), dtype, self.device, self.device_id)

    def shape(self, x: ort.OrtValue) -> Shape:
        """The shape of an OrtValue."""
        return tuple(x.shape())

    def prefix(self, x: ort.OrtValue, rows: int) -> ort.OrtValue:
        """A view of the first rows of x."""
        return view(x, 0, (rows, *x.shape()[1:]))

    def copy_rows(self, dst: ort.OrtValue, dst_rows: np.ndarray, src: ort.OrtValue, src_rows: np.ndarray,
                  cols: int | None = None, src_col: int = 0) -> None:
        """dst[dst_rows, :, :cols] = src[src_rows, :, src_col:src_col + cols] in one device copy (or two)."""
        _, heads, dst_len, d_head = self.shape(dst)
        cols = dst_len if cols is None else cols
        dst_rows, src_rows = np.asarray(dst_rows, np.int64), np.asarray(src_rows, np.int64)
        if _overlap(dst, src):
            if self.shape(dst) != self.shape(src) or src_col:
                raise ValueError("an in-place row copy needs the same buffer on both sides")
            moved = dst_rows != src_rows
            dst_rows, src_rows = dst_rows[moved], src_rows[moved]
            if np.intersect1d(dst_rows, src_rows).size:  # gather first, as numpy's x[dst] = x[src]
                staged = self.empty((len(src_rows), heads, cols, d_head), _dtype(src))
                every = np.arange(len(src_rows))
                self.copy_rows(staged, every, src, src_rows, cols)
                src, src_rows = staged, every
        if not len(dst_rows) or not cols:
            return
        pieces = _segments(dst_rows, src_rows, heads, dst_len, self.shape(src)[2], cols, src_col, d_head)
        self._copy([(view(src, s, (n,)), view(dst, d, (n,))) for d, s, n in pieces])

    def to_host(self, x: ort.OrtValue) -> np.ndarray:
        """A copy in host memory (a test's or a diagnostic's read; never on the decode path)."""
        return np.array(x.numpy(), copy=True)


# ----- views -------------------------------------------------------------------------------------
class _DLTensor(ctypes.Structure):
    """DLPack's DLTensor, the first member of the DLManagedTensor a "dltensor" capsule holds."""

    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def view(base: ort.OrtValue, offset: int, shape: Sequence[int]) -> ort.OrtValue:
    """Elements [offset, offset + prod(shape)) of a C-contiguous OrtValue, as an OrtValue over its memory."""
    size, total = math.prod(shape), math.prod(base.shape())
    if offset < 0 or offset + size > total:
        raise ValueError(f"elements [{offset}, {offset + size}) outside a tensor of {total}")
    capsule = base.__dlpack__()
    tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    dims = (ctypes.c_int64 * len(shape))(*shape)  # copied by ORT's TensorShape
    tensor.data = (tensor.data or 0) + offset * (tensor.bits // 8)
    tensor.ndim, tensor.shape = len(shape), dims
    return ort.OrtValue.from_dlpack(capsule)


def _dtype(x: ort.OrtValue) -> type:
    """The numpy type of an OrtValue's elements."""
    return {"tensor(float)": np.float32, "tensor(float16)": np.float16}[x.data_type()]


def _overlap(a: ort.OrtValue, b: ort.OrtValue) -> bool:
    """Whether two OrtValues' memory ranges intersect."""
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.tensor_size_in_bytes() and b0 < a0 + a.tensor_size_in_bytes()


# ----- segments ----------------------------------------------------------------------------------
def _segments(dst_rows: np.ndarray, src_rows: np.ndarray, heads: int, dst_len: int, src_len: int,
              cols: int, src_col: int, d_head: int) -> list[tuple[int, int, int]]:
    """(dst offset, src offset, elements) of each contiguous piece of a row copy."""
    if cols == dst_len == src_len and not src_col:
        row = heads * cols * d_head
        breaks = np.flatnonzero((np.diff(dst_rows) != 1) | (np.diff(src_rows) != 1)) + 1
        starts = np.concatenate([[0], breaks])
        lengths = np.diff(np.concatenate([starts, [len(dst_rows)]]))
        return list(zip((dst_rows[starts] * row).tolist(), (src_rows[starts] * row).tolist(),
                        (lengths * row).tolist(), strict=True))
    head = np.arange(heads)
    dst_at = ((dst_rows[:, None] * heads + head) * dst_len) * d_head
    src_at = ((src_rows[:, None] * heads + head) * src_len + src_col) * d_head
    pairs = zip(dst_at.ravel().tolist(), src_at.ravel().tolist(), strict=True)
    return [(d, s, cols * d_head) for d, s in pairs]


def _run(rows: np.ndarray) -> np.ndarray | slice:
    """rows as a slice when they are consecutive and increasing (basic indexing, no temporary)."""
    first = int(rows[0])
    if len(rows) == 1 or (np.diff(rows) == 1).all():
        return slice(first, first + len(rows))
    return rows


# ----- transfers ---------------------------------------------------------------------------------
def _copy_tensors(pairs: Pairs) -> None:
    """One ONNX Runtime copy of every pair, on their device."""
    ort.copy_tensors([s for s, _ in pairs], [d for _, d in pairs], None)


def _memmove(pairs: Pairs) -> None:
    """Host-memory copies (the "cpu" device, for which ORT's environment has no data transfer)."""
    for s, d in pairs:
        ctypes.memmove(d.data_ptr(), s.data_ptr(), s.tensor_size_in_bytes())


def _through_host(pairs: Pairs) -> None:
    """Each pair down to host memory and up again (when ORT cannot copy on the device)."""
    for s, d in pairs:
        d.update_inplace(s.numpy())


_TRANSFERS: dict[str, Callable[[Pairs], None]] = {
    "copy_tensors": _copy_tensors, "memmove": _memmove, "host": _through_host}


def _can_copy_tensors(device: str, device_id: int) -> str | None:
    """None if onnxruntime.copy_tensors copies between views on the device, else why not."""
    try:
        probe = ort.OrtValue.ortvalue_from_shape_and_type([2], np.float32, device, device_id)
        _copy_tensors([(view(probe, 0, (1,)), view(probe, 1, (1,)))])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own types
        return str(exc)
    return None


def _choose_transfer(device: str, device_id: int) -> str:
    """How rows are copied on the device: copy_tensors, memmove on the host, or through host memory."""
    why = _can_copy_tensors(device, device_id)
    if why is not None and device == "cuda" and CUDA_LIBRARY.is_file():
        try:  # as onnxruntime does on import for builds with the CUDA plugin EP
            ort.register_execution_provider_library(CUDA, str(CUDA_LIBRARY))
        except Exception as exc:  # noqa: BLE001 - "already registered" or a library that cannot load
            log.debug("register_execution_provider_library(%s): %s", CUDA, exc)
        why = _can_copy_tensors(device, device_id)
    if why is None:
        return "copy_tensors"
    if device == "cpu":
        return "memmove"
    log.warning("onnxruntime.copy_tensors cannot copy on %s:%d (%s): KV-cache rows are copied through "
                "host memory", device, device_id, why)
    return "host"
