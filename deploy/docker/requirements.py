"""Pinned pip requirements of the serving image, read from pyproject.toml (the one place versions live).

    python3 deploy/docker/requirements.py --runtime cuda   # core + [serve] (onnxruntime-gpu)
    python3 deploy/docker/requirements.py --runtime cpu    # the same with onnxruntime instead
    python3 deploy/docker/requirements.py --tools          # code generators of the build stage
    /opt/venv/bin/python deploy/docker/requirements.py --runtime cpu --unused   # installed, never served

Standard library only: it runs in the image's builder stage before anything is installed (--unused runs
with the installed environment's Python and reads its metadata, and its markers with `packaging` there).
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
GPU_RUNTIME, CPU_RUNTIME = "onnxruntime-gpu", "onnxruntime"
TOOLS = ("grpcio-tools",)  # taken from the [dev] extra, at the version pinned there
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
# requirements the service never uses: tokenizers' client of the Hugging Face Hub (the service reads
# tokenizer files from its bundles and downloads nothing), with what only it pulls in
NOT_SERVED = ("huggingface-hub",)


def _name(requirement: str) -> str:
    """Normalised project name of a requirement line ("grpcio-tools==1.81.1" -> "grpcio-tools")."""
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def serving_requirements(project: dict, runtime: str) -> list[str]:
    """Core dependencies plus the [serve] extra; runtime "cpu" swaps onnxruntime-gpu for onnxruntime."""
    if runtime not in ("cuda", "cpu"):
        raise ValueError(f"runtime must be cuda or cpu, got {runtime!r}")
    lines = [*project["dependencies"], *project["optional-dependencies"]["serve"]]
    if runtime == "cpu":
        lines = [CPU_RUNTIME + line.strip()[len(GPU_RUNTIME):] if _name(line) == GPU_RUNTIME else line
                 for line in lines]
    return lines


def tool_requirements(project: dict) -> list[str]:
    """The build-stage tools (grpcio-tools) as pinned in the [dev] extra."""
    dev = {_name(line): line for line in project["optional-dependencies"]["dev"]}
    missing = [tool for tool in TOOLS if tool not in dev]
    if missing:
        raise ValueError(f"pyproject.toml [dev] does not pin {', '.join(missing)}")
    return [dev[tool] for tool in TOOLS]


def applies(requirement: str) -> bool:
    """Whether a requirement of an installed distribution applies here: not an extra's, and its
    environment marker true (kept when `packaging` is not there to evaluate it)."""
    _, _, marker = requirement.partition(";")
    if "extra" in marker:
        return False
    if not marker.strip():
        return True
    try:
        from packaging.markers import Marker
    except ImportError:
        return True
    return Marker(marker.strip()).evaluate()


def unused(wanted: list[str], installed: dict[str, list[str]]) -> list[str]:
    """Installed distributions (normalised name -> its requirement lines) that no requirement in `wanted`
    reaches, following requirements that apply except into NOT_SERVED: what a serving image can drop
    (pip and setuptools too, which nothing serving requires)."""
    reached: set[str] = set()
    todo = [_name(line) for line in wanted]
    while todo:
        name = todo.pop()
        if name in reached or name in NOT_SERVED:
            continue
        reached.add(name)
        todo.extend(_name(r) for r in installed.get(name, []) if applies(r))
    return sorted(set(installed) - reached)


def installed_distributions() -> dict[str, list[str]]:
    """Normalised name -> requirement lines of every distribution this Python has installed."""
    from importlib.metadata import distributions

    return {_name(d.metadata["Name"]): list(d.requires or []) for d in distributions()}


def main(argv: Sequence[str] | None = None) -> int:
    """Print the requested requirement lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--runtime", choices=("cuda", "cpu"))
    group.add_argument("--tools", action="store_true")
    parser.add_argument("--unused", action="store_true", help="with --runtime: the installed distributions "
                        "that the serving requirements do not need")
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT)
    args = parser.parse_args(argv)
    project = tomllib.loads(args.pyproject.read_text(encoding="utf-8"))["project"]
    lines = tool_requirements(project) if args.tools else serving_requirements(project, args.runtime)
    if args.unused:
        if args.tools:
            parser.error("--unused goes with --runtime")
        lines = unused(lines, installed_distributions())
    sys.stdout.write("".join(line.strip() + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
