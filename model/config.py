"""Model configuration: a dataclass saved inside every checkpoint and bundle."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")  # feed-forward non-linearities (model/transformer.py)
# sinusoid layouts, a learned table, or none added to the embeddings: T5's relative position bias
# (model/positions.py)
POSITION_TABLES = ("interleaved", "halves", "fairseq", "learned", "relative")


@dataclass
class ModelConfig:
    """Hyper-parameters of an encoder-decoder Transformer.

    The fields after layer_norm_eps are the switches of imported pretrained families (Marian,
    M2M100 / NLLB, BART, mBART, T5 / mT5: export/hf/mapping.py); their defaults are the paper's Transformer,
    and
    `to_dict` leaves them out at those defaults, so our own checkpoints and bundles keep exactly
    the keys they always had.
    """

    vocab_size: int = 2000  # target vocabulary (and the source's, unless source_vocab_size is set)
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
    norm_first: bool = False  # False: post-LN as in the paper; True: pre-LN (+ a final LayerNorm)
    layer_norm_eps: float = 1e-5
    activation: str = "relu"  # FFN non-linearity: relu (paper, M2M100), gelu, gelu_tanh (T5 v1.1), silu
    position_table: str = "interleaved"  # sin/cos interleaved (paper), halves (Marian), fairseq (M2M100),
    # learned: a trained table per side (BART, mBART), stored from row position_offset on; or relative:
    # no absolute positions, a learned bias per head and bucket of key - query position in self-attention (T5)
    position_offset: int = 0  # position p reads row p + offset of the table (M2M100: pad_id + 1, BART: 2)
    scale_embedding: bool = True  # token embeddings times sqrt(d_model) (paper), else times 1
    source_vocab_size: int | None = None  # a separate source vocabulary's size (None: vocab_size)
    decoder_start_id: int | None = None  # the decoder's first input (None: bos_id; Marian: pad)
    embedding_norm: bool = False  # a LayerNorm on embeddings + positions, one per side (BART, mBART)
    rms_norm: bool = False  # RMSNorm (no mean subtraction, no bias) for every LayerNorm (T5)
    gated_ffn: bool = False  # FFN (sigma(x W_1) * x V) W_2: a GLU variant (T5 v1.1's gated-gelu)
    head_dim: int | None = None  # attention head size (None: d_model / n_heads; T5's d_kv)
    relative_buckets: int = 32  # position_table relative: buckets per stack (relative_attention_num_buckets)
    relative_max_distance: int = 128  # ... and the distance from which all share one bucket

    def __post_init__(self) -> None:
        """Reject inconsistent values early."""
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.head_dim is not None and self.head_dim < 1:
            raise ValueError("head_dim must be >= 1")
        if self.d_model % 2:
            raise ValueError("d_model must be even for the sinusoidal positional encoding")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r} is not one of {', '.join(ACTIVATIONS)}")
        if self.position_table not in POSITION_TABLES:
            known = ", ".join(POSITION_TABLES)
            raise ValueError(f"position_table {self.position_table!r} is not one of {known}")
        if self.position_offset < 0:
            raise ValueError("position_offset must be >= 0")
        if self.relative_buckets < 4 or self.relative_max_distance <= self.relative_buckets // 4:
            raise ValueError("relative_buckets must be >= 4 and relative_max_distance > relative_buckets / 4 "
                             "(the exact buckets of each half)")
        if self.tie_embeddings and self.src_vocab != self.vocab_size:
            raise ValueError("tied embeddings need one vocabulary (source_vocab_size == vocab_size)")

    @property
    def d_head(self) -> int:
        """Dimension of one attention head (d_k = d_v)."""
        return self.head_dim or self.d_model // self.n_heads

    @property
    def src_vocab(self) -> int:
        """Size of the source vocabulary."""
        return self.vocab_size if self.source_vocab_size is None else self.source_vocab_size

    @property
    def start_id(self) -> int:
        """The decoder's first input token."""
        return self.bos_id if self.decoder_start_id is None else self.decoder_start_id

    @property
    def side_positions(self) -> bool:
        """Source and target each have their own position module (a learned table or an embedding norm)."""
        return self.position_table == "learned" or self.embedding_norm

    def to_dict(self) -> dict[str, Any]:
        """Plain dict, for checkpoints and bundle.json; the pretrained switches only where set."""
        d = asdict(self)
        for f in fields(self)[fields(self).index(_FIRST_SWITCH) :]:
            if d[f.name] == f.default:
                del d[f.name]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """Build from a dict, ignoring unknown keys (missing ones take their defaults)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


_FIRST_SWITCH = next(f for f in fields(ModelConfig) if f.name == "activation")
