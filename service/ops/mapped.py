"""Dropping a weights file's pages from this process's mappings once the sessions are open (Linux).

ONNX Runtime memory-maps a bundle's weights file (private, copy-on-write mappings, one per tensor and
session). Kernels that prepack a weight (MatMul, Gemm) read all of it through the mapping while the session is
created and then use their packed copy, but the mapping stays where another node of the session reads the same
tensor: the tied embedding's rows, which the decoder's lookup gathers and its output projection prepacks
(export/lowering/tied.py). The pages the prepacking touched then count in the process's resident memory
although only the looked-up rows are read again. `drop_file_pages` calls madvise(MADV_DONTNEED) over the
mappings of the given files that hold no page of their own (smaps `Anonymous: 0 kB`: nothing was written,
every page is the file's, so the call drops only clean page cache references, and a later read faults back the
pages it touches). Elsewhere than Linux it does nothing.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from service.ops.madvise import madvise

log = logging.getLogger(__name__)

MADV_DONTNEED = 4  # <sys/mman.h> on Linux
SMAPS = Path("/proc/self/smaps")


def clean_mappings(files: Iterable[Path], smaps: str | None = None) -> list[tuple[int, int]]:
    """(start, length) of each non-executable mapping of one of `files` in /proc/self/smaps that holds
    no anonymous (written, copied-on-write) page."""
    wanted = {os.path.realpath(f) for f in files}
    if smaps is None:
        smaps = SMAPS.read_text(encoding="utf-8", errors="replace")
    found, current, clean = [], None, False
    for line in [*smaps.splitlines(), "end"]:
        fields = line.split(maxsplit=5)
        if "-" in fields[0] and len(fields) >= 5:  # a header: address perms offset dev inode [path]
            if current is not None and clean:
                found.append(current)
            start, end = (int(a, 16) for a in fields[0].split("-"))
            mine = len(fields) == 6 and fields[5] in wanted and "x" not in fields[1]
            current, clean = ((start, end - start), False) if mine else (None, False)
        elif fields[0] == "end" and current is not None and clean:
            found.append(current)
        elif current is not None and fields[0] == "Anonymous:":
            clean = fields[1] == "0"
    return found


def drop_file_pages(files: Iterable[Path]) -> int:
    """madvise(MADV_DONTNEED) over the clean mappings of `files` (`clean_mappings`); bytes advised
    (0 elsewhere than Linux, or where madvise is unavailable or refuses)."""
    if not sys.platform.startswith("linux"):
        return 0
    advised = 0
    try:
        for start, length in clean_mappings(files):
            if (err := madvise(start, length, MADV_DONTNEED)) == 0:
                advised += length
            else:
                log.debug("madvise(%#x, %d) failed: %s", start, length, os.strerror(err))
    except OSError as e:
        log.debug("not dropping mapped weights pages: %s", e)
    return advised
