"""Model configuration: a dataclass saved inside every checkpoint and bundle."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

ACTIVATIONS = ("relu", "gelu", "silu")  # feed-forward non-linearities (model/transformer.py)
POSITION_TABLES = ("interleaved", "halves", "fairseq", "learned")  # sinusoid layouts, or a learned table


@dataclass
class ModelConfig:
    """Hyper-parameters of an encoder-decoder Transformer.

    The fields after layer_norm_eps are the switches of imported pretrained families (Marian,
    M2M100 / NLLB, BART, mBART: export/hf/mapping.py); their defaults are the paper's Transformer, and
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
    activation: str = "relu"  # FFN non-linearity: relu (paper, M2M100), gelu, silu (Marian's "swish")
    position_table: str = "interleaved"  # sin/cos interleaved (paper), halves (Marian), fairseq (M2M100),
    # or learned: a trained table per side (BART, mBART), stored from row position_offset on
    position_offset: int = 0  # position p reads row p + offset of the table (M2M100: pad_id + 1, BART: 2)
    scale_embedding: bool = True  # token embeddings times sqrt(d_model) (paper), else times 1
    source_vocab_size: int | None = None  # a separate source vocabulary's size (None: vocab_size)
    decoder_start_id: int | None = None  # the decoder's first input (None: bos_id; Marian: pad)
    embedding_norm: bool = False  # a LayerNorm on embeddings + positions, one per side (BART, mBART)

    def __post_init__(self) -> None:
        """Reject inconsistent values early."""
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.d_model % 2:
            raise ValueError("d_model must be even for the sinusoidal positional encoding")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r} is not one of {', '.join(ACTIVATIONS)}")
        if self.position_table not in POSITION_TABLES:
            known = ", ".join(POSITION_TABLES)
            raise ValueError(f"position_table {self.position_table!r} is not one of {known}")
        if self.position_offset < 0:
            raise ValueError("position_offset must be >= 0")
        if self.tie_embeddings and self.src_vocab != self.vocab_size:
            raise ValueError("tied embeddings need one vocabulary (source_vocab_size == vocab_size)")

    @property
    def d_head(self) -> int:
        """Dimension of one attention head (d_k = d_v)."""
        return self.d_model // self.n_heads

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
