"""The layering contracts of pyproject.toml ([tool.importlinter]) hold, and would catch a breach; the
tests mirror the package tree and share helpers only through tests/support."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

PACKAGES = ("service", "export", "model", "textnorm", "interface", "bench", "gpukit")
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
    assert "0 broken" in run.stdout and "10 kept" in run.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("service/runtime/decoding/search.py", "from service.scheduling import jobs", "service layers"),
    ("service/domain/types.py", "from service.api import status", "service layers"),
    ("service/scheduling/worker.py", "import grpc", "gRPC and protobuf only in the api layer"),
    ("service/runtime/decoding/batch.py", "import asyncio", "the runtime is synchronous"),
    ("service/models/repository.py", "import aiohttp", "HTTP (aiohttp) only in the api layer"),
    ("service/runtime/runner.py", "import torch", "the serving path is torch-free"),
    ("service/runtime/model/bundle.py", "from export import build", "the serving path is torch-free"),
    ("service/runtime/decoding/search.py", "from service.runtime.decoding import batch", "no import cycles"),
    ("service/api/http/generate.py", "from service.api.grpc import context", "HTTP adapts to the data plane"),
    ("service/api/http/score.py", "from protos.inference import grpc_service_pb2",
     "HTTP adapts to the data plane"),
    ("service/api/http/score.py", "from service.api.http import generate", "no adapter imports another"),
    ("service/api/grpc/modelmesh.py", "from service.api.grpc import kserve", "no adapter imports another"),
    ("service/dataplane/calls.py", "import grpc", "gRPC and protobuf only in the api layer"),
    ("model/config.py", "from export import names", "packages import only downward"),
    ("textnorm/verbalize.py", "from model import config", "packages import only downward"),
    ("service/runtime/runner.py", "from textnorm import verbalize", "the serving path is torch-free"),
    ("gpukit/check.py", "import numpy", "the GPU kit's check runs before anything is installed"),
])
def test_a_breach_is_reported(tmp_path, module, line, contract):
    root = copy_project(tmp_path)
    with (root / module).open("a", encoding="utf-8") as f:
        f.write(f"\n{line}  # noqa\n")
    run = lint_imports(root)
    assert run.returncode != 0
    assert f"{contract}" in run.stdout and "BROKEN" in run.stdout.split(contract, 1)[1].splitlines()[0]


def test_no_module_is_over_the_line_budget():
    files = [p for package in (*PACKAGES, "deploy") for p in (REPO_ROOT / package).rglob("*.py")]
    long = {str(p.relative_to(REPO_ROOT)): n for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


# ----- the tests themselves ---------------------------------------------------------------------
TESTS = REPO_ROOT / "tests"
SUPPORT = TESTS / "support"


def python_files() -> list[Path]:
    """Every Python file under tests/."""
    return sorted(TESTS.rglob("*.py"))


def test_tests_mirror_the_package_tree():
    """Each test folder is a package named after the package it tests (tests/service/runtime tests
    service/runtime); only tests/support, this module, test_repository.py and test_kernels.py (the suite's
    second run under other CPU kernels) are outside that scheme."""
    folders = {p.parent for p in python_files()} - {TESTS}
    for folder in folders:
        assert (folder / "__init__.py").is_file(), f"{folder} is not a package"
        rel = folder.relative_to(TESTS)
        assert rel.parts[0] == "support" or (REPO_ROOT / rel).is_dir(), f"tests/{rel} mirrors no package"
    at_top = {p.name for p in TESTS.glob("*.py")}
    assert at_top == {"__init__.py", "conftest.py", "test_architecture.py", "test_repository.py",
                      "test_kernels.py"}, at_top


def test_tests_import_only_the_support_package_and_the_project():
    """No module imports a test module or a conftest.py: shared helpers live in tests/support, fixtures
    in conftest.py files."""
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{path}: relative import")
            names = [node.module] if isinstance(node, ast.ImportFrom) else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                if name and (name == "tests" or name.startswith("tests.")):
                    assert name.startswith("tests.support"), f"{path} imports {name}"
                assert "conftest" not in (name or "").split("."), f"{path} imports {name}"


def called(call: ast.Call) -> str:
    """The name a call calls (`time.sleep(...)` and `sleep(...)` both call "sleep")."""
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def test_one_runner_fixture_and_no_sleeps_outside_the_poll_helper():
    """`runner` is defined once (tests/conftest.py); nothing sleeps to synchronise except the bounded
    poll loops of tests/support/polling.py (a sleep inside a string, such as a slowed-down server
    process's code, is no call here)."""
    runners, sleeps = [], []
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name == "runner":
                runners.append(path.relative_to(REPO_ROOT).as_posix())
            if isinstance(node, ast.Call) and called(node) == "sleep" and path != SUPPORT / "polling.py":
                sleeps.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert runners == ["tests/conftest.py"], runners
    assert not sleeps, sleeps
