"""Containers of the image as the checks run them: hardened like the Kubernetes manifests ask (read-only
root filesystem and no tmpfs unless given, no capabilities, no privilege escalation), started detached,
probed from outside (gRPC health on a loopback port), signalled, waited for and removed."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from deploy.image.podman import PodmanError, argv, inspect, podman, ulimits

HARDENED = ("--cap-drop", "ALL", "--security-opt", "no-new-privileges")
POLL_S = 0.05


@dataclass
class Container:
    """A started container: its name, and when `podman run` was called (time.monotonic)."""

    name: str
    started: float
    ports: dict[int, int] = field(default_factory=dict)  # container port -> loopback port published

    def logs(self) -> str:
        """What the container printed (stdout and stderr)."""
        done = podman("logs", self.name, check=False, timeout=60)
        return done.stdout + done.stderr

    def state(self) -> dict:
        """The container's State (Status, Running, ExitCode, Health, ...)."""
        return inspect("container", self.name)["State"]

    def running(self) -> bool:
        """Whether it still runs."""
        return bool(self.state()["Running"])

    def exec(self, *command: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """`podman exec` of a command in it (not checked)."""
        return podman("exec", self.name, *command, check=False, timeout=timeout)

    def healthcheck(self) -> subprocess.CompletedProcess[str]:
        """One run of the image's HEALTHCHECK command (`podman healthcheck run`; exit code 0 = healthy)."""
        return podman("healthcheck", "run", self.name, check=False, timeout=60)

    def signal(self, name: str = "TERM") -> None:
        """Send a signal to its main process."""
        podman("kill", "--signal", name, self.name, timeout=30)

    def wait(self, timeout: float) -> int:
        """Its exit code once it has exited (at most `timeout` seconds from now)."""
        done = podman("wait", self.name, timeout=timeout)
        return int(done.stdout.strip().splitlines()[-1])

    def remove(self) -> None:
        """Remove it, stopping it at once if it still runs."""
        podman("rm", "--force", "--time", "0", self.name, check=False, timeout=60)

    def address(self, port: int) -> str:
        """host:port on this machine's loopback where its `port` answers (published, or host network)."""
        return f"127.0.0.1:{self.ports.get(port, port)}"


def run(image: str, *, args: Sequence[str] = (), env: Mapping[str, str] | None = None, network: str = "host",
        read_only: bool = True, tmpfs: Sequence[str] = (), mounts: Mapping[Path, str] | None = None,
        publish: Sequence[int] = (), user: str | None = None, memory: str | None = None,
        entrypoint: str | None = None, name: str | None = None) -> Container:
    """Start a container of `image` detached; `mounts` host folder -> container path, read-only; `publish`
    container ports to free ports on this machine's loopback (not with the host network)."""
    name = name or f"translator-check-{uuid.uuid4().hex[:10]}"
    flags = ["--detach", "--name", name, "--network", network, *ulimits(), *HARDENED]
    if read_only:
        flags += ["--read-only", "--read-only-tmpfs=false"]  # podman's default would add tmpfs on /tmp, /run
    for path in tmpfs:
        flags += ["--tmpfs", path]
    for source, target in (mounts or {}).items():
        flags += ["--mount", f"type=bind,source={source},destination={target},ro=true"]
    for port in publish:
        flags += ["--publish", f"127.0.0.1::{port}"]
    for key, value in (env or {}).items():
        flags += ["--env", f"{key}={value}"]
    if user is not None:
        flags += ["--user", user]
    if memory is not None:
        flags += ["--memory", memory]
    if entrypoint is not None:
        flags += ["--entrypoint", entrypoint]
    started = time.monotonic()
    podman("run", *flags, image, *args, timeout=120)
    container = Container(name, started)
    for port in publish:
        published = podman("port", name, f"{port}/tcp", timeout=30).stdout.strip().splitlines()[0]
        container.ports[port] = int(published.rsplit(":", 1)[1])
    return container


def run_once(image: str, *command: str, entrypoint: str | None = None, network: str = "none",
             timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run a command in a throwaway container of `image` (read-only, hardened); its result, not checked."""
    flags = ["--rm", "--network", network, *ulimits(), *HARDENED, "--read-only", "--read-only-tmpfs=false"]
    if entrypoint is not None:
        flags += ["--entrypoint", entrypoint]
    return subprocess.run(argv("run", *flags, image, *command), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, check=False)


@functools.cache
def cannot_run(network: str = "host") -> str | None:
    """None when podman runs a container here on `network`, else why not (one line). The container needs
    no image: its root filesystem is this machine's `true` and the libraries it links."""
    binary = shutil.which("true")
    if binary is None:
        return "no `true` on this machine to run in a trivial container"
    files = [binary]
    if shutil.which("ldd") is not None:
        linked = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30, check=False)
        files += re.findall(r"(/\S+) \(0x", linked.stdout)
    with tempfile.TemporaryDirectory(prefix="podman-rootfs-") as root:
        for file in files:
            target = Path(root) / file.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, target)
        flags = ["--rm", "--network", network, *ulimits(), *HARDENED, "--rootfs", root]
        try:
            done = subprocess.run(argv("run", *flags, binary), capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"podman cannot run a container here ({network} network): {exc}"
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.strip().splitlines() if "level=" not in line] or [""]
    return f"podman cannot run a container here ({network} network): {lines[-1][-300:]}"


def health(address: str, timeout: float = 2.0) -> str:
    """The gRPC health status name at `address` (UNREACHABLE when the call fails)."""
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                               timeout=timeout)
        except grpc.RpcError:
            return "UNREACHABLE"
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def until_serving(container: Container, port: int, timeout: float = 120.0) -> float:
    """Poll gRPC health on the container's `port` until SERVING (bounded); seconds since `podman run`.
    PodmanError with its logs when it exits first or the time runs out."""
    end = time.monotonic() + timeout
    while True:
        if health(container.address(port), timeout=1.0) == "SERVING":
            return time.monotonic() - container.started
        state = container.state()
        if not state["Running"]:
            raise PodmanError(f"container {container.name} exited ({state['ExitCode']}) before serving:\n"
                              f"{container.logs()[-3000:]}")
        if time.monotonic() > end:
            raise PodmanError(f"container {container.name} not SERVING after {timeout:g} s:\n"
                              f"{container.logs()[-3000:]}")
        time.sleep(POLL_S)
