"""Can ONNX Runtime's CUDA provider run here? Answered before any session asks for it.

onnxruntime-gpu offers `CUDAExecutionProvider` in every build, but on a machine without CUDA 13 / cuDNN 9
libraries or without a GPU, asking for it makes ONNX Runtime print a red "Failed to load library
libcublasLt.so.13" error at every session and fall back to the CPU. `cuda_unavailable` finds the reason first
and in one line (no device or driver, and every CUDA library file missing), so the runner can ask for the CPU
only and say why; `library_report` says where each was found.

Libraries installed from PyPI (`pip install -e '.[cuda]'`: the nvidia-* wheels under site-packages/nvidia/)
are loaded by `onnxruntime.preload_dlls()`, so a GPU machine needs no system CUDA install; a system install
(the Dockerfile's CUDA base image) is found by the loader.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import io
import logging
import struct
from pathlib import Path

import onnxruntime as ort

log = logging.getLogger(__name__)

CUDA = "CUDAExecutionProvider"
PROVIDER_LIBRARY = "libonnxruntime_providers_cuda.so"  # ORT's CUDA provider (links cuBLAS, cudart)
DRIVER = "libcuda.so.1"  # the NVIDIA driver's library: never from pip, always the host's
CUDNN = "libcudnn.so.9"  # opened by the CUDA provider when it starts (not a link-time dependency)
_SHT_DYNAMIC, _DT_NEEDED = 6, 1  # ELF: the dynamic section's type, a needed library's tag
_CUDA_ERROR_NO_DEVICE = 100  # the driver API's "no CUDA-capable device is detected"


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


def needed_libraries(library: Path) -> list[str]:
    """The DT_NEEDED entries of an ELF64 little-endian shared library (what the loader must find)."""
    with library.open("rb") as f:
        header = f.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            raise OSError(f"{library} is not an ELF64 little-endian file")
        shoff, = struct.unpack_from("<Q", header, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", header, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
        dynamic = next((s for s in sections if s[1] == _SHT_DYNAMIC), None)
        if dynamic is None:
            return []
        f.seek(dynamic[4])
        entries = f.read(dynamic[5])
        strtab = sections[dynamic[6]]
        f.seek(strtab[4])
        strings = f.read(strtab[5])
    names = []
    for tag, value in struct.iter_unpack("<qQ", entries[: len(entries) // 16 * 16]):
        if tag == _DT_NEEDED:
            names.append(strings[value : strings.index(b"\0", value)].decode())
    return names


def cuda_libraries() -> list[str]:
    """The CUDA libraries ONNX Runtime's CUDA provider needs: what it links (the driver's libcuda.so.1
    apart) and cuDNN, which it opens when it starts."""
    library = Path(ort.__file__).parent / "capi" / PROVIDER_LIBRARY
    linked = [n for n in needed_libraries(library) if n.startswith(("libcu", "libnv")) and n != DRIVER]
    return [*linked, CUDNN]


def _loaded_path(soname: str) -> str | None:
    """The file this process has mapped for `soname` (from /proc/self/maps), if any."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    for line in maps:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and Path(fields[5]).name.startswith(soname):
            return fields[5]
    return None


def library_report() -> dict[str, str | None]:
    """soname -> the file the loader found for it here (after pip's CUDA wheels are preloaded), None if
    missing; the driver's libcuda.so.1 first."""
    preload_pip_cuda()
    report: dict[str, str | None] = {}
    for soname in [DRIVER, *cuda_libraries()]:
        try:
            ctypes.CDLL(soname)
        except OSError:
            report[soname] = None
        else:
            report[soname] = _loaded_path(soname) or soname
    return report


def device_count() -> int:
    """CUDA devices the driver sees (raises OSError when the driver cannot be loaded or started)."""
    driver = ctypes.CDLL(DRIVER)
    status = driver.cuInit(0)
    if status == _CUDA_ERROR_NO_DEVICE:
        return 0
    if status != 0:
        message = ctypes.c_char_p()
        driver.cuGetErrorString(status, ctypes.byref(message))
        text = (message.value or b"unknown error").decode(errors="replace")
        raise OSError(f"the NVIDIA driver did not start: cuInit error {status} ({text})")
    count = ctypes.c_int(0)
    return int(count.value) if driver.cuDeviceGetCount(ctypes.byref(count)) == 0 else 0


@functools.cache
def cuda_unavailable(device_id: int = 0) -> str | None:
    """None when the CUDA provider can run on device `device_id` here, else why not: one line naming the
    missing device or driver and every missing CUDA library file."""
    if CUDA not in ort.get_available_providers():
        return f"this onnxruntime build ({ort.__version__}) has no {CUDA}"
    report = library_report()
    problems = []
    if report.pop(DRIVER) is None:
        problems.append(f"no CUDA device: the NVIDIA driver library {DRIVER} is not installed")
    else:
        try:
            devices = device_count()
        except OSError as exc:
            problems.append(f"no CUDA device: {exc}")
        else:
            if devices <= device_id:
                problems.append(f"no CUDA device {device_id} ({devices} found)")
    missing = [name for name, path in report.items() if path is None]
    if missing:
        problems.append(f"missing CUDA {_cuda_major()} libraries: {', '.join(missing)} (install them with "
                        "pip install -e '.[cuda]', use a CUDA base image, or a GPU kit with CUDA libraries)")
    return "; ".join(problems) or None
