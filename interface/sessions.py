"""ONNX Runtime session settings that the exporter's verification and the service both apply, so that a
bundle is verified with the kernels it is served with. Torch-free: `service/` imports this module.

x86 CPUs without VNNI (AVX2, AVX-512 without VNNI) run ONNX Runtime's U8S8 int8 matrix products with
int16 pair sums that saturate (`vpmaddubsw`); `session.x64quantprecision` = "1" makes ONNX Runtime convert
the int8 weights to uint8 on such CPUs and use its U8U8 kernels, which cannot saturate. A CPU with VNNI
is left as it is (onnxruntime_session_options_config_keys.h, `kOrtSessionOptionsAvx2PrecisionMode`).
"""

from __future__ import annotations

from pathlib import Path

CPU_SESSION_CONFIG = {"session.x64quantprecision": "1"}  # config entries of every CPU session
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni"})  # /proc/cpuinfo flags of the two VNNI extensions


def cpu_flags() -> frozenset[str] | None:
    """This CPU's feature flags (the first processor's in /proc/cpuinfo); None where they cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None
