"""The process's resident memory (service/ops/memory.py): the kernel's peak, its reset, and the peak of a
block of work, by the kernel or by sampling where the peak cannot be reset."""

from __future__ import annotations

import numpy as np
import pytest

from service.ops.memory import PeakWatch, peak_resident_bytes, reset_peak, resident_bytes

MIB = 2**20
SLACK = 4 * MIB  # the kernel's resident-memory counters are per-thread caches, synced now and then


def touched(size: int) -> np.ndarray:
    """`size` bytes written to, so that they are resident."""
    block = np.empty(size, np.uint8)
    block.fill(1)
    return block


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
    if not reset_peak():
        pytest.skip("this kernel's peak (VmHWM) cannot be reset here")
    with PeakWatch() as watch:
        block = touched(64 * MIB)
        del block
    assert watch.kernel and watch.peak - watch.start >= 64 * MIB - SLACK
    with PeakWatch() as watch:  # reset again: the 64 MiB of before are not this block's
        pass
    assert watch.peak - watch.start < 64 * MIB


@pytest.mark.parametrize("kernel", [True, False])
def test_a_block_sees_memory_it_still_holds_at_its_end_by_either_method(kernel):
    with PeakWatch(kernel) as watch:
        block = touched(64 * MIB)
    assert (kernel or not watch.kernel) and watch.peak - watch.start >= 64 * MIB - SLACK
    assert resident_bytes() >= watch.start + 64 * MIB - SLACK
    del block
