"""gpukit/check.py on stand-in kits: a kit that cannot be used stops before anything is installed, with an
exit code of 2, the reason in the log and in summary.json; pip on the host reads no configuration."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from gpukit import check
from gpukit.parts import ARCHIVE, KitError, Manifest, entry_of, pack, split

THIS_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def stand_in_kit(tmp_path: Path, **info) -> tuple[Path, Manifest]:
    """A kit of two small files in parts of 100 bytes, for this Python unless `info` says otherwise."""
    src, kit = tmp_path / "src", tmp_path / "kit"
    (src / "wheels").mkdir(parents=True)
    kit.mkdir()
    (src / "wheels" / "x.whl").write_bytes(os.urandom(450))
    (src / "requirements.txt").write_text("x\n")
    archive = tmp_path / ARCHIVE
    files = pack(src, archive)
    manifest = Manifest(split(archive, kit, 100), entry_of(archive), files,
                        {"python": THIS_PYTHON, "machine": os.uname().machine, **info})
    manifest.write(kit)
    return kit, manifest


def summary(out: Path) -> dict:
    """OUT/summary.json."""
    return json.loads((out / "summary.json").read_text())


def test_a_kit_for_another_python_is_refused_naming_the_kit_to_build(tmp_path):
    kit, _ = stand_in_kit(tmp_path, python="2.7")
    out = tmp_path / "out"
    assert check.run_check(kit, out) == 2
    error = summary(out)["steps"][-1]
    assert error["step"] == "verify" and error["exit_code"] == 2
    assert f"the kit is for CPython 2.7; this is cpython {THIS_PYTHON}" in error["error"]
    assert f"make gpu-kit KIT_PYTHON={THIS_PYTHON}" in (out / "check.log").read_text()
    assert not (kit / "venv").exists()


def test_a_kit_for_another_machine_is_refused(tmp_path):
    kit, manifest = stand_in_kit(tmp_path, machine="s390x", platform="manylinux_2_28_s390x")
    with pytest.raises(KitError, match="the kit is for s390x"):
        check.check_target(manifest)


def test_a_missing_part_stops_the_check_before_anything_is_installed(tmp_path):
    kit, manifest = stand_in_kit(tmp_path)
    (kit / manifest.parts[2].name).unlink()
    out = tmp_path / "out"
    assert check.run_check(kit, out) == 2
    assert f"part {manifest.parts[2].name} is missing" in summary(out)["steps"][-1]["error"]
    assert f"part {manifest.parts[2].name} is missing" in (out / "check.log").read_text()
    assert not (kit / "venv").exists() and not (kit / "unpacked").exists()


def test_a_missing_manifest_is_named(tmp_path):
    out = tmp_path / "out"
    assert check.run_check(tmp_path, out) == 2
    assert f"{tmp_path / 'manifest.json'} is missing" in summary(out)["steps"][-1]["error"]


def test_an_unpacked_kit_is_verified_once_and_a_new_kit_replaces_it(tmp_path):
    kit, manifest = stand_in_kit(tmp_path)
    log = check.Log(tmp_path / "log")
    work = check.unpacked(kit, manifest, log)
    assert (work / "wheels" / "x.whl").stat().st_size == 450 and not (kit / ARCHIVE).exists()
    (kit / manifest.parts[0].name).unlink()  # the parts are not read again for the same kit
    assert check.unpacked(kit, manifest, log) == work
    assert "already holds this kit" in (tmp_path / "log").read_text()
    other = Manifest(manifest.parts, manifest.archive.__class__(ARCHIVE, 1, "0" * 64), manifest.files,
                     manifest.info)
    with pytest.raises(KitError, match="is missing"):
        check.unpacked(kit, other, log)


def test_pip_on_the_host_reads_no_configuration(monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "https://example.invalid/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "/elsewhere")
    env = check.offline_pip_env()
    assert not {k for k in env if k.startswith("PIP_")} - {"PIP_CONFIG_FILE", "PIP_DISABLE_PIP_VERSION_CHECK"}
    assert env["PIP_CONFIG_FILE"] == os.devnull


def test_nvidia_pip_libraries_of_the_hosts_python_go_on_the_library_path(tmp_path, monkeypatch):
    """The venv does not see the host's site-packages: the lib folders of NVIDIA's wheels installed
    there (a `nvidia` namespace package) are put on LD_LIBRARY_PATH for the tier and the benchmark."""
    for lib in ("cublas/lib/libcublas.so.13", "cudnn/lib/libcudnn.so.9"):
        (tmp_path / "nvidia" / lib).parent.mkdir(parents=True)
        (tmp_path / "nvidia" / lib).write_bytes(b"")
    (tmp_path / "nvidia" / "headers_only" / "lib").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64")
    assert check.host_cuda_library_dirs() == [tmp_path / "nvidia/cublas/lib", tmp_path / "nvidia/cudnn/lib"]
    env = check.step_env(tmp_path / "work")
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [
        str(tmp_path / "nvidia/cublas/lib"), str(tmp_path / "nvidia/cudnn/lib"), "/usr/local/nvidia/lib64"]
    assert env[check.FIXTURES_ENV] == str(tmp_path / "work" / "fixtures")
    assert env["TRANSLATOR_REQUIRE_GPU"] == "1"
