"""No pickle anywhere on the serving path; checkpoints are loaded with weights_only=True."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

ROOT = REPO_ROOT
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}


def _sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py") if "gen" not in p.parts)


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _problems(path: Path) -> list[str]:
    """Unsafe imports and deserializing calls in one file, as 'file:line what'."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
            found += [f"{where} import {n}" for n in names if n.split(".")[0] in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UNSAFE_MODULES:
            found.append(f"{where} from {node.module} import")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            if node.func.attr == "load" and owner == "torch":
                flag = _keyword(node, "weights_only")
                if not (isinstance(flag, ast.Constant) and flag.value is True):
                    found.append(f"{where} torch.load without weights_only=True")
            if node.func.attr in {"load", "loads"} and owner in {"np", "numpy"}:
                flag = _keyword(node, "allow_pickle")
                if flag is not None and not (isinstance(flag, ast.Constant) and flag.value is False):
                    found.append(f"{where} numpy load with allow_pickle")
    return found


@pytest.mark.parametrize("folders", [("service", "protos"), ("model", "export", "bench")])
def test_no_unsafe_deserialization(folders):
    files = _sources(*folders)
    assert len(files) >= 5  # the scan really looked at the project's modules
    assert [p for f in files for p in _problems(f)] == []


def test_the_scan_finds_what_it_looks_for(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    bad = tmp_path / "bad.py"
    bad.write_text("import pickle\nfrom dill import loads\nimport torch, numpy as np\n"
                   "torch.load('x')\ntorch.load('x', weights_only=False)\n"
                   "torch.load('x', weights_only=True)\n"
                   "np.load('x', allow_pickle=True)\nnp.load('x')\n")
    assert _problems(bad) == [
        "bad.py:1 import pickle", "bad.py:2 from dill import",
        "bad.py:4 torch.load without weights_only=True",
        "bad.py:5 torch.load without weights_only=True", "bad.py:7 numpy load with allow_pickle",
    ]
