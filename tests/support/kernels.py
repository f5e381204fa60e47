"""The suite's second run under another family of PyTorch's CPU kernels (`make test-kernels`).

PyTorch picks its CPU kernels by what the CPU has (AVX-512, AVX2, or the default ones), and a model
trained or run on one family differs from another's in the last bits of every float. The tests that
train a model with PyTorch or compare with one (marked `kernels`, tests/conftest.py) run a second time
with the family held by ATEN_CPU_CAPABILITY: AVX2 where PyTorch picks AVX-512, the default kernels
otherwise. Their fixtures are rebuilt in that run, so the tiny model is trained again on those kernels.
EXPECT_ENV names the family the run must have; tests/conftest.py stops the run if PyTorch reports
another one, so that the run cannot pass without having switched.

The tests marked `slow` (minutes each) run in this session too, once, on its kernels (the GPU kit's reads
the tiny bundles): `make test` runs the suite without them beside this one, so that the two sessions take
about as long.

`python -m tests.support.kernels [PYTEST ARGS]` runs `pytest -m "kernels or slow"` so.
"""

from __future__ import annotations

import os
import sys

ATEN_ENV = "ATEN_CPU_CAPABILITY"  # PyTorch's own switch: default, avx2, avx512
EXPECT_ENV = "TRANSLATOR_CPU_CAPABILITY"  # the family PyTorch must report in this run
SELECTION = "kernels or slow"  # this session's tests; the suite beside it runs "not slow"


def capability() -> str:
    """The kernel family PyTorch runs in this process, as ATEN_CPU_CAPABILITY spells it."""
    import torch

    return torch.backends.cpu.get_cpu_capability().lower()


def other_family(current: str) -> str:
    """A family other than `current` that every x86-64 CPU with it can run."""
    return "avx2" if current.startswith("avx512") else "default"


def main(argv: list[str]) -> None:
    """Become `pytest -m "kernels or slow"` (plus argv) under another kernel family than this process's."""
    family = other_family(capability())
    print(f"PyTorch CPU kernels: {capability()} in the first run, {family} in this one", flush=True)
    env = {**os.environ, ATEN_ENV: family, EXPECT_ENV: family}
    os.execve(sys.executable, [sys.executable, "-m", "pytest", "-m", SELECTION, *argv], env)


if __name__ == "__main__":
    main(sys.argv[1:])
