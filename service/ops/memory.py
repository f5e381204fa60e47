"""The process's resident memory, as the kernel counts it: now, and its peak over a stretch of work."""

from __future__ import annotations

import os
import threading
from types import TracebackType

_PAGE = os.sysconf("SC_PAGE_SIZE")
STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"
SAMPLE_S = 0.001  # PeakWatch's sampling period where the kernel's peak cannot be reset


def resident_bytes() -> int:
    """Resident set size of this process in bytes (/proc/self/statm; 0 where there is no /proc)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def peak_resident_bytes(status: str = STATUS) -> int:
    """The process's peak resident set size in bytes since it started or since `reset_peak` (VmHWM of
    /proc/self/status); 0 where it cannot be read."""
    try:
        with open(status, encoding="ascii") as lines:
            for line in lines:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0


def reset_peak(clear_refs: str = CLEAR_REFS, status: str = STATUS) -> bool:
    """Restart the kernel's peak (VmHWM) from the current resident set size (Linux 4.0+: "5" written to
    /proc/self/clear_refs); False where it cannot, and then the peak is not to be trusted."""
    try:
        with open(clear_refs, "w", encoding="ascii") as refs:
            refs.write("5")
    except OSError:
        return False
    return peak_resident_bytes(status) > 0


class PeakWatch:
    """The highest resident set size of this process while a `with` block runs: the kernel's peak after a
    reset, or where that is not possible, the highest of samples a thread takes every SAMPLE_S."""

    def __init__(self, kernel: bool = True) -> None:
        """Watch with the kernel's peak when `kernel` (and it can be reset), else by sampling."""
        self.kernel, self.start, self._sampled = kernel, 0, 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakWatch:
        """Start watching: reset the kernel's peak, or start sampling."""
        self.start = self._sampled = resident_bytes()
        self.kernel = self.kernel and reset_peak()
        if not self.kernel:
            self._thread = threading.Thread(target=self._sample, name="peak-rss", daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        """Keep the highest resident set size seen until told to stop."""
        while not self._stop.wait(SAMPLE_S):
            self._sampled = max(self._sampled, resident_bytes())

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        """Stop watching (the peak stays readable)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sampled = max(self._sampled, resident_bytes())

    @property
    def peak(self) -> int:
        """The highest resident set size since the block started (so far, read inside it)."""
        return max(self._sampled, peak_resident_bytes() if self.kernel else 0)
