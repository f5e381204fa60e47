"""How far ONNX Runtime's outputs are from PyTorch's: the difference measures the verifications judge.

The fp32 graphs are judged by the difference scaled by max(1, |reference|): absolute where the reference
lies within 1, relative beyond, since float32 rounding grows with a value (a log-probability of -15
carries 15 times the rounding of one of -1). The fp16 variant's tolerances are absolute
(export/verify/fp16.py): fp16 rounds so much more that a relative measure would let far larger errors
through on large values.
"""

from __future__ import annotations

import numpy as np
import torch


class ParityError(AssertionError):
    """ONNX Runtime disagrees with PyTorch beyond the tolerance."""


def difference(a: np.ndarray, b: torch.Tensor, scaled: bool = True) -> float:
    """Max |a - b|, divided elementwise by max(1, |b|) when `scaled`; failing on a shape mismatch or
    non-finite values."""
    ref = b.detach().float().numpy()
    if a.shape != ref.shape:
        raise ParityError(f"shape {a.shape} != PyTorch {ref.shape}")
    if not np.isfinite(a).all():
        raise ParityError("ONNX Runtime produced non-finite values")
    gap = np.abs(a.astype(np.float32) - ref)
    if scaled:
        gap = gap / np.maximum(np.abs(ref), np.float32(1.0))
    return float(gap.max(initial=0.0))


def max_difference(ours: list[np.ndarray], ref: list[torch.Tensor], scaled: bool = True) -> float:
    """Largest `difference` over paired lists of equal length."""
    if len(ours) != len(ref):
        raise ParityError(f"{len(ours)} outputs != PyTorch {len(ref)}")
    return max(difference(a, b, scaled) for a, b in zip(ours, ref, strict=True))
