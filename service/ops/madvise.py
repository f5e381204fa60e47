"""madvise(2) through the C library (Linux): the one place the service calls it (service/ops/mapped.py,
service/ops/hugepages.py)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library with madvise's signature declared (OSError where it cannot be loaded)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise.restype = ctypes.c_int
    return libc


def madvise(address: int, length: int, advice: int) -> int:
    """madvise(address, length, advice): 0 on success, else the errno (OSError without a C library)."""
    if _libc().madvise(ctypes.c_void_p(address), ctypes.c_size_t(length), advice) == 0:
        return 0
    return ctypes.get_errno()
