"""The benchmark's model repositories and servers: copies of a bundle as independent models, Triton's layout.

A repository's first model is a link to the bundle itself, every other one a copy of its files: each
model maps files of its own, as different models would (two links to one file would share its pages
in the page cache, and so in the resident set of a process that maps both).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from bench.common.serverproc import ServerProcess
from bench.common.workload import DEFAULT_BUNDLE, REPO_ROOT

LARGE_ROOT = REPO_ROOT / "runs" / "bench-marian"  # bench.marian's <x>/bundle and <x>/ct2
MANIFEST = "bundle.json"
CT2_MODEL = "model.bin"


def large_bundle(root: Path = LARGE_ROOT) -> Path | None:
    """The opus-mt-shaped bundle bench.marian imported (`<root>/<x>/bundle`), one with a CTranslate2
    conversion beside it first; None when there is none."""
    found = sorted(p for p in root.glob("*/bundle") if (p / MANIFEST).is_file())
    with_ct2 = [p for p in found if ct2_dir(p) is not None]
    return (with_ct2 or found or [None])[0]


def ct2_dir(bundle: Path) -> Path | None:
    """CTranslate2's float32 conversion of the same weights beside a bench.marian bundle, if any."""
    folder = Path(bundle).parent / "ct2"
    return folder if (folder / CT2_MODEL).is_file() else None


def bundle_bytes(bundle: Path) -> int:
    """Bytes of a bundle's files on disk."""
    return sum(p.stat().st_size for p in Path(bundle).iterdir() if p.is_file())


def make_repository(root: Path, bundle: Path, names: Sequence[str]) -> dict[str, Path]:
    """`root/<name>/1/` for each name: a link to `bundle` for the first, a copy for the others; each
    model's version folder by name."""
    bundle = Path(bundle).resolve()
    folders = {}
    for i, name in enumerate(names):
        version = root / name / "1"
        version.parent.mkdir(parents=True, exist_ok=True)
        if i == 0:
            version.symlink_to(bundle, target_is_directory=True)
        else:
            shutil.copytree(bundle, version, symlinks=False)
        folders[name] = version
    return folders


def repository_server(root: Path, mode: str, load: Sequence[str] = (),
                      extra: Sequence[str] = ()) -> ServerProcess:
    """A server (not started) of the repository at root in a control mode, loading `load` at start."""
    args = ["--model-repository", str(root), "--model-control-mode", mode]
    for name in load:
        args += ["--load-model", name]
    return ServerProcess(DEFAULT_BUNDLE, "continuous", [*args, *extra])  # --bundle unused here


def bundle_server(bundle: Path, extra: Sequence[str] = ()) -> ServerProcess:
    """A single-model server (not started) of one bundle, default flags otherwise."""
    return ServerProcess(bundle, "continuous", list(extra))
