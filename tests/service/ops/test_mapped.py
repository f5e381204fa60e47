"""Dropping a file's mapped pages (service/ops/mapped.py): only clean mappings of the named files, and
the pages come back as read, with the file's bytes."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import pytest

from service.ops.mapped import clean_mappings, drop_file_pages

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps and madvise: Linux")
MIB = 2**20


def smaps_entry(start: int, perms: str, path: str, anonymous_kb: int) -> str:
    """One mapping as /proc/self/smaps writes it (the fields clean_mappings reads)."""
    return (f"{start:x}-{start + 0x2000:x} {perms} 00000000 fe:00 42    {path}\n"
            f"Size:        8 kB\nRss:         8 kB\nAnonymous:   {anonymous_kb} kB\n"
            "VmFlags: rd mr mw me\n")


def test_only_clean_non_executable_mappings_of_the_files(tmp_path):
    weights, other = tmp_path / "weights.data", tmp_path / "other.data"
    smaps = "".join([smaps_entry(0x1000, "rw-p", str(weights), 0),  # ONNX Runtime's copy-on-write map
                     smaps_entry(0x9000, "r--s", str(weights), 0),
                     smaps_entry(0x20000, "rw-p", str(weights), 4),  # a page was written: left alone
                     smaps_entry(0x30000, "r-xp", str(weights), 0),  # executable: left alone
                     smaps_entry(0x40000, "r--p", str(other), 0),
                     smaps_entry(0x50000, "rw-p", "", 0)])
    assert clean_mappings([weights], smaps) == [(0x1000, 0x2000), (0x9000, 0x2000)]
    assert clean_mappings([weights, other], smaps)[-1] == (0x40000, 0x2000)
    assert clean_mappings([], smaps) == []


def mapping_rss(address: int) -> int:
    """Resident bytes of this process's mapping that starts at address."""
    lines = Path("/proc/self/smaps").read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{address:x}-"))
    return next(int(line.split()[1]) * 1024 for line in lines[at + 1:] if line.startswith("Rss:"))


@linux
def test_dropped_pages_leave_the_resident_set_and_read_back_as_the_file(tmp_path):
    import ctypes

    data = bytes(range(256)) * (4 * MIB // 256)
    path = tmp_path / "weights.data"
    path.write_bytes(data)
    with path.open("r+b") as f:
        clean = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        written = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    try:
        addresses = [ctypes.addressof(ctypes.c_char.from_buffer(m)) for m in (clean, written)]
        assert all(clean[i] == data[i] for i in range(0, len(data), 4096))  # every page read: resident
        written[0] = 7  # a page of its own (copy on write): that mapping is not clean
        assert mapping_rss(addresses[0]) >= 4 * MIB
        assert drop_file_pages([path]) == 4 * MIB  # the clean mapping only
        assert mapping_rss(addresses[0]) < MIB
        assert written[0] == 7 and written[1:4096] == data[1:4096]
        assert clean[2 * MIB: 2 * MIB + 4096] == data[2 * MIB: 2 * MIB + 4096]  # faulted back: the file
        assert mapping_rss(addresses[0]) < 4 * MIB
    finally:
        for m in (clean, written):
            m.close()


def test_nothing_to_drop_for_an_unmapped_file(tmp_path):
    path = tmp_path / "weights.data"
    path.write_bytes(b"\0" * 8192)
    assert drop_file_pages([path]) == 0
