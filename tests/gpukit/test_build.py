"""gpukit/build.py: what a kit asks for (the pins of pyproject.toml, for the target's platform tags), and a
real kit for this machine's Python (slow): built, installed with no network, its fixtures decoding as
here, and `make gpu-check KIT=...` stopping at the GPU tier's usage error on a machine without CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gpukit.__main__ import main as gpukit_main
from gpukit.build import build, compatible_platforms, machine_of, requirements
from gpukit.parts import MIB, Manifest
from service.runtime.model.cuda import DRIVER, cuda_libraries, cuda_unavailable
from tests.support import REPO_ROOT
from tests.support.tiny import lay_out

THIS_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
NO_NETWORK = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": "",
              "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "no_proxy": ""}


def test_the_kit_asks_for_the_pinned_serving_and_test_runner_requirements():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    reqs = requirements()
    assert "onnxruntime-gpu==1.31.1" in reqs and "pytest==9.2.0" in reqs
    assert any(r.startswith("pytest-timeout==") for r in reqs)
    assert set(project["dependencies"]) | set(project["optional-dependencies"]["serve"]) <= set(reqs)
    assert not any(r.split("=")[0] in ("torch", "onnx", "grpcio-tools") for r in reqs)
    assert "ctranslate2==4.8.5" in reqs  # bench/gpu's reference engine
    assert all("==" in r for r in reqs)
    with_cuda = requirements(with_cuda_libraries=True)
    assert set(project["optional-dependencies"]["cuda"]) == set(with_cuda) - set(reqs)


def test_a_manylinux_target_takes_every_older_glibc_and_pure_python_wheels():
    tags = compatible_platforms("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-1] == "any"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_27_x86_64"} <= set(tags)
    assert not any("2_29" in t or "aarch64" in t for t in tags)
    assert "manylinux2014_aarch64" in compatible_platforms("manylinux_2_17_aarch64")
    assert "manylinux2014_x86_64" not in compatible_platforms("manylinux_2_12_x86_64")
    assert machine_of("manylinux_2_28_x86_64") == "x86_64"
    with pytest.raises(ValueError, match="names no CPU architecture"):
        machine_of("win32")


def make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run make in the repository with the project's .venv python as PYTHON."""
    return subprocess.run(["make", "--no-print-directory", *args, f"PYTHON={sys.executable}"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=900, env={**os.environ, **(env or {})})


def cpu_tokens(python: str | Path, bundle: Path, texts: list[str]) -> list[list[int]]:
    """Greedy tokens of the texts by the bundle on the CPU, decoded by `python` (another environment)."""
    code = ("import json, sys; from service.runtime.runner import Runner; "
            "from service.domain.types import DecodeOptions; "
            "r = Runner(sys.argv[1], providers=['CPUExecutionProvider']); "
            "out = r.translate(json.loads(sys.argv[2]), DecodeOptions(max_output_tokens=40)); "
            "print(json.dumps([h[0].tokens for h in out]))")
    run = subprocess.run([str(python), "-c", code, str(bundle), json.dumps(texts)], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_fixtures_missing_from_a_prebuilt_directory_are_named_before_anything_is_fetched(tmp_path, capsys):
    (tmp_path / "fixtures" / "tiny").mkdir(parents=True)
    with pytest.raises(ValueError, match="lack tiny-concat, tiny-int8, texts.json"):
        build(tmp_path / "kit", prebuilt_fixtures=tmp_path / "fixtures")
    assert not (tmp_path / "kit").exists()
    with pytest.raises(SystemExit) as exited:
        gpukit_main(["build", "--out", str(tmp_path / "kit"), "--fixtures", str(tmp_path / "none")])
    assert exited.value.code == 2
    assert "lack tiny, tiny-concat, tiny-int8, texts.json" in capsys.readouterr().err


@pytest.mark.slow
def test_a_kit_for_this_python_installs_offline_and_stops_at_the_gpu_tiers_usage_error(
        tmp_path, tiny_bundle, tiny_concat_bundle, tiny_int8_bundle):
    why = cuda_unavailable()
    if why is None:
        pytest.skip("this machine runs CUDA: make gpu-check KIT=... runs the whole tier here")
    kit, out = tmp_path / "kit", tmp_path / "out"
    given = lay_out(tmp_path / "fixtures",
                    {"tiny": tiny_bundle, "tiny-concat": tiny_concat_bundle, "tiny-int8": tiny_int8_bundle})
    built = make("gpu-kit", f"KIT_PYTHON={THIS_PYTHON}", f"KIT_OUT={kit}", "PART_MIB=20", "KIT_OPUS=quick",
                 f"KIT_FIXTURES={given}")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    manifest = Manifest.read(kit)
    assert len(manifest.parts) > 1 and all((kit / p.name).stat().st_size <= 20 * MIB for p in manifest.parts)
    assert any(f.startswith("onnxruntime_gpu-1.31.1-") for f in manifest.info["wheels"])
    assert "tests/service/test_gpu.py" in manifest.info["gpu_tests"]

    checked = make("gpu-check", f"KIT={kit}", f"GPU_OUT={out}", env=NO_NETWORK)
    output = checked.stdout + checked.stderr
    assert checked.returncode != 0
    assert "TRANSLATOR_REQUIRE_GPU=1 but the CUDA provider cannot run here: " in output, output[-3000:]
    assert "no CUDA device" in output or "missing CUDA" in output
    steps = {s["step"]: s["exit_code"] for s in json.loads((out / "summary.json").read_text())["steps"]}
    assert steps == {"verify": 0, "install": 0, "cuda": 0, "tier": 4}  # 4: pytest's usage error
    log = (out / "check.log").read_text()
    assert "--no-index" in log and "--no-compile" in log
    assert "onnxruntime-gpu-1.31.1" in log and "Successfully installed" in log
    report = json.loads((out / "cuda-libraries.json").read_text())
    assert list(report["libraries"]) == [DRIVER, *cuda_libraries()] and report["unavailable"] == why

    python = kit / "venv" / "bin" / "python"
    assert subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0
    fixtures = kit / "unpacked" / "fixtures"
    texts = json.loads((fixtures / "texts.json").read_text())
    tiny = fixtures / "tiny"
    assert texts == json.loads((given / "texts.json").read_text())
    # the bundles given, not trained and exported again (bundle.json records the weights' hashes)
    assert (tiny / "bundle.json").read_bytes() == (tiny_bundle / "bundle.json").read_bytes()
    assert cpu_tokens(python, tiny, texts) == cpu_tokens(sys.executable, tiny, texts)

    again = make("gpu-check", f"KIT={kit}", f"GPU_OUT={out}", env=NO_NETWORK)
    assert "already holds this kit" in again.stdout and "already holds this kit's packages" in again.stdout
