"""podman's command line as the image tooling runs it, and the pip settings a build takes from this machine.

Every call goes through the runc runtime (crun refuses hybrid cgroup hierarchies) with resource limits
no higher than this process's own (a container may not raise them without CAP_SYS_RESOURCE, so podman's
defaults can be refused).
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

RUNTIME = "runc"
NPROC = 4096  # processes per container (fewer when this process may have fewer)
# pip settings that mean the same inside a build; paths of this machine (find-links, cert,
# constraint, file:// indexes) do not, and are left out
PIP_KEYS = {"index-url": "PIP_INDEX_URL", "extra-index-url": "PIP_EXTRA_INDEX_URL",
            "trusted-host": "PIP_TRUSTED_HOST", "default-timeout": "PIP_DEFAULT_TIMEOUT",
            "timeout": "PIP_DEFAULT_TIMEOUT", "retries": "PIP_RETRIES"}
URL_KEYS = ("index-url", "extra-index-url")


class PodmanError(RuntimeError):
    """A podman command failed: the command and what it printed."""


def available() -> str | None:
    """None when podman is installed, else why not (one line)."""
    if shutil.which("podman") is None:
        return "podman is not installed (`make image-tools` installs podman, runc and debootstrap)"
    if shutil.which(RUNTIME) is None:
        return f"{RUNTIME} is not installed (`make image-tools`)"
    return None


def ulimits() -> list[str]:
    """--ulimit flags within this process's hard limits (open files, processes)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = NPROC if nproc == resource.RLIM_INFINITY else min(nproc, NPROC)
    nofile = 1 << 20 if nofile == resource.RLIM_INFINITY else nofile
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def argv(*args: str) -> list[str]:
    """The podman command line of `args`, on the runc runtime."""
    return ["podman", "--runtime", RUNTIME, *args]


def podman(*args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run podman (bounded); PodmanError naming the command and its output when it fails and `check`."""
    try:
        done = subprocess.run(argv(*args), capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise PodmanError(f"podman {' '.join(args[:3])} ... took over {timeout:g} s") from exc
    if check and done.returncode != 0:
        raise PodmanError(f"`podman {' '.join(args)}` exited {done.returncode}: "
                          f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return done


def inspect(kind: str, name: str) -> dict:
    """`podman {image,container} inspect` of one object."""
    (found,) = json.loads(podman(kind, "inspect", name).stdout)
    return found


@dataclass(frozen=True)
class PipSettings:
    """pip settings for a build: PIP_* build arguments, and the CA bundle pip verifies TLS with (a file of
    this machine, passed as the build secret `pip-cert`, never stored in a layer)."""

    args: dict[str, str] = field(default_factory=dict)
    cert: Path | None = None

    def build_flags(self) -> list[str]:
        """`podman build` flags passing these settings."""
        flags = [f for key, value in sorted(self.args.items()) for f in ("--build-arg", f"{key}={value}")]
        return [*flags, "--secret", f"id=pip-cert,src={self.cert}"] if self.cert else flags


def pip_settings(entries: Sequence[str] | None = None) -> PipSettings:
    """This machine's pip configuration for a build: indexes reachable over HTTP(S), trusted hosts, timeout,
    retries and the CA bundle (`pip config list` lines, its environment variables included; read from pip
    when not given). Local paths (find-links, constraints, file:// indexes) mean nothing in a build."""
    if entries is None:
        listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                                text=True, timeout=60, check=False)
        entries = listed.stdout.splitlines() if listed.returncode == 0 else []
    found: dict[str, str] = {}
    cert: Path | None = None
    for line in entries:
        key, sep, value = line.partition("=")
        name, value = key.rsplit(".", 1)[-1], value.strip().strip("'\"")
        if not sep or not value:
            continue
        if name == "cert" and Path(value).is_file():
            cert = Path(value)
        if name not in PIP_KEYS:
            continue
        if name in URL_KEYS:
            value = " ".join(u for u in value.split() if urlparse(u).scheme in ("http", "https"))
        if value:
            found[PIP_KEYS[name]] = value
    return PipSettings(found, cert)
