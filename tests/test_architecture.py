"""The layering contracts of pyproject.toml ([tool.importlinter]) hold, and would catch a breach."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

PACKAGES = ("service", "export", "model", "interface", "bench")
MAX_LINES = 400  # one concept per file: a file past this is due to be split
LINT = ("import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(no_cache=True, no_logo=True))")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """Run import-linter on the project at `root` with its pyproject.toml contracts."""
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def copy_project(to: Path) -> Path:
    """The packages and pyproject.toml of this repository, copied under `to` (no caches)."""
    for package in PACKAGES:
        shutil.copytree(REPO_ROOT / package, to / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", to / "pyproject.toml")
    return to


def test_every_contract_is_kept():
    run = lint_imports(REPO_ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout and "6 kept" in run.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("service/runtime/search.py", "from service.scheduling import jobs", "service layers"),
    ("service/domain/types.py", "from service.api import status", "service layers"),
    ("service/scheduling/worker.py", "import grpc", "gRPC and protobuf only in the api layer"),
    ("service/runtime/batch.py", "import asyncio", "the runtime is synchronous"),
    ("service/runtime/runner.py", "import torch", "the serving path is torch-free"),
    ("service/runtime/bundle.py", "from export import build", "the serving path is torch-free"),
    ("service/runtime/search.py", "from service.runtime import batch", "no import cycles"),
    ("model/config.py", "from export import names", "packages import only downward"),
])
def test_a_breach_is_reported(tmp_path, module, line, contract):
    root = copy_project(tmp_path)
    with (root / module).open("a", encoding="utf-8") as f:
        f.write(f"\n{line}  # noqa\n")
    run = lint_imports(root)
    assert run.returncode != 0
    assert f"{contract}" in run.stdout and "BROKEN" in run.stdout.split(contract, 1)[1].splitlines()[0]


def test_no_module_is_over_the_line_budget():
    files = [p for package in PACKAGES for p in (REPO_ROOT / package).rglob("*.py")]
    long = {str(p.relative_to(REPO_ROOT)): n for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
