"""A real `python -m service.server` process for benchmarks: loopback, a free port, its memory.

    with ServerProcess(bundle, "continuous", ["--max-batch-size", "64"]) as server:
        server.address, server.pid, server.rss_kib(), server.peak_rss_kib(), server.scrape()

The server writes its bound port to a file (`--port 0 --port-file`), which is written only once
the model is loaded, warmed up and SERVING. Leaving the block sends SIGTERM (a clean drain) and
waits, killing the process only if it does not exit in time. Memory comes from
/proc/<pid>/status (VmRSS, and VmHWM: the peak resident set since the process started); the
server's own Prometheus metrics (on a free loopback port) give rows per step and step times. The sentence
cache is off (NO_CACHE) unless `extra_args` turn it on.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 180.0
# the benchmarks send the same texts again and again to measure decoding: the sentence cache would answer
# them instead (and perf_analyzer, whose windows it then answers whole, finds no inference to count); a
# benchmark of the cache passes --sentence-cache-bytes in extra_args, which come after and win
NO_CACHE = ("--sentence-cache-bytes", "0")
STOP_TIMEOUT_S = 30.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_status_kib(pid: int, key: str) -> int:
    """A memory field of /proc/<pid>/status in KiB ("VmRSS", "VmHWM", ...)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0])
    raise KeyError(f"{key} not in /proc/{pid}/status")


class ServerProcess:
    """A translation server subprocess on 127.0.0.1 with one batching mode (context manager)."""

    def __init__(self, bundle: Path, batching: str, extra_args: Sequence[str] = (),
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.bundle, self.batching = Path(bundle), batching
        self.extra_args, self.start_timeout_s = list(extra_args), start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.metrics_port = 0
        self._dir: tempfile.TemporaryDirectory | None = None

    @property
    def address(self) -> str:
        """host:port of the running server."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """Process id of the running server."""
        assert self.proc is not None, "server not started"
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        """The server's stdout + stderr."""
        assert self._dir is not None, "server not started"
        return Path(self._dir.name) / "server.log"

    def command(self, port_file: Path) -> list[str]:
        """The server's command line."""
        return [sys.executable, "-m", "service.server", "--bundle", str(self.bundle), "--host", "127.0.0.1",
                "--port", "0", "--port-file", str(port_file), "--metrics-port", str(self.metrics_port),
                "--http-port", "-1",
                "--batching", self.batching, "--log-level", "WARNING", *NO_CACHE,
                *self.extra_args]

    def start(self) -> ServerProcess:
        """Start the server and wait until it listens and serves (bounded)."""
        self._dir = tempfile.TemporaryDirectory(prefix="bench-server-")
        port_file = Path(self._dir.name) / "port"
        self.metrics_port = free_port()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command(port_file), cwd=REPO_ROOT, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        end = time.monotonic() + self.start_timeout_s
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > end:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"the {self.batching} server did not start:\n{tail}")
            time.sleep(0.05)
        self.port = int(port_file.read_text().strip())
        return self

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's output."""
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def rss_kib(self) -> int:
        """Resident set size now, KiB."""
        return proc_status_kib(self.pid, "VmRSS")

    def peak_rss_kib(self) -> int:
        """Peak resident set size since the server started, KiB."""
        return proc_status_kib(self.pid, "VmHWM")

    def scrape(self) -> dict[str, float]:
        """The server's Prometheus samples now, each summed over its models ("translator_batch_size_sum":
        ...); samples with other labels (method, code, le, ...) are left out."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode("utf-8")
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if set(s.labels) <= {"model", "version"}:
                    out[s.name] = out.get(s.name, 0.0) + s.value
        return out

    def stop(self) -> int | None:
        """SIGTERM (drain), wait, kill if needed; the exit code."""
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(STOP_TIMEOUT_S)
            code = self.proc.returncode
            self.proc = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
        return code

    def __enter__(self) -> ServerProcess:
        """Start on entering a with-block."""
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        """Stop on leaving a with-block."""
        self.stop()
