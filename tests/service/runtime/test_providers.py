"""Providers and their options (service/runtime/model/sessions.py, service/runtime/model/cuda.py): planned
before any session, options from the provider in use, variant choice, placement check, --require-provider."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import onnxruntime as ort
import pytest

from export.verify.base import cpu_session
from interface import names
from service.domain.errors import BundleError, ProviderUnavailable
from service.runtime.model import cuda, sessions
from service.runtime.model.bundle import load_bundle
from service.runtime.model.sessions import (
    CPU,
    CUDA,
    RECORD_PLACEMENT,
    Sessions,
    check_provider,
    misplaced_nodes,
)
from service.runtime.runner import Runner
from tests.support.tools import require

CUDA_HERE = cuda.cuda_unavailable() is None


def config_entry(so: ort.SessionOptions, key: str) -> str | None:
    """A session config entry, None when unset."""
    try:
        return so.get_session_config_entry(key)
    except RuntimeError:
        return None


def recorded_sessions(monkeypatch) -> list[dict]:
    """Replace ort.InferenceSession in sessions.py by a recorder of what it is asked (then the real one)."""
    calls: list[dict] = []
    real = ort.InferenceSession

    def recording(path, so, providers, disabled_optimizers):
        calls.append({"path": Path(path).name, "providers": [p for p, _ in providers],
                      "disabled": list(disabled_optimizers),
                      "per_session_threads": so.use_per_session_threads,
                      "spinning": config_entry(so, "session.intra_op.allow_spinning"),
                      "env_allocators": config_entry(so, sessions.USE_ENV_ALLOCATORS) == "1"})
        return real(path, so, providers=providers, disabled_optimizers=disabled_optimizers)

    monkeypatch.setattr(sessions.ort, "InferenceSession", recording)
    return calls


@pytest.mark.skipif(CUDA_HERE, reason="this machine can run the CUDA provider")
def test_cuda_is_not_asked_for_where_it_cannot_load_and_the_reason_is_one_line():
    why = cuda.cuda_unavailable()
    assert why and "\n" not in why
    planned, reason = sessions.plan_providers(None)
    assert planned == [CPU] and reason == why
    assert sessions.plan_providers([CPU]) == ([CPU], None)  # not requested: nothing to explain


def test_plan_keeps_cuda_first_when_it_can_run(monkeypatch):
    monkeypatch.setattr(sessions, "cuda_unavailable", lambda device_id=0: None)
    assert sessions.plan_providers(None)[0] == [CUDA, CPU]
    assert sessions.plan_providers([CPU, CUDA])[0] == [CUDA, CPU]  # CPU always last
    assert sessions.plan_providers(["NoSuchExecutionProvider", CPU])[0] == [CPU]


def test_default_providers_pass_ort_the_options_of_an_explicit_cpu_run(tiny_bundle, monkeypatch):
    """On a machine without CUDA, the default (CUDA, CPU) request gives ORT exactly what --providers
    CPUExecutionProvider gives it: the configuration the benchmarks measure."""
    if CUDA_HERE:
        pytest.skip("this machine runs CUDA: the default is not the CPU configuration")
    calls = recorded_sessions(monkeypatch)
    Runner(tiny_bundle)
    default = list(calls)
    calls.clear()
    Runner(tiny_bundle, providers=[CPU])
    assert default == calls and len(calls) == 2
    assert all(c["providers"] == [CPU] and c["disabled"] == ["SkipLayerNormFusion"] for c in calls)
    assert all(c["per_session_threads"] is False for c in calls)  # one shared pool


def test_an_ort_fallback_while_creating_gets_the_options_of_the_provider_in_use(tiny_bundle, monkeypatch):
    """If ORT is asked for CUDA and falls back to the CPU itself, the sessions are made again with the
    CPU's options (fusion off, shared pool), not those of the requested CUDA."""
    if CUDA_HERE:
        pytest.skip("this machine runs CUDA: ORT does not fall back")
    monkeypatch.setattr(sessions, "cuda_unavailable", lambda device_id=0: None)  # as if CUDA could load
    calls = recorded_sessions(monkeypatch)
    runner = Runner(tiny_bundle)
    assert runner.provider == CPU and runner.providers == [CPU]
    assert calls[0]["providers"] == [CUDA, CPU] and calls[0]["disabled"] == []  # the first, CUDA's options
    assert [c["providers"] for c in calls[1:]] == [[CPU], [CPU]]
    assert calls[0]["path"] == "encoder.fp16.onnx"  # the variant bundle.json names for CUDA
    assert [c["path"] for c in calls[1:]] == [names.ENCODER_FILE, names.DECODER_FILE]  # the CPU's
    assert all(c["disabled"] == ["SkipLayerNormFusion"] for c in calls[1:])
    assert all(c["per_session_threads"] is False for c in calls[1:])
    assert runner.variant_name == "base"  # the CPU's variant, not the fp16 one planned for CUDA


def test_one_cuda_allocator_per_device_is_registered_once_and_cuda_sessions_use_it(tiny_bundle, monkeypatch):
    """Every CUDA session of every model takes device memory from one arena per device, registered with
    ORT's environment once per process; where ORT refuses, sessions keep their own arenas."""
    registered: list[tuple[str, int, dict]] = []

    def register(provider, info, options, arena):
        registered.append((provider, info.device_id, dict(options)))

    monkeypatch.setattr(sessions, "_cuda_allocators", {})
    monkeypatch.setattr(sessions.ort, "create_and_register_allocator_v2", register)
    assert sessions.ensure_shared_cuda_allocator(0, {"device_id": "0"})
    assert sessions.ensure_shared_cuda_allocator(0, {"device_id": "0"})  # once per device
    assert sessions.ensure_shared_cuda_allocator(1, {"device_id": "1"})
    assert registered == [(CUDA, 0, {"device_id": "0"}), (CUDA, 1, {"device_id": "1"})]
    if not CUDA_HERE:  # ORT asked for CUDA falls back here: the CUDA session asked for the shared arena
        monkeypatch.setattr(sessions, "cuda_unavailable", lambda device_id=0: None)
        calls = recorded_sessions(monkeypatch)
        Runner(tiny_bundle)
        assert calls[0]["providers"][0] == CUDA and calls[0]["env_allocators"]
        assert not any(c["env_allocators"] for c in calls[1:])  # the CPU sessions: no device arena

    def refuse(provider, info, options, arena):
        raise RuntimeError("no CUDA here")

    monkeypatch.setattr(sessions, "_cuda_allocators", {})
    monkeypatch.setattr(sessions.ort, "create_and_register_allocator_v2", refuse)
    assert not sessions.ensure_shared_cuda_allocator(0, {})
    assert not sessions.ensure_shared_cuda_allocator(0, {})  # asked once: the answer is kept


def test_session_options_per_provider():
    cpu = sessions.session_options(CPU, 2, shared_pool=True)
    assert cpu.use_per_session_threads is False and config_entry(cpu, RECORD_PLACEMENT) is None
    gpu = sessions.session_options(CUDA, 2, shared_pool=False)
    assert gpu.use_per_session_threads is True and gpu.intra_op_num_threads == 2
    assert config_entry(gpu, "session.intra_op.allow_spinning") == "0"
    assert config_entry(gpu, RECORD_PLACEMENT) == "1"
    assert sessions.disabled_optimizers(CPU) == ["SkipLayerNormFusion"]
    assert sessions.disabled_optimizers(CUDA) == []


def test_sessions_never_fall_back_at_run_time(runner):
    for session in (runner.sessions.encoder, runner.sessions.decoder):
        assert session._enable_fallback is False


def test_require_provider_fails_with_the_reason(tiny_bundle):
    if CUDA_HERE:
        pytest.skip("this machine runs CUDA")
    with pytest.raises(ProviderUnavailable, match=f"{CUDA} is required .* uses {CPU}: .*") as info:
        Runner(tiny_bundle, require_provider=CUDA)
    assert cuda.cuda_unavailable() in str(info.value)
    assert Runner(tiny_bundle, require_provider=CPU).provider == CPU


def placed_sessions(tiny_bundle: Path, claimed: list[str], record: bool = True) -> Sessions:
    """CPU sessions of the tiny bundle that record their placement (unless `record` is False), claiming to
    use `claimed`."""
    def session(file: str) -> ort.InferenceSession:
        so = ort.SessionOptions()
        if record:
            so.add_session_config_entry(RECORD_PLACEMENT, "1")
        return cpu_session(tiny_bundle / file, so)

    enc, dec = session(names.ENCODER_FILE), session(names.DECODER_FILE)
    return Sessions(enc, dec, claimed, shared_pool=False)


def test_placement_check_lists_compute_nodes_off_the_provider(tiny_bundle, caplog):
    """Every node of these sessions is on the CPU: for a CUDA run all compute nodes are misplaced
    (not Shape reads, not the bundle's integer-only host nodes); under --require-provider that fails."""
    placed = placed_sessions(tiny_bundle, [CUDA, CPU])
    ops = {op for op, _ in sessions.placement(placed.decoder)[CPU]}
    assert {"GroupQueryAttention", "MatMul", "LayerNormalization"} <= ops
    misplaced = misplaced_nodes(placed.decoder, CUDA)
    assert misplaced and all(m.endswith(f"({CPU})") for m in misplaced)
    assert any(m.startswith("GroupQueryAttention ") for m in misplaced)
    assert not misplaced_nodes(placed.decoder, CPU)
    names_ = [m.split()[1] for m in misplaced]
    assert misplaced_nodes(placed.decoder, CUDA, host_nodes=names_[:2]) == misplaced[2:]
    with pytest.raises(ProviderUnavailable, match="compute nodes of the encoder are not on CUDA"):
        check_provider(placed, CUDA, {})
    check_provider(placed, None, {})  # without --require-provider: a warning
    assert "compute nodes of the decoder are not on CUDAExecutionProvider" in caplog.text


def test_a_placement_that_cannot_be_read_fails_require_provider_loudly(tiny_bundle, caplog):
    """A session that recorded no placement is no empty table: --require-provider fails naming it, and
    without it the check warns instead of passing silently."""
    unrecorded = placed_sessions(tiny_bundle, [CUDA, CPU], record=False)
    with pytest.raises(sessions.PlacementUnknown, match="did not record"):
        sessions.placement(unrecorded.decoder)
    with pytest.raises(ProviderUnavailable, match="placement of the encoder's nodes on CUDAExecutionProvider "
                       "cannot be checked"):
        check_provider(unrecorded, CUDA, {})
    check_provider(unrecorded, None, {})
    assert caplog.text.count("cannot be checked") == 2  # encoder and decoder


def bundle_copy(src: Path, dst: Path, **manifest_changes) -> Path:
    """A copy of a bundle with top-level keys of bundle.json replaced."""
    shutil.copytree(src, dst)
    path = dst / names.BUNDLE_FILE
    manifest = json.loads(path.read_text()) | manifest_changes
    path.write_text(json.dumps(manifest))
    return dst


def test_the_variant_follows_the_provider_in_use(tiny_bundle, tmp_path):
    """bundle.json's provider_variants picks the variant for the provider in use; --variant overrides."""
    assert load_bundle(tiny_bundle).provider_variants == {CUDA: "fp16"}
    on_cpu = bundle_copy(tiny_bundle, tmp_path / "b", provider_variants={CPU: "fp16"})
    runner = Runner(on_cpu, providers=[CPU])
    assert runner.variant_name == "fp16" and runner.spec.cache_dtype.__name__ == "float16"
    assert Runner(on_cpu, providers=[CPU], variant="base").variant_name == "base"
    assert Runner(tiny_bundle, providers=[CPU], variant="fp16").variant_name == "fp16"


def test_a_manifest_naming_an_unknown_variant_is_refused(tiny_bundle, tmp_path):
    bad = bundle_copy(tiny_bundle, tmp_path / "b", provider_variants={CUDA: "int4"})
    with pytest.raises(BundleError, match="provider_variants"):
        load_bundle(bad)


def test_pip_installed_cuda_libraries_are_preloaded_quietly(tmp_path, monkeypatch, capsys):
    """With NVIDIA's wheels installed (a `nvidia` namespace package), onnxruntime.preload_dlls() runs
    and what it prints about missing libraries goes to the debug log, not to stdout."""
    (tmp_path / "nvidia" / "cu13").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    calls = []

    def preload_dlls() -> None:
        calls.append(True)
        print("Failed to load libcudnn.so.9: not found")

    monkeypatch.setattr(cuda.ort, "preload_dlls", preload_dlls)
    assert cuda.pip_cuda_installed()
    assert cuda.preload_pip_cuda.__wrapped__() is True and calls == [True]
    assert capsys.readouterr().out == ""


def test_the_libraries_the_cuda_provider_needs_are_read_as_readelf_reads_them():
    """needed_libraries parses the ELF dynamic section: the same DT_NEEDED list as binutils' readelf."""
    readelf = shutil.which("readelf")
    require(readelf is not None, "readelf", "apt-get install binutils")
    library = Path(ort.__file__).parent / "capi" / cuda.PROVIDER_LIBRARY
    out = subprocess.run([readelf, "-d", str(library)], capture_output=True, text=True, check=True).stdout
    listed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    assert listed and cuda.needed_libraries(library) == listed
    assert cuda.cuda_libraries() == [*(n for n in listed if n.startswith(("libcu", "libnv"))
                                       and n != cuda.DRIVER), cuda.CUDNN]


def test_the_reason_names_the_missing_device_or_driver_and_every_missing_library(monkeypatch):
    libraries = {"libcuda.so.1": "/usr/lib/libcuda.so.1", "libcublasLt.so.13": None,
                 "libcudart.so.13": "/opt/cuda/libcudart.so.13", "libcudnn.so.9": None}
    monkeypatch.setattr(cuda, "library_report", lambda: dict(libraries))
    monkeypatch.setattr(cuda, "device_count", lambda: 0)
    why = cuda.cuda_unavailable.__wrapped__()
    assert why.startswith("no CUDA device 0 (0 found); missing CUDA 13 libraries: libcublasLt.so.13, "
                          "libcudnn.so.9 (") and "\n" not in why
    monkeypatch.setattr(cuda, "device_count", lambda: 1)
    assert cuda.cuda_unavailable.__wrapped__(1).startswith("no CUDA device 1 (1 found); missing")
    libraries.update({"libcuda.so.1": None, "libcublasLt.so.13": "x", "libcudnn.so.9": "y"})
    assert cuda.cuda_unavailable.__wrapped__() == (
        "no CUDA device: the NVIDIA driver library libcuda.so.1 is not installed")
    libraries["libcuda.so.1"] = "z"
    assert cuda.cuda_unavailable.__wrapped__() is None
