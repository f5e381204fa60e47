"""What bench.gpu measures besides speed: the device's copy bandwidth, the bandwidth floor of a decoder
step, and the memory each model takes.

- Bandwidth: a copy of COPY_MIB MiB between two buffers of the device (`onnxruntime.copy_tensors` on CUDA,
  device to device; numpy on the CPU), reading and writing each byte: 2 x bytes / seconds, median.
- Floor: the bytes a batch-1 step of the variant's decoder reads (its weights but the tables it only
  gathers from, recorded with the skeleton) over that bandwidth; how far a measured step is from it.
- Memory: each engine built in a fresh process, warmed up on one source, then a batch; the device memory
  its process holds (nvidia-smi's per-process figure: everything ONNX Runtime's arena or CTranslate2's
  allocator reserved, plus the CUDA context) and, for ours, the weights it must hold (its data file); on
  the CPU the resident memory the process added. ONNX Runtime's Python API exposes no arena statistics,
  so the bytes in use inside the arena are not reported apart.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

from bench.common.workload import REPO_ROOT

COPY_MIB = 1024


def copy_bandwidth(device: str, mib: int = COPY_MIB, repeats: int = 10) -> float:
    """GB/s of a device-to-device copy of `mib` MiB (read + write), median of `repeats`."""
    n = mib * 2**20 // 2
    if device == "cpu":
        src, dst = np.ones(n, np.float16), np.empty(n, np.float16)
        copy = lambda: np.copyto(dst, src)  # noqa: E731
    else:
        import onnxruntime as ort

        src = ort.OrtValue.ortvalue_from_shape_and_type([n], np.float16, "cuda", 0)
        dst = ort.OrtValue.ortvalue_from_shape_and_type([n], np.float16, "cuda", 0)
        copy = lambda: ort.copy_tensors([src], [dst], None)  # noqa: E731
    copy()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        copy()
        seconds.append(time.perf_counter() - start)
    return 2 * n * 2 / statistics.median(seconds) / 1e9


def floors(step_bytes: dict[str, int] | None, gbps: float, step_ms: dict[str, float]) -> dict[str, Any]:
    """Per variant: the floor of a batch-1 step (ms) and the measured step over it."""
    out: dict[str, Any] = {"copy_gbps": round(gbps, 1)}
    for variant, nbytes in (step_bytes or {}).items():
        floor_ms = nbytes / (gbps * 1e9) * 1e3
        out[variant] = {"step_bytes": nbytes, "floor_ms": round(floor_ms, 4)}
        if variant in step_ms:
            out[variant] |= {"step_ms_b1": round(step_ms[variant], 3),
                             "step_over_floor": round(step_ms[variant] / floor_ms, 1)}
    return out


def device_memory_mib(pid: int) -> float | None:
    """MiB of device memory nvidia-smi reports for process pid (None without nvidia-smi or the pid)."""
    try:
        query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
        out = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    used = [float(v) for p, v in (line.split(",") for line in out.strip().splitlines() if "," in line)
            if int(p) == pid]
    return sum(used) if used else None


_CHILD = """
import json, os, sys
from bench.gpu.engine import build_decoder
from bench.gpu.footprint import device_memory_mib
from bench.memory.proc import smaps_rollup

job = json.loads(sys.stdin.read())
before = smaps_rollup()["rss"]
decode = build_decoder(job["engine"], job["model"], job["device"])
decode(job["batch"][:1])
warm = device_memory_mib(os.getpid()), smaps_rollup()["rss"] - before
decode(job["batch"])
full = device_memory_mib(os.getpid()), smaps_rollup()["rss"] - before
print(json.dumps({"warm": {"device_mib": warm[0], "rss_added_mib": round(warm[1], 1)},
                  "batch": {"device_mib": full[0], "rss_added_mib": round(full[1], 1)}}))
"""


def engine_memory(engine: str, model: dict[str, Any], device: str, batch: list[list[int]]) -> dict[str, Any]:
    """Memory of a fresh process holding one engine, after a warm-up and after `batch` at once."""
    job = json.dumps({"engine": engine, "model": model, "device": device, "batch": batch})
    out = subprocess.run([sys.executable, "-c", _CHILD], input=job, capture_output=True, text=True,
                         cwd=REPO_ROOT, timeout=600, check=False, env=os.environ.copy())
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])
