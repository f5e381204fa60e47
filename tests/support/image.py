"""The CPU image under test (deploy/image): built once per session with podman on the Debian base, or the
image TRANSLATOR_TEST_IMAGE names, as built (`make image-check` builds first); why podman cannot run
containers here (the image modules' one skip line); what README.md gives the server (flags, variables,
command lines); the host's own translations of the default bundle, to compare the container's with."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.image import base, build, container
from deploy.image.podman import PodmanError, available, inspect
from service.config import build_parser
from tests.support import REPO_ROOT

IMAGE_ENV = "TRANSLATOR_TEST_IMAGE"
CACHE = REPO_ROOT / "runs" / "image"  # git-ignored: the base's tarball and the build log
BUNDLE = REPO_ROOT / "artifacts" / "default" / "bundle"
README = REPO_ROOT / "README.md"
SERVER = "service.server"
_state: dict[str, Any] = {}


def cannot_run(*networks: str) -> str | None:
    """Why podman cannot run containers here (on each of `networks`, host by default), in one line, or
    None: an image module skips as a whole on it, at collection."""
    return available() or next((why for n in networks or ("host",) if (why := container.cannot_run(n))), None)


@dataclass(frozen=True)
class Image:
    """The image under test: its tag, what `podman image inspect` says, the build's seconds (None: not
    built by this session)."""

    tag: str
    inspected: dict[str, Any]
    build_seconds: float | None

    @property
    def config(self) -> dict[str, Any]:
        """The image's Config (User, Env, ExposedPorts, Entrypoint, ...)."""
        return self.inspected["Config"]

    @property
    def env(self) -> dict[str, str]:
        """The image's environment variables."""
        return dict(item.split("=", 1) for item in self.config.get("Env") or [])

    @property
    def exposed(self) -> set[int]:
        """The ports the image exposes."""
        return {int(port.split("/")[0]) for port in self.config.get("ExposedPorts") or {}}

    @property
    def user(self) -> tuple[int, int]:
        """(uid, gid) the image runs as."""
        uid, _, gid = self.config["User"].partition(":")
        return int(uid), int(gid or uid)


def _prepare() -> Image | Exception:
    """The image (built unless TRANSLATOR_TEST_IMAGE names one), or why it cannot be had."""
    try:
        tag = os.environ.get(IMAGE_ENV)
        if tag:
            return Image(tag, inspect("image", tag), None)
        made = base.ensure(CACHE)
        built = build.build(REPO_ROOT, made.tag, CACHE / "build.log")
        print(f"image {built.tag} built in {built.seconds:.1f} s ({built.cached} of {built.steps} steps "
              "from cache)")
        return Image(built.tag, inspect("image", built.tag), built.seconds)
    except (PodmanError, RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return exc


def image_under_test() -> Image:
    """The session's image, prepared once; the test fails when it cannot be had (podman runs containers
    here: the module checked that when it was collected)."""
    if "image" not in _state:
        _state["image"] = _prepare()
    found = _state["image"]
    if isinstance(found, Exception):
        pytest.fail(f"the CPU image could not be built: {found}", pytrace=False)
    return found


# ----- what README.md gives the server ------------------------------------------------------------------
def readme_server_lines() -> list[list[str]]:
    """The arguments of every command line of README.md that runs the server (`-m service.server ...`),
    comments dropped."""
    lines = []
    for line in README.read_text(encoding="utf-8").splitlines():
        words = shlex.split(line.split("#", 1)[0]) if f"-m {SERVER}" in line else []
        if SERVER in words:
            lines.append(words[words.index(SERVER) + 1:])
    assert lines, "README.md runs no server (`python -m service.server ...`)"
    return lines


def readme_server_flags() -> set[str]:
    """Every flag README.md gives the server: on its server command lines, and any other flag it names that
    the server of this checkout takes (README.md also names the client's and the exporter's flags)."""
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", README.read_text(encoding="utf-8")))
    ours = {flag for action in build_parser({})._actions for flag in action.option_strings}
    return {w for line in readme_server_lines() for w in line if w.startswith("--")} | (named & ours)


def readme_variables() -> dict[str, str | None]:
    """Every TRANSLATOR_* variable README.md names, with the value it gives it (`NAME=value`) if any."""
    text = README.read_text(encoding="utf-8")
    found: dict[str, str | None] = {name: None for name in re.findall(r"\bTRANSLATOR_[A-Z0-9_]+\b", text)}
    for name, value in re.findall(r"\b(TRANSLATOR_[A-Z0-9_]+)=([^\s`]+)", text):
        found[name] = value
    assert found, "README.md names no TRANSLATOR_* variable"
    return found


# ----- the host's answers -------------------------------------------------------------------------------
@functools.cache
def host_runner():
    """The service's own runner of the default bundle on this machine's CPU."""
    from service.runtime.runner import Runner

    return Runner(BUNDLE, providers=["CPUExecutionProvider"])


def host_translation(text: str) -> str:
    """The default bundle's greedy translation of `text`, decoded alone on this machine."""
    return host_runner().translate([text])[0][0].text


def repository_of(bundle: Path, root: Path, model: str) -> Path:
    """A model repository `root` in Triton's layout (`model`/1/ = a copy of `bundle`) that any user of a
    container can read."""
    import shutil

    shutil.copytree(bundle, root / model / "1")
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root
