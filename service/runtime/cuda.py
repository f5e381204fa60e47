"""Can ONNX Runtime's CUDA provider run here? Answered before any session asks for it.

onnxruntime-gpu offers `CUDAExecutionProvider` in every build, but on a machine without CUDA 13 /
cuDNN 9 libraries or without a GPU, asking for it makes ONNX Runtime print a red "Failed to load
library libcublasLt.so.13" error at every session and fall back to the CPU. `cuda_unavailable`
finds the reason first and in one line, so the runner can ask for the CPU only and say why.

Libraries installed from PyPI (`pip install -e '.[cuda]'`: the nvidia-* wheels under
site-packages/nvidia/) are loaded by `onnxruntime.preload_dlls()`, so a GPU machine needs no
system CUDA install; a system install (the Dockerfile's CUDA base image) is found by the loader.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import io
import logging
from pathlib import Path

import onnxruntime as ort

log = logging.getLogger(__name__)

CUDA = "CUDAExecutionProvider"
PROVIDER_LIBRARY = "libonnxruntime_providers_cuda.so"  # ORT's CUDA provider (links cuBLAS, cudart)


def pip_cuda_installed() -> bool:
    """Whether NVIDIA's CUDA wheels (the `cuda` extra) are installed in this environment."""
    spec = importlib.util.find_spec("nvidia")
    return spec is not None and bool(spec.submodule_search_locations)


@functools.cache
def preload_pip_cuda() -> bool:
    """Load the pip-installed CUDA / cuDNN libraries once (ORT prints its misses; they go to the log)."""
    if not pip_cuda_installed() or not hasattr(ort, "preload_dlls"):
        return False
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            ort.preload_dlls()
        except Exception as exc:  # noqa: BLE001 - a broken wheel must not stop a CPU server
            log.warning("onnxruntime.preload_dlls() failed: %s", exc)
            return False
    for line in printed.getvalue().splitlines():
        log.debug("preload_dlls: %s", line)
    return True


def _cuda_major() -> str:
    """The CUDA major version this onnxruntime build links against ("13" for onnxruntime-gpu 1.31)."""
    return str(getattr(ort, "cuda_version", "") or "13").split(".")[0]


def device_count() -> int:
    """CUDA devices the runtime library sees (raises OSError when it cannot load)."""
    cudart = ctypes.CDLL(f"libcudart.so.{_cuda_major()}")
    count = ctypes.c_int(0)
    status = cudart.cudaGetDeviceCount(ctypes.byref(count))
    return int(count.value) if status == 0 else 0


@functools.cache
def cuda_unavailable(device_id: int = 0) -> str | None:
    """None when the CUDA provider can run on device `device_id` here, else why not (one line)."""
    if CUDA not in ort.get_available_providers():
        return f"this onnxruntime build ({ort.__version__}) has no {CUDA}"
    preload_pip_cuda()
    library = Path(ort.__file__).parent / "capi" / PROVIDER_LIBRARY
    try:
        ctypes.CDLL(str(library))  # loads its CUDA dependencies, or names the first one missing
    except OSError as exc:
        return (f"the CUDA {_cuda_major()} libraries cannot be loaded ({exc}); "
                "install them with pip install -e '.[cuda]' or use a CUDA base image")
    try:
        devices = device_count()
    except OSError as exc:
        return f"the CUDA runtime library cannot be loaded ({exc})"
    if devices <= device_id:
        return f"no CUDA device {device_id} ({devices} found)"
    return None
