"""Huge pages under newly resident anonymous memory (service/ops/hugepages.py): which mappings and blocks
qualify (a made-up /proc/self/maps and pagemap), and on this kernel that a fully written private mapping
ends up in huge pages with the same bytes and no more resident memory, while a block with one untouched
page is left alone."""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import mmap
import sys
from pathlib import Path

import numpy as np
import pytest

from service.ops import hugepages
from service.ops.hugepages import HUGE_PAGE, anonymous_ranges, huge_pages_for, resident_blocks

PAGE, MADV_DONTNEED = 4096, 4  # <sys/mman.h> on Linux
MAPS = """\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/python3
00651000-00652000 rw-p 00051000 08:02 173521      /usr/bin/python3
00652000-00e00000 rw-p 00000000 00:00 0           [heap]
7f0000000000-7f0000a00000 rw-p 00000000 00:00 0
7f0000a00000-7f0000c00000 rw-s 00000000 00:01 1234 /dev/zero (deleted)
7f0000c00000-7f0000e00000 r--p 00000000 00:00 0
7f0000e00000-7f0001000000 rw-p 00000000 08:02 999  bundle/weights.data
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0   [stack]
"""


def test_only_private_writable_memory_backed_by_no_file():
    assert anonymous_ranges(MAPS) == [(0x00652000, 0x00E00000), (0x7F0000000000, 0x7F0000A00000)]


def test_blocks_are_the_aligned_ones_whose_every_page_is_present():
    page = 4096
    per_block = HUGE_PAGE // page
    start = 3 * HUGE_PAGE + 5 * page  # unaligned: the first whole block starts at 4 * HUGE_PAGE
    end = 8 * HUGE_PAGE + 7 * page
    entries = np.zeros(end // page, np.uint64)
    entries[start // page:end // page] = np.uint64(1 << 63)  # every page of the range present...
    entries[6 * per_block + 17] = np.uint64(1 << 62)  # ...but one of block 6, swapped out
    pagemap = io.BytesIO(entries.tobytes())
    got = resident_blocks([(start, end)], pagemap, page)
    assert got == {4 * HUGE_PAGE, 5 * HUGE_PAGE, 7 * HUGE_PAGE}  # 3 partial, 6 not all present, 8 partial
    assert resident_blocks([(start, start + HUGE_PAGE)], pagemap, page) == set()  # no whole block inside


def smaps_of(address: int) -> dict[str, int]:
    """kB figures of the /proc/self/smaps entry of the mapping holding address."""
    found: dict[str, int] = {}
    inside = False
    for line in Path("/proc/self/smaps").read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5:
            lo, hi = (int(a, 16) for a in fields[0].split("-"))
            inside = lo <= address < hi
        elif inside and fields[0].endswith(":") and len(fields) >= 2 and fields[1].isdigit():
            found[fields[0][:-1]] = found.get(fields[0][:-1], 0) + int(fields[1])
    return found


def isolated(size: int, keep: list) -> np.ndarray:
    """`size` bytes of private anonymous memory in a mapping of their own (a PROT_NONE page on either
    side keeps the kernel from merging it with a neighbour), as a uint8 array; `keep` holds the mmap."""
    whole = mmap.mmap(-1, size + 2 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    keep.append(whole)
    base = np.frombuffer(whole, np.uint8).__array_interface__["data"][0]
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for guard in (base, base + PAGE + size):
        assert libc.mprotect(ctypes.c_void_p(guard), PAGE, 0) == 0, ctypes.get_errno()
    return np.frombuffer(whole, np.uint8)[PAGE:PAGE + size]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and madvise: Linux only")
def test_new_fully_written_memory_ends_up_in_huge_pages_with_the_same_bytes():
    size, keep = 10 * HUGE_PAGE, []
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    with huge_pages_for() as collapsed:
        a, b = isolated(size, keep), isolated(size, keep)
        data = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8)
        a[:] = data
        b[:] = 1
        holes = range(0, size, HUGE_PAGE // 2)  # pages half a block apart: every whole block has one
        for hole in holes:
            assert libc.madvise(ctypes.c_void_p(address(b) + hole), PAGE, MADV_DONTNEED) == 0
        full_before, holey_before = smaps_of(address(a)), smaps_of(address(b))
    if not collapsed or collapsed[0] == 0:
        pytest.skip("this kernel does not collapse memory into huge pages (MADV_COLLAPSE, Linux 6.1+)")
    full_after, holey_after = smaps_of(address(a)), smaps_of(address(b))
    assert full_before["Size"] == holey_before["Size"] == size // 1024  # two mappings of their own
    assert holey_before["Rss"] == (size - PAGE * len(holes)) // 1024
    assert full_after["AnonHugePages"] >= 9 * HUGE_PAGE // 1024  # every whole block inside the mapping
    assert full_after["Rss"] == full_before["Rss"]  # the same pages, now huge: nothing added
    assert np.array_equal(a, data)  # the same bytes at the same addresses
    assert holey_after["Rss"] == holey_before["Rss"] and holey_after.get("AnonHugePages", 0) == 0
    del a, b
    for m in keep:
        m.close()


def address(arr: np.ndarray) -> int:
    """Where an array's data starts."""
    return arr.__array_interface__["data"][0]


def test_sessions_on_the_cpu_ask_for_huge_pages_and_report_them(monkeypatch, tiny_bundle):
    from service.runtime.model import sessions as S
    from service.runtime.runner import Runner

    asked = []

    class Fake:
        def __init__(self, enabled: bool = True) -> None:
            asked.append(enabled)

        def __enter__(self) -> list[int]:
            return [123 * HUGE_PAGE]

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(S, "huge_pages_for", Fake)
    runner = Runner(tiny_bundle, providers=["CPUExecutionProvider"])
    assert asked == [True] and runner.sessions.huge_page_bytes == 123 * HUGE_PAGE


def test_nothing_is_asked_where_proc_cannot_be_read(monkeypatch):
    monkeypatch.setattr(hugepages, "MAPS", hugepages.Path("/nonexistent/maps"))
    with huge_pages_for() as collapsed:
        pass
    assert collapsed == []
