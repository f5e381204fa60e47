"""`podman build` of the CPU serving image on the local base (Docker image format, so that HEALTHCHECK is
kept; layers cached between builds), and the image's size layer by layer."""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from deploy.image.podman import PipSettings, PodmanError, argv, inspect, pip_settings, podman, ulimits

TAG = "localhost/translator:cpu"
BUILD_TIMEOUT_S = 1800
MB = 1_000_000
_STEP = re.compile(r"^\[\d+/\d+\] STEP \d+/\d+: ")


@dataclass(frozen=True)
class Build:
    """A finished build: the image's tag and id, its seconds, and how many steps ran or came from cache."""

    tag: str
    image_id: str
    seconds: float
    steps: int
    cached: int


@dataclass(frozen=True)
class Layer:
    """One layer of the image: its bytes and the instruction that made it."""

    size: int
    created_by: str

    @property
    def instruction(self) -> str:
        """The instruction without the shell prefix and content hash podman records."""
        text = re.sub(r"^/bin/sh -c (#\(nop\) )?", "", self.created_by.strip())
        return re.sub(r"\s+", " ", re.sub(r"(file|dir):[0-9a-f]{64} in ", "", text))


def command(context: Path, base: str, tag: str = TAG, pip: PipSettings | None = None) -> list[str]:
    """The `podman build` command line of the CPU image on `base`."""
    pip = pip_settings() if pip is None else pip
    return argv("build", "--format", "docker", "--layers", "--pull=never", "--network", "host", *ulimits(),
                "--build-arg", "RUNTIME=cpu", "--build-arg", f"CPU_IMAGE={base}", *pip.build_flags(),
                "--tag", tag, "--file", str(context / "Dockerfile"), str(context))


def build(context: Path, base: str, log: Path, tag: str = TAG, pip: PipSettings | None = None) -> Build:
    """Build the CPU image (its output to `log`); PodmanError with the log's tail when the build fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with log.open("w") as out:
        try:
            done = subprocess.run(command(context, base, tag, pip), cwd=context, stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=BUILD_TIMEOUT_S,
                                  check=False)
        except subprocess.TimeoutExpired as exc:
            raise PodmanError(f"the image build took over {BUILD_TIMEOUT_S} s (its log: {log})") from exc
    seconds = time.monotonic() - start
    text = log.read_text(errors="replace")
    if done.returncode != 0:
        tail = "\n".join(text.strip().splitlines()[-25:])
        raise PodmanError(f"the image build failed ({done.returncode}; its log: {log}):\n{tail}")
    lines = text.splitlines()
    steps = sum(1 for line in lines if _STEP.match(line) and ": FROM " not in line)  # FROM is never cached
    cached = sum(1 for line in lines if line.startswith("--> Using cache"))
    return Build(tag, inspect("image", tag)["Id"], seconds, steps, cached)


def layers(tag: str = TAG) -> list[Layer]:
    """The image's layers with their sizes, the base first (empty metadata layers left out)."""
    history = json.loads(podman("history", "--no-trunc", "--format", "json", tag).stdout)
    return [Layer(int(entry["size"]), entry.get("CreatedBy", "")) for entry in history[::-1] if entry["size"]]


def size(tag: str = TAG) -> int:
    """The image's bytes (every layer, uncompressed)."""
    return int(inspect("image", tag)["Size"])


def figures(tag: str = TAG) -> dict[str, object]:
    """The image's size in MB, total and per layer (instruction shortened)."""
    return {"image_mb": round(size(tag) / MB, 1),
            "layers_mb": [[round(layer.size / MB, 1), layer.instruction[:80]] for layer in layers(tag)]}
