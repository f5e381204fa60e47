"""Huge pages under the weights that the CPU kernels packed while a model's sessions opened (Linux).

ONNX Runtime's CPU MatMul and Gemm kernels copy their weights into a packed layout on the heap when a session
opens (prepacking), and a decoder step at batch 1 streams every one of them from memory. In 4 KiB pages the
hardware prefetchers stop at every page boundary and each page takes a TLB entry; in 2 MiB pages a weight
streams faster (docs/performance.md has the figures). Transparent huge pages are often opt-in (`madvise`
mode), and ONNX Runtime does not opt in.

`huge_pages_for(...)` records which 2 MiB-aligned blocks of the process's anonymous private writable memory
are fully resident (/proc/self/maps, and the present bits of /proc/self/pagemap, which need no privilege),
runs the block of code (opening sessions), and then asks the kernel to back each block that has become fully
resident with one huge page (madvise MADV_COLLAPSE, Linux 6.1 and later). The same bytes stay at the same
addresses and no page is added: only fully resident blocks are collapsed, so resident memory does not grow.
Where the kernel refuses (older kernels, THP `never`), or elsewhere than Linux, nothing changes.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from service.ops.madvise import madvise

log = logging.getLogger(__name__)

HUGE_PAGE = 2 << 20  # x86-64 and arm64 (4 KiB base pages) transparent huge page
MADV_COLLAPSE = 25  # <sys/mman.h>, Linux 6.1
MAPS, PAGEMAP = Path("/proc/self/maps"), Path("/proc/self/pagemap")
PRESENT = np.uint64(1 << 63)  # pagemap entry bit: the page is in memory


def anonymous_ranges(maps: str) -> list[tuple[int, int]]:
    """(start, end) of each private writable mapping of /proc/self/maps backed by no file (anonymous
    memory and the heap)."""
    found = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or not fields[1].startswith("rw") or fields[1][3] != "p":
            continue
        if len(fields) == 6 and fields[5].strip() not in ("", "[heap]"):
            continue  # a file, the stack, vdso...
        start, end = (int(a, 16) for a in fields[0].split("-"))
        found.append((start, end))
    return found


def resident_blocks(ranges: Iterable[tuple[int, int]], pagemap: BinaryIO,
                    page: int = 4096) -> set[int]:
    """Addresses of the HUGE_PAGE-aligned blocks inside `ranges` whose every page is present."""
    per_block = HUGE_PAGE // page
    blocks: set[int] = set()
    for start, end in ranges:
        lo, hi = -(-start // HUGE_PAGE) * HUGE_PAGE, end // HUGE_PAGE * HUGE_PAGE
        if hi <= lo:
            continue
        pagemap.seek(lo // page * 8)
        entries = np.frombuffer(pagemap.read((hi - lo) // page * 8), np.uint64)
        if len(entries) != (hi - lo) // page:
            continue  # the mapping changed under us: leave it
        full = ((entries & PRESENT) != 0).reshape(-1, per_block).all(axis=1)
        blocks.update(lo + HUGE_PAGE * int(i) for i in np.flatnonzero(full))
    return blocks


def _resident_now() -> set[int]:
    """This process's fully resident anonymous blocks (empty where /proc cannot tell)."""
    with PAGEMAP.open("rb", buffering=0) as pagemap:
        return resident_blocks(anonymous_ranges(MAPS.read_text(encoding="utf-8", errors="replace")),
                               pagemap, os.sysconf("SC_PAGE_SIZE"))


def collapse(blocks: Iterable[int]) -> int:
    """madvise(MADV_COLLAPSE) over each block; bytes the kernel backed with huge pages."""
    done = 0
    for block in sorted(blocks):
        if (err := madvise(block, HUGE_PAGE, MADV_COLLAPSE)) == 0:
            done += HUGE_PAGE
        elif err in (errno.EINVAL, errno.EPERM):  # this kernel will not: stop asking
            log.debug("no huge pages for the packed weights: %s", os.strerror(err))
            break
    return done


@contextlib.contextmanager
def huge_pages_for(enabled: bool = True) -> Iterator[list[int]]:
    """Around code that allocates long-lived memory (opening sessions): afterwards, the blocks that became
    fully resident are backed by huge pages. Yields a list that then holds the bytes collapsed."""
    result: list[int] = []
    linux = enabled and sys.platform.startswith("linux") and os.sysconf("SC_PAGE_SIZE") == 4096
    try:
        before = _resident_now() if linux else None
    except OSError as e:
        log.debug("no huge pages for the packed weights: %s", e)
        before = None
    yield result
    if before is not None:
        try:
            result.append(collapse(_resident_now() - before))
        except OSError as e:
            log.debug("no huge pages for the packed weights: %s", e)
