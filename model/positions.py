"""Where tokens are: absolute position signals added to the embeddings (sinusoids in three layouts, or a
learned table), and T5's relative position bias added to the attention logits (`ModelConfig.position_table`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def sinusoidal_table(max_len: int, d_model: int, layout: str = "interleaved", offset: int = 0) -> Tensor:
    """Sinusoidal position table (L, D) in one of three layouts; row p is position p + offset.

    interleaved (the paper): PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same).
    halves (Marian, tensor2tensor): the same angles, all sines first: [sin | cos], computed in
    float64 like transformers' MarianSinusoidalPositionalEmbedding.
    fairseq (M2M100, NLLB): [sin | cos] of pos * 10000^(-i / (d/2 - 1)), i < d/2, in float32 like
    transformers' M2M100SinusoidalPositionalEmbedding.
    """
    n, half = max_len + offset, d_model // 2
    if layout == "interleaved":
        pos = torch.arange(n, dtype=torch.float32).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(n, d_model)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
    elif layout == "halves":
        pos = torch.arange(n, dtype=torch.float64).unsqueeze(1)
        angle = pos / torch.pow(10000.0, 2 * torch.arange(half, dtype=torch.float64) / d_model)  # (L, D/2)
        pe = torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).float()
    elif layout == "fairseq":
        freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000) / (half - 1)))
        angle = torch.arange(n, dtype=torch.float32).unsqueeze(1) * freq.unsqueeze(0)  # (L, D/2)
        pe = torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)
    else:
        raise ValueError(f"unknown sinusoid layout {layout!r}")
    return pe[offset:]


class PositionalEncoding(nn.Module):
    """Adds the position signal to embeddings (then an optional LayerNorm, then dropout).

    The signal is a sinusoid table (a buffer, not saved), or with layout "learned" a trained table
    (a parameter `pe`, saved) of max_len rows: the rows from `offset` on of the checkpoint's table;
    layout "relative" adds none (T5: positions enter as `RelativePositionBias` in the attention).
    `norm` is BART's layernorm_embedding: LayerNorm(embeddings + positions).
    """

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0, layout: str = "interleaved",
                 offset: int = 0, norm: bool = False, eps: float = 1e-5) -> None:
        super().__init__()
        if layout == "learned":
            self.pe = nn.Parameter(torch.zeros(max_len, d_model))
        elif layout == "relative":
            self.register_buffer("pe", None)
        else:
            self.register_buffer("pe", sinusoidal_table(max_len, d_model, layout, offset), persistent=False)
        self.norm = nn.LayerNorm(d_model, eps=eps) if norm else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """x (B, L, D); positions (B, L) or None for 0..L-1."""
        if self.pe is not None:  # (L, D) broadcast over the batch, or a table lookup per position (B, L, D)
            x = x + (self.pe[: x.size(1)] if positions is None else F.embedding(positions, self.pe))
        return self.dropout(self.norm(x) if self.norm is not None else x)


def relative_position_bucket(relative: Tensor, bidirectional: bool, n_buckets: int, max_distance: int
                             ) -> Tensor:
    """T5's bucket of each relative position r = key position - query position (Raffel et al., 2020, 2.1).

    Bidirectional (the encoder): half of the buckets for keys after the query (r > 0), half for the
    others; unidirectional (the decoder): every bucket for keys at or before the query, r > 0 in bucket
    0 (such keys are masked anyway). Within a half, distances below half of its buckets have one
    bucket each, larger ones share logarithmically wider bins up to max_distance, and every distance
    from max_distance on falls in the last bucket. The bins are computed in float32 as Mesh TensorFlow
    and transformers compute them: a distance at a bin's edge lands where that rounding puts it.
    """
    half = n_buckets // 2 if bidirectional else n_buckets
    side = (relative > 0).long() * half if bidirectional else torch.zeros_like(relative)
    distance = relative.abs() if bidirectional else (-relative).clamp(min=0)
    exact = half // 2
    log_ratio = torch.log(distance.float() / exact) / math.log(max_distance / exact)
    wide = (exact + (log_ratio * (half - exact)).long()).clamp(max=half - 1)
    return side + torch.where(distance < exact, distance, wide)


class RelativePositionBias(nn.Module):
    """T5's relative position bias: a learned scalar per head for the bucket of each key's position
    relative to the query's, added to the attention logits of every self-attention layer of a stack
    (transformers keeps it in the stack's first layer; cross-attention has none).

    Every |r| >= max_distance shares a bucket, so the buckets of r in [-max_distance, max_distance]
    (`bucket_of`, a constant computed once) cover every r once r is clamped to that span: the graphs
    compute the bias from the positions with integer arithmetic and two lookups, no logarithm.
    """

    def __init__(self, n_heads: int, n_buckets: int, max_distance: int, bidirectional: bool) -> None:
        super().__init__()
        self.buckets = nn.Embedding(n_buckets, n_heads)
        self.max_distance = max_distance
        span = torch.arange(-max_distance, max_distance + 1)
        bucket_of = relative_position_bucket(span, bidirectional, n_buckets, max_distance)
        self.register_buffer("bucket_of", bucket_of, persistent=False)

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """Positions (B|1, Tq) of the queries and (B|1, Tk) of the keys -> bias (B|1, H, Tq, Tk)."""
        relative = key_positions[:, None, :] - query_positions[:, :, None]  # (B|1, Tq, Tk)
        offset = relative.clamp(-self.max_distance, self.max_distance) + self.max_distance
        per_offset = self.buckets(self.bucket_of)  # (2 max_distance + 1, H)
        return F.embedding(offset, per_offset).permute(0, 3, 1, 2)
