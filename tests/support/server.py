"""Servers of the tests: the configuration of in-process servers (BackgroundServer) of the tiny
bundle, their health, and real server processes (`python -m service.server` or any command) with
their log files, free ports and a clean environment."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.config import ServerConfig
from tests.support import REPO_ROOT
from tests.support.polling import wait_until

TEXTS = ["the 4217 cat.", "Anna saw 3 red apples on day 12.", "we 7 big.",
         "the cat saw 1000000 big red apples on the day we 31st."]
MAX_BATCH = 8
MESSAGE_LIMIT = 64 * 1024
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def server_config(bundle: Path, **overrides) -> ServerConfig:
    """A config for tests: loopback, free port, CPU, no metrics endpoint and no HTTP server unless
    asked (http_port=0: a free port), no sentence cache unless asked (a test that sends a text twice
    decodes it twice: tests/service/scheduling/test_sentence_cache.py tests the cache)."""
    values = {"bundle": bundle, "port": 0, "metrics_port": -1, "http_port": -1, "sentence_cache_bytes": 0,
              "providers": ("CPUExecutionProvider",),
              "max_batch_size": MAX_BATCH, "max_message_bytes": MESSAGE_LIMIT} | overrides
    return ServerConfig(**values)


def health_status(channel: grpc.Channel, service: str = "") -> int:
    """A server's health status (grpc.health.v1 Check), overall by default."""
    request = health_pb2.HealthCheckRequest(service=service)
    return health_pb2_grpc.HealthStub(channel).Check(request, timeout=10).status


# ----- server processes ---------------------------------------------------------------------------
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_env() -> dict[str, str]:
    """This process's environment without any TRANSLATOR_* setting (each test sets its own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TRANSLATOR_")}


@dataclass
class ServerProcess:
    """A running `python -m service.server` (or any command) with its log files."""

    proc: subprocess.Popen
    stdout: Path
    stderr: Path

    def logs(self) -> str:
        """Both log files, for assertion messages."""
        return f"stdout:\n{self.stdout.read_text()}\nstderr:\n{self.stderr.read_text()}"

    def alive(self) -> bool:
        """Still running."""
        return self.proc.poll() is None

    def exit_code(self, timeout: float = 60.0) -> int:
        """Wait (bounded) for the process to exit; its exit code."""
        return self.proc.wait(timeout=timeout)


@contextmanager
def running(argv: Sequence[str], env: Mapping[str, str], cwd: Path, log_dir: Path) -> Iterator[ServerProcess]:
    """Start `argv` (output to log_dir); on exit SIGTERM it, wait (bounded), kill it if still there."""
    log_dir.mkdir(parents=True, exist_ok=True)
    out, err = log_dir / "stdout.log", log_dir / "stderr.log"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(list(argv), env=dict(env), cwd=cwd, stdout=stdout, stderr=stderr,
                                stdin=subprocess.DEVNULL)
    server = ServerProcess(proc, out, err)
    try:
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def wait_for_port_file(server: ServerProcess, port_file: Path, timeout: float = 120.0) -> int:
    """The port a server wrote to its --port-file once it serves (it must not have died first)."""
    wait_until(lambda: port_file.exists() or not server.alive(), "the server's port file", timeout)
    assert server.alive(), server.logs()
    return int(port_file.read_text().strip())


# The real entry point with every decoder step slowed down by SLOW_STEP_S seconds (part of what the
# signal tests test: a server surely busy when the signal comes).
SLOW_SERVER = """
import os, sys, time
from service.runtime.cache.backends import HostBackend
run = HostBackend.decode
pause = float(os.environ["SLOW_STEP_S"])
def slow(self, *args, **kwargs):
    time.sleep(pause)
    return run(self, *args, **kwargs)
HostBackend.decode = slow
from service.server import main
sys.exit(main(sys.argv[1:]))
"""


@contextmanager
def slow_server(bundle: Path, tmp_path: Path, *flags: str,
                step_s: float) -> Iterator[tuple[ServerProcess, int]]:
    """A SLOW_SERVER process of `bundle` on a free loopback port (CPU, no metrics endpoint unless
    `flags` ask for one): (process, port) once it serves; stopped on exit."""
    port_file = tmp_path / "port"
    argv = [sys.executable, "-c", SLOW_SERVER, "--bundle", str(bundle), "--port", "0", "--port-file",
            str(port_file), "--metrics-port", "-1", "--http-port", "-1", "--providers",
            "CPUExecutionProvider", *flags]
    env = base_env() | {"SLOW_STEP_S": str(step_s), "PYTHONPATH": str(REPO_ROOT)}
    with running(argv, env, REPO_ROOT, tmp_path / "server") as server:
        yield server, wait_for_port_file(server, port_file)
