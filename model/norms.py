"""Layer normalizations: the paper's LayerNorm, or RMSNorm (T5's T5LayerNorm) with `ModelConfig.rms_norm`."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """RMSNorm(x) = g * x / sqrt(mean(x^2) + eps) over the features (Zhang & Sennrich, 2019): no mean
    subtracted and no bias, as T5's T5LayerNorm (the mean of squares, then rsqrt)."""

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        """(..., D) -> (..., D)."""
        mean_square = x.pow(2).mean(dim=-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(mean_square + self.eps))


def layer_norm(d_model: int, eps: float, rms: bool = False) -> nn.Module:
    """The normalization of a sublayer or of a stack's end: nn.LayerNorm, or RMSNorm with `rms`."""
    return RMSNorm(d_model, eps) if rms else nn.LayerNorm(d_model, eps=eps)
