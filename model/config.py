"""Model configuration: a dataclass saved inside every checkpoint and bundle."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass
class ModelConfig:
    """Hyper-parameters of an encoder-decoder Transformer."""

    vocab_size: int = 2000
    d_model: int = 256
    n_heads: int = 4
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    d_ff: int = 1024
    dropout: float = 0.1
    max_len: int = 256  # longest source or target sequence, in tokens (incl. bos/eos)
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3
    tie_embeddings: bool = True  # share source, target and output embeddings (one vocabulary)
    norm_first: bool = False  # False: post-LN as in the paper; True: pre-LN
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        """Reject inconsistent values early."""
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.d_model % 2:
            raise ValueError("d_model must be even for the sinusoidal positional encoding")

    @property
    def d_head(self) -> int:
        """Dimension of one attention head (d_k = d_v)."""
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        """Plain dict, for checkpoints and bundle.json."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """Build from a dict, ignoring unknown keys."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
