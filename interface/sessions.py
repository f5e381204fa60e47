"""ONNX Runtime session settings that the exporter's verification and the service both apply, so that a
bundle is verified with the kernels it is served with. Torch-free: `service/` imports this module.

x86 CPUs without VNNI (AVX2, AVX-512 without VNNI) run ONNX Runtime's U8S8 int8 matrix products with
int16 pair sums that saturate (`vpmaddubsw`); `session.x64quantprecision` = "1" makes ONNX Runtime convert
the int8 weights to uint8 and use its U8U8 kernels, which cannot saturate. ONNX Runtime applies it on
every x86 CPU whose U8U8 and U8S8 dispatches differ (`MlasPlatformU8S8Overflow`), VNNI ones included,
where the U8S8 products (`vpdpbusd`, 32-bit sums) are exact already and the U8U8 ones slower, so it is
asked for only where this CPU has no VNNI or its flags cannot be read.
"""

from __future__ import annotations

from pathlib import Path

EXACT_INT8_PRODUCTS = {"session.x64quantprecision": "1"}  # U8U8 kernels, where U8S8's can saturate
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


def has_vnni(flags: frozenset[str] | None) -> bool | None:
    """Whether a CPU with these flags has VNNI (AVX512-VNNI or AVX-VNNI); None where the flags are unknown."""
    return None if flags is None else bool(flags & VNNI_FLAGS)


def cpu_session_config(flags: frozenset[str] | None) -> dict[str, str]:
    """Config entries of every CPU session on a CPU with these flags (`cpu_flags()`): exact int8 products
    asked for unless the CPU has VNNI, whose own U8S8 products are exact and faster."""
    return {} if has_vnni(flags) else dict(EXACT_INT8_PRODUCTS)
