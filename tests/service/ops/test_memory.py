"""The process's resident memory (service/ops/memory.py): the kernel's peak, its reset, and the peak of a
block of work, by the kernel or by sampling where the peak cannot be reset.

The blocks of work run in a fresh interpreter on a fresh anonymous mapping: in the suite's process, other
threads (servers of earlier tests winding down) free memory while a block runs, and the allocator may hand
out pages that are already resident, so neither the peak nor its absence would be the block's own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from service.ops.memory import peak_resident_bytes, reset_peak
from tests.support import REPO_ROOT

MIB = 2**20
SLACK = 4 * MIB  # the kernel's resident-memory counters are per-CPU caches, synced now and then
BLOCK = 64 * MIB

WATCH = """
import json, mmap, sys
from service.ops.memory import PeakWatch, reset_peak, resident_bytes
kernel, free = sys.argv[1] == "kernel", sys.argv[2] == "free"
def touched(size):
    block = mmap.mmap(-1, size)  # fresh pages, whatever the allocator holds
    for offset in range(0, size, mmap.PAGESIZE):
        block[offset] = 1
    return block
with PeakWatch(kernel) as watch:
    block = touched(int(sys.argv[3]))
    if free:
        block.close()
seen = {"kernel": watch.kernel, "peak": watch.peak - watch.start, "held": resident_bytes() - watch.start}
with PeakWatch(kernel) as again:  # the peak read live is this block's from now on
    pass
print(json.dumps({**seen, "empty": again.peak - again.start, "resettable": reset_peak()}))
"""


def watched(kernel: bool, free: bool) -> dict:
    """What a PeakWatch saw of a BLOCK-byte block touched in a fresh interpreter (closed inside the block
    when `free`), and of an empty block after it."""
    method, end = "kernel" if kernel else "sample", "free" if free else "hold"
    argv = [sys.executable, "-c", WATCH, method, end, str(BLOCK)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=True)
    return json.loads(done.stdout)


def test_the_peak_is_read_from_vmhwm_and_is_0_where_unreadable(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmPeak:\t  900 kB\nVmHWM:\t    5120 kB\nVmRSS:\t 4000 kB\n")
    assert peak_resident_bytes(str(status)) == 5120 * 1024
    assert peak_resident_bytes(str(tmp_path / "absent")) == 0
    status.write_text("Name:\tpython\n")
    assert peak_resident_bytes(str(status)) == 0


def test_a_peak_that_cannot_be_reset_says_so(tmp_path):
    assert not reset_peak(str(tmp_path / "no" / "clear_refs"))


def test_a_block_sees_the_peak_of_memory_it_freed_where_the_kernel_peak_can_be_reset():
    seen = watched(kernel=True, free=True)
    if not seen["resettable"]:
        pytest.skip("this kernel's peak (VmHWM) cannot be reset here")
    assert seen["kernel"] and seen["peak"] >= BLOCK - SLACK, seen
    assert seen["held"] < BLOCK - SLACK, seen  # the block was freed: only the peak saw it
    assert seen["empty"] < BLOCK - SLACK, seen  # reset again: the block of before is not the next one's


@pytest.mark.parametrize("kernel", [True, False])
def test_a_block_sees_memory_it_still_holds_at_its_end_by_either_method(kernel):
    seen = watched(kernel=kernel, free=False)
    assert (kernel or not seen["kernel"]) and seen["peak"] >= BLOCK - SLACK, seen
    assert seen["held"] >= BLOCK - SLACK, seen
