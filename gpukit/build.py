"""`make gpu-kit`: gather, on a machine with registry access, everything the GPU check needs that a CUDA
host with only Python lacks, for a target Python and platform, and cut it into parts.

The archive holds:
- wheels/: onnxruntime-gpu and the project's serving and test-runner requirements (pinned in
  pyproject.toml), downloaded for the target with `pip download --only-binary :all:`, and pip itself;
  with `--with-cuda-libraries` also the `cuda` extra (NVIDIA's CUDA 13 / cuDNN 9 / cuBLAS wheels,
  several GB), for a host that has nothing beyond the driver;
- requirements.txt: what the target installs from wheels/ with `--no-index`;
- protos/: the generated gRPC modules, so the target needs no grpcio-tools;
- fixtures/: the tiny bundles and texts the GPU tier decodes (tests/support/tiny.py), so the target
  needs no torch;
- opus-mt/: the opus-mt-shaped model's skeleton (gpukit/skeleton.py, a few MiB): bench/gpu materializes
  the bundle (fp32 + fp16) and CTranslate2's model of the same weights from it with numpy alone, so the
  kit carries neither torch nor 300 MB of weights; with CTranslate2's wheel (the `bench` extra's pin) for
  the comparison.
The manifest records the target, the GPU tier's test files and every file's and part's sha256.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path

from gpukit.parts import ARCHIVE, MANIFEST, MIB, Manifest, entry_of, pack, split

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PYTHON = "3.12"
DEFAULT_PLATFORM = "manylinux_2_28_x86_64"  # glibc >= 2.28: every CUDA 13 base image
DEFAULT_PART_MIB = 20
TEST_RUNNER = ("pytest", "pytest-timeout")  # from the dev extra: what runs the GPU tier
BENCH = ("ctranslate2",)  # from the bench extra: bench/gpu's reference engine
OPUS_MT = ("full", "quick", "none")  # the opus-mt skeleton's shape (quick: the small Marian one)
SKELETON_DIR = "opus-mt"
REQUIREMENTS = "requirements.txt"
_NAME = re.compile(r"^[A-Za-z0-9._-]+")
_MACHINE = re.compile(r"(x86_64|aarch64|ppc64le|s390x)$")
_MANYLINUX = re.compile(r"manylinux_2_(\d+)_(\w+)")


def _canonical(requirement: str) -> str:
    """The normalized project name of a requirement string ("pytest-timeout==2.4.0" -> "pytest-timeout")."""
    match = _NAME.match(requirement.strip())
    return re.sub(r"[-_.]+", "-", match.group(0)).lower() if match else ""


def requirements(with_cuda_libraries: bool = False, pyproject: Path = REPO_ROOT / "pyproject.toml"
                 ) -> list[str]:
    """The pinned requirements of the GPU check: the project's dependencies, the `serve` extra, the test
    runner from the `dev` extra, CTranslate2 from the `bench` extra and, when asked, the `cuda` extra."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    runner = [r for r in extras["dev"] if _canonical(r) in TEST_RUNNER]
    if len(runner) != len(TEST_RUNNER):
        raise RuntimeError(f"pyproject.toml's dev extra must pin {', '.join(TEST_RUNNER)}")
    bench = [r for r in extras["bench"] if _canonical(r) in BENCH]
    wanted = [*project["dependencies"], *extras["serve"], *runner, *bench,
              *(extras["cuda"] if with_cuda_libraries else ())]
    return list(dict.fromkeys(wanted))


def download_wheels(reqs: list[str], dest: Path, python: str, platform: str) -> None:
    """pip download the requirements and their dependencies as wheels for the target, and pip itself."""
    abi = "cp" + python.replace(".", "")
    target = ["--only-binary", ":all:", "--python-version", python, "--implementation", "cp",
              "--abi", abi, "--abi", "abi3", "--abi", "none",
              *(arg for tag in compatible_platforms(platform) for arg in ("--platform", tag))]
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(dest), *target]
    subprocess.run([*pip, *reqs], check=True)
    subprocess.run([*pip, "--no-deps", f"pip=={importlib.metadata.version('pip')}"], check=True)


def generated_protos(dest: Path) -> list[Path]:
    """Generate the gRPC modules (when stale) and copy them into dest, paths as under the repository."""
    from protos.codegen import generate, outputs, proto_files

    generate()
    copied = []
    for proto in proto_files():
        for out in outputs(proto):
            target = dest / out.relative_to(REPO_ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            copied.append(Path(shutil.copy2(out, target)))
    return copied


def fixtures_missing(prebuilt: Path) -> list[str]:
    """What a directory of prebuilt fixtures lacks of those `python -m tests.support.tiny DIR` writes."""
    from tests.support.tiny import PREBUILT_NAMES

    return [name for name in PREBUILT_NAMES if not (prebuilt / name).exists()]


def fixtures(dest: Path, prebuilt: Path | None = None) -> None:
    """The GPU tier's prebuilt fixtures (tests/support/tiny.py): copied from `prebuilt` (a directory that
    `python -m tests.support.tiny` wrote) when given, else built in a child process (torch)."""
    if prebuilt is not None:
        from tests.support.tiny import PREBUILT_NAMES

        dest.mkdir(parents=True)
        for name in PREBUILT_NAMES:
            (shutil.copytree if (prebuilt / name).is_dir() else shutil.copy2)(prebuilt / name, dest / name)
        return
    run = subprocess.run([sys.executable, "-m", "tests.support.tiny", str(dest)], cwd=REPO_ROOT,
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"building the GPU tier's fixtures failed (exit {run.returncode}):\n"
                           f"{run.stdout[-4000:]}{run.stderr[-4000:]}")


def gpu_test_files() -> list[str]:
    """The test files holding tests marked `gpu`, as pytest collects them here."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "--collect-only", "-q", "-m",
                          "gpu", "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=REPO_ROOT)
    files = sorted({line.split("::", 1)[0] for line in out.stdout.splitlines() if "::" in line})
    if out.returncode != 0 or not files:
        raise RuntimeError(f"collecting the GPU tier failed (exit {out.returncode}):\n"
                           f"{out.stdout}{out.stderr}")
    return files


def compatible_platforms(platform: str) -> list[str]:
    """The wheel platform tags a host of `platform` installs: for manylinux_2_Y, every older glibc and
    the legacy aliases (pip download takes only the tags it is given), and pure-Python wheels."""
    match = _MANYLINUX.fullmatch(platform)
    if match is None:
        return [platform, "any"]
    glibc, machine = int(match.group(1)), match.group(2)
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(glibc, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{name}_{machine}" for minor, name in legacy.items() if minor <= glibc]
    return [*tags, "any"]


def machine_of(platform: str) -> str:
    """The CPU architecture of a wheel platform tag ("manylinux_2_28_x86_64" -> "x86_64")."""
    match = _MACHINE.search(platform)
    if match is None:
        raise ValueError(f"platform {platform!r} names no CPU architecture (e.g. manylinux_2_28_x86_64)")
    return match.group(0)


def clear_kit(out: Path) -> None:
    """Remove a previous kit's parts and manifest from out (the rest of the folder stays)."""
    for path in [out / MANIFEST, *out.glob(f"{ARCHIVE}.part*")]:
        path.unlink(missing_ok=True)


def build(out: Path, python: str = DEFAULT_PYTHON, platform: str = DEFAULT_PLATFORM,
          part_mib: float = DEFAULT_PART_MIB, with_cuda_libraries: bool = False,
          log=print, opus_mt: str = "full", prebuilt_fixtures: Path | None = None) -> Manifest:
    """Build the kit into out: its parts and manifest.json. prebuilt_fixtures: the GPU tier's fixtures,
    made before by `python -m tests.support.tiny DIR` (default: trained and exported here)."""
    if prebuilt_fixtures is not None and (missing := fixtures_missing(prebuilt_fixtures)):
        raise ValueError(f"the fixtures in {prebuilt_fixtures} lack {', '.join(missing)} "
                         "(write them with python -m tests.support.tiny DIR)")
    out.mkdir(parents=True, exist_ok=True)
    staging = out / ".build"
    shutil.rmtree(staging, ignore_errors=True)
    root = staging / "kit"
    (root / "wheels").mkdir(parents=True)
    try:
        reqs = requirements(with_cuda_libraries)
        log(f"gpu-kit: downloading wheels for CPython {python} on {platform}")
        download_wheels(reqs, root / "wheels", python, platform)
        (root / REQUIREMENTS).write_text("".join(f"{r}\n" for r in reqs), encoding="utf-8")
        log("gpu-kit: generated gRPC modules")
        generated_protos(root)
        how = f"copied from {prebuilt_fixtures}" if prebuilt_fixtures else "tiny model trained and exported"
        log(f"gpu-kit: the GPU tier's fixtures ({how})")
        fixtures(root / "fixtures", prebuilt_fixtures)
        if opus_mt != "none":  # its export cached in out/.opus-mt-<shape>/ for the next kit
            log(f"gpu-kit: the opus-mt skeleton ({opus_mt} shape)")
            from gpukit.skeleton_build import build_skeleton

            build_skeleton(root / SKELETON_DIR, out / f".opus-mt-{opus_mt}", quick=opus_mt == "quick",
                           log=log)
        log("gpu-kit: collecting the GPU tier")
        tests = gpu_test_files()
        archive = staging / ARCHIVE
        files = pack(root, archive)
        clear_kit(out)
        parts = split(archive, out, int(part_mib * MIB))
        wheels = sorted(p.name for p in (root / "wheels").iterdir())
        info = {"python": python, "platform": platform, "machine": machine_of(platform),
                "requirements": reqs, "with_cuda_libraries": with_cuda_libraries, "gpu_tests": tests,
                "opus_mt": opus_mt,
                "pip": next(w for w in wheels if w.startswith("pip-")), "wheels": wheels,
                "created": datetime.now(UTC).isoformat(timespec="seconds")}
        manifest = Manifest(parts=parts, archive=entry_of(archive), files=files, info=info)
        manifest.write(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    size = sum(p.bytes for p in parts) / MIB
    log(f"gpu-kit: {len(parts)} parts of at most {part_mib:g} MiB ({size:.1f} MiB) and {MANIFEST} in {out}")
    return manifest
