"""Shared fixtures: a tiny corpus, tokenizer and model trained in seconds."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import kernels, tiny

# fixtures whose models PyTorch trains or builds: a test that uses one (directly or through another
# fixture) is marked `kernels` and runs again under another CPU kernel family (tests/support/kernels.py)
KERNEL_FIXTURES = {"tiny_corpus", "tiny_checkpoint", "tiny_model", "tiny_bundle", "tiny_concat_bundle",
                   "tiny_int8_bundle", "hf_dirs", "hf_bundles"}


def pytest_configure(config) -> None:
    """One torch thread: tiny models gain nothing from more, and 2 cores are shared. In the kernels run,
    PyTorch must run the kernel family that run asked for (else the run proves nothing)."""
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)
    want = os.environ.get(kernels.EXPECT_ENV)
    if want and kernels.capability() != want:
        raise pytest.UsageError(f"{kernels.EXPECT_ENV}={want} but PyTorch runs its {kernels.capability()} "
                                f"CPU kernels ({kernels.ATEN_ENV}={os.environ.get(kernels.ATEN_ENV)!r})")


def pytest_report_header(config) -> str | None:
    """The CPU kernel family PyTorch runs (the tiny model's weights depend on it)."""
    try:
        return f"PyTorch CPU kernels: {kernels.capability()}"
    except ImportError:
        return None


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked `gpu` need a CUDA device: skipped (with the reason) where none can be opened, and
    a usage error instead under TRANSLATOR_REQUIRE_GPU=1 (`make gpu-check`), so that a GPU run never
    passes by skipping. Tests that use a model PyTorch trained or built (KERNEL_FIXTURES) are marked
    `kernels`."""
    for item in items:
        if KERNEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kernels)
    gpu = [item for item in items if "gpu" in item.keywords]
    if not gpu:
        return
    from service.runtime.model.cuda import cuda_unavailable

    why = cuda_unavailable()
    if why is None:
        return
    if os.environ.get("TRANSLATOR_REQUIRE_GPU") == "1":
        raise pytest.UsageError(f"TRANSLATOR_REQUIRE_GPU=1 but the CUDA provider cannot run here: {why}")
    for item in gpu:
        item.add_marker(pytest.mark.skip(reason=f"no CUDA: {why}"))


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> dict[str, Path]:
    """train/valid TSV files of the tiny task."""
    return tiny.write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, tiny_corpus) -> Path:
    """A tiny model trained for a few hundred steps; returns the path of its last.pt."""
    return tiny.train_checkpoint(tiny_corpus, tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory, request) -> Path:
    """The tiny checkpoint exported, verified and packed into a bundle dir (with the fp16 variant);
    prebuilt under $TRANSLATOR_TEST_FIXTURES (tests/support/tiny.py)."""
    if (path := tiny.prebuilt("tiny")) is not None:
        return path
    checkpoint = request.getfixturevalue("tiny_checkpoint")
    return tiny.export_bundle(checkpoint, tmp_path_factory.mktemp("bundle") / "tiny", "tiny")


@pytest.fixture(scope="session")
def tiny_int8_bundle(tmp_path_factory, request) -> Path:
    """The tiny checkpoint exported with the int8 variant (export/variants/int8.py) as the CPU provider's
    default (bundle.json provider_variants) and the fp16 variant; prebuilt under $TRANSLATOR_TEST_FIXTURES."""
    if (path := tiny.prebuilt("tiny-int8")) is not None:
        return path
    checkpoint = request.getfixturevalue("tiny_checkpoint")
    return tiny.export_bundle(checkpoint, tmp_path_factory.mktemp("bundle") / "tiny-int8", "tiny-int8")


@pytest.fixture(scope="session")
def tiny_model(tiny_checkpoint):
    """The tiny checkpoint's PyTorch model."""
    import torch

    from model.checkpoint import load_checkpoint

    torch.set_num_threads(1)
    return load_checkpoint(tiny_checkpoint)[0]


@pytest.fixture(scope="session")
def tiny_concat_bundle(tmp_path_factory, request) -> Path:
    """The tiny checkpoint exported with the "fused" lowering: a decoder with a concatenated cache."""
    if (path := tiny.prebuilt("tiny-concat")) is not None:
        return path
    checkpoint = request.getfixturevalue("tiny_checkpoint")
    return tiny.export_bundle(checkpoint, tmp_path_factory.mktemp("bundle") / "tiny-concat", "tiny-concat")


@pytest.fixture(scope="module", params=["inplace", "concat", "inplace-bound", "concat-bound"])
def layout_runner(request, tiny_bundle, tiny_concat_bundle):
    """CPU runner of the tiny bundle in both KV-cache layouts (service/runtime/cache/kvcache.py), with the
    host backend and ("-bound") with the IO-binding backend on the CPU device, whose cache is ORT
    device memory restructured without host round trips (service/runtime/cache/devicemem.py)."""
    from service.runtime.runner import Runner

    layout, _, bound = request.param.partition("-")
    bundle = tiny_bundle if layout == "inplace" else tiny_concat_bundle
    r = Runner(bundle, providers=["CPUExecutionProvider"], io_binding=bool(bound))
    assert r.kv_cache == layout and (type(r.backend).__name__ == "IoBindingBackend") == bool(bound)
    return r


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Sources of the tiny task of clearly different lengths."""
    if (path := tiny.prebuilt(tiny.TEXTS_FILE)) is not None:
        return json.loads(path.read_text(encoding="utf-8"))
    return tiny.texts()


@pytest.fixture(scope="module")
def runner(tiny_bundle):
    """The tests' one runner: CPU, the tiny bundle, default settings (max_beam DEFAULT_MAX_BEAM); tests
    that need both KV-cache layouts take `layout_runner`."""
    from service.runtime.runner import Runner

    return Runner(tiny_bundle, providers=["CPUExecutionProvider"])


@pytest.fixture
def hooked(runner):
    """The runner, for a test that sets its fault hook: after the test a Gate left there is opened
    (the worker never stays held) and the hook is removed."""
    from tests.support.scheduling import Gate

    yield runner
    if isinstance(runner.fault_hook, Gate):
        runner.fault_hook.open()
    runner.fault_hook = None
