"""`make gpu-check KIT=DIR`: the GPU check from a kit, with no network. Standard library only (it runs
before anything is installed).

Steps, each logged to OUT/check.log and recorded in OUT/summary.json:
1. verify: every part present with its sha256, joined into the archive, every file checked after
   extraction into KIT/unpacked (skipped when the same kit was unpacked before);
2. install: a private venv KIT/venv (no pip needed on the host: pip runs from the kit's own wheel),
   `pip install --no-index --no-compile --find-links KIT/unpacked/wheels` (no bytecode written ahead:
   the tier imports a few of the modules), no pip configuration read; the generated gRPC modules copied
   beside their .proto files;
3. cuda: where each CUDA library the provider needs was found (OUT/cuda-libraries.json): the host's
   own, from its system folders or NVIDIA's pip wheels of the host's Python (put on
   LD_LIBRARY_PATH), or the kit's (a kit built with --with-cuda-libraries);
4. tier: `pytest -m gpu` on the kit's GPU test files with TRANSLATOR_REQUIRE_GPU=1 and the prebuilt
   fixtures (OUT/gpu-tier.xml): no CUDA device is a usage error naming what is missing;
5. bench: `python -m bench.gpu` (with the kit's opus-mt skeleton, materialized into KIT/models once),
   its last line in OUT/bench-gpu.json.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from gpukit.parts import ARCHIVE, KitError, Manifest, join, unpack

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES_ENV = "TRANSLATOR_TEST_FIXTURES"  # read by tests/support/tiny.py
STAMP = ".kit-sha256"  # in KIT/unpacked and KIT/venv: the archive they were made from
_REPORT = ("import json; from service.runtime.model.cuda import library_report, cuda_unavailable; "
           "print(json.dumps({'libraries': library_report(), 'unavailable': cuda_unavailable()}))")


class Log:
    """Lines to the terminal and to OUT/check.log."""

    def __init__(self, path: Path) -> None:
        self.file: TextIO = path.open("w", encoding="utf-8")

    def __call__(self, line: str) -> None:
        """One line, flushed."""
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()

    def run(self, argv: Sequence[str], env: dict[str, str] | None = None) -> tuple[int, str]:
        """Run a command with its output to both; return its exit code and its output."""
        self(f"$ {' '.join(argv)}")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, cwd=REPO_ROOT, errors="replace")
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            sys.stdout.write(line)
            self.file.write(line)
        self.file.flush()
        return proc.wait(), "".join(lines)


def check_target(manifest: Manifest) -> None:
    """The kit is for this Python and this machine, or KitError saying which kit to build instead."""
    info = manifest.info
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if info.get("python") != here or sys.implementation.name != "cpython":
        raise KitError(f"the kit is for CPython {info.get('python')}; this is {sys.implementation.name} "
                       f"{here} ({sys.executable}): build one with `make gpu-kit KIT_PYTHON={here}` or "
                       f"run with PYTHON=python{info.get('python')}")
    if info.get("machine") not in (None, platform.machine()):
        raise KitError(f"the kit is for {info.get('machine')} ({info.get('platform')}); this machine is "
                       f"{platform.machine()}")


def unpacked(kit: Path, manifest: Manifest, log: Log) -> Path:
    """KIT/unpacked holding the verified archive's files (joined and checked once per kit)."""
    work = kit / "unpacked"
    if (work / STAMP).is_file() and (work / STAMP).read_text().strip() == manifest.archive.sha256:
        log(f"verify: {work} already holds this kit ({manifest.archive.sha256[:12]})")
        return work
    log(f"verify: {len(manifest.parts)} parts in {kit}")
    archive = join(kit, manifest, kit / ARCHIVE)
    shutil.rmtree(work, ignore_errors=True)
    try:
        unpack(archive, work, manifest.files)
    finally:
        archive.unlink()
    (work / STAMP).write_text(manifest.archive.sha256 + "\n")
    log(f"verify: {len(manifest.files)} files checked against their sha256")
    return work


def host_cuda_library_dirs() -> list[Path]:
    """The lib folders of NVIDIA's pip wheels (nvidia-cublas, nvidia-cudnn-cu13, ...) installed for the
    host's own Python: the kit's venv does not see them, so their folders go on LD_LIBRARY_PATH."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or ()) if spec else []
    return sorted({lib for root in roots for lib in Path(root).glob("*/lib") if any(lib.glob("*.so*"))})


def step_env(work: Path) -> dict[str, str]:
    """The environment of the CUDA report, the tier and the benchmark."""
    dirs = [str(d) for d in host_cuda_library_dirs()]
    path = os.pathsep.join([*dirs, os.environ.get("LD_LIBRARY_PATH", "")]).strip(os.pathsep)
    return {**os.environ, FIXTURES_ENV: str(work / "fixtures"), "TRANSLATOR_REQUIRE_GPU": "1",
            **({"LD_LIBRARY_PATH": path} if path else {})}


def offline_pip_env() -> dict[str, str]:
    """The environment of pip on the host: no PIP_* variable and no configuration file is read."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return env | {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def install(kit: Path, work: Path, manifest: Manifest, log: Log) -> Path:
    """The python of KIT/venv with the kit's requirements installed from its wheels alone."""
    venv = kit / "venv"
    python = venv / "bin" / "python"
    if (venv / STAMP).is_file() and (venv / STAMP).read_text().strip() == manifest.archive.sha256:
        log(f"install: {venv} already holds this kit's packages")
        return python
    shutil.rmtree(venv, ignore_errors=True)
    rc, _ = log.run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    if rc != 0:
        raise KitError(f"python -m venv could not create {venv} (exit {rc})")
    pip = work / "wheels" / str(manifest.info["pip"])
    command = [str(python), str(pip / "pip"), "install", "--no-index", "--no-compile", "--find-links",
               str(work / "wheels"), "--no-warn-script-location", "--progress-bar", "off",
               "-r", str(work / "requirements.txt")]
    rc, output = log.run(command, env=offline_pip_env())
    if rc != 0:
        raise KitError(f"pip install --no-index from the kit failed (exit {rc}): "
                       f"{output.strip().splitlines()[-1] if output.strip() else 'no output'}")
    (venv / STAMP).write_text(manifest.archive.sha256 + "\n")
    return python


def install_protos(work: Path, log: Log) -> int:
    """Copy the kit's generated gRPC modules beside their .proto files (newer than them: not stale)."""
    copied = 0
    for src in sorted((work / "protos").rglob("*")):
        if src.is_file():
            dst = REPO_ROOT / src.relative_to(work)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            copied += 1
    log(f"install: {copied} generated gRPC modules into protos/")
    return copied


class Steps:
    """Each step's exit code and seconds, rewritten to OUT/summary.json as it ends."""

    def __init__(self, out: Path) -> None:
        self.path = out / "summary.json"
        self.summary: dict = {"kit": None, "python": sys.version.split()[0], "steps": [], "ok": False}
        self.started = time.monotonic()

    def done(self, name: str, rc: int, **more: object) -> int:
        """Record the step that began at the last call (or at the start); return its exit code."""
        now = time.monotonic()
        self.summary["steps"].append({"step": name, "exit_code": rc, "seconds": round(now - self.started, 1),
                                      **more})
        self.started = now
        self.path.write_text(json.dumps(self.summary, indent=2) + "\n", encoding="utf-8")
        return rc


def prepare(kit: Path, log: Log, steps: Steps) -> tuple[Manifest, Path, Path]:
    """Steps 1 and 2: the verified kit, its unpacked folder and the python of its venv."""
    step = "verify"
    try:
        manifest = Manifest.read(kit)
        steps.summary["kit"] = manifest.info
        check_target(manifest)
        work = unpacked(kit, manifest, log)
        steps.done(step, 0)
        step = "install"
        python = install(kit, work, manifest, log)
        install_protos(work, log)
        steps.done(step, 0)
    except KitError as exc:
        log(f"gpu-check: {exc}")
        steps.done(step, 2, error=str(exc))
        raise
    return manifest, work, python


def run_check(kit: Path, out: Path, bench_args: Sequence[str] = ()) -> int:
    """The whole check; the exit code of make gpu-check (2: the kit could not be used)."""
    out.mkdir(parents=True, exist_ok=True)
    log, steps = Log(out / "check.log"), Steps(out)
    try:
        manifest, work, python = prepare(kit, log, steps)
    except KitError:
        return 2
    env = step_env(work)
    for folder in host_cuda_library_dirs():
        log(f"cuda: NVIDIA's pip libraries of the host's Python: {folder}")
    rc, output = log.run([str(python), "-c", _REPORT], env=env)
    report = json.loads(output.strip().splitlines()[-1]) if rc == 0 and output.strip() else {}
    (out / "cuda-libraries.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    steps.done("cuda", rc, unavailable=report.get("unavailable"))
    rc, _ = log.run([str(python), "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider",
                     f"--junitxml={out / 'gpu-tier.xml'}", *manifest.info["gpu_tests"]], env=env)
    if steps.done("tier", rc) != 0:
        log(f"gpu-check: the GPU tier failed (exit {rc}); the log is {out / 'check.log'}")
        return rc
    skeleton = work / "opus-mt"
    model = ["--skeleton", str(skeleton), "--work", str(kit / "models")]
    if not (skeleton / "skeleton.json").is_file():  # a kit made with --opus-mt none
        model = ["--model", "default"]
    rc, output = log.run([str(python), "-m", "bench.gpu", *model, *bench_args], env=env)
    lines = output.strip().splitlines()
    if rc == 0 and lines:
        (out / "bench-gpu.json").write_text(lines[-1] + "\n", encoding="utf-8")
    steps.summary["ok"] = rc == 0
    steps.done("bench", rc)
    log(f"gpu-check: {'passed' if rc == 0 else f'the GPU benchmark failed (exit {rc})'}; results in {out}")
    return rc
