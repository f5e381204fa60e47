"""The process's resident memory, as the kernel counts it."""

from __future__ import annotations

import os

_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int:
    """Resident set size of this process in bytes (/proc/self/statm; 0 where there is no /proc)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0
