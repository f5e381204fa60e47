"""The Transformer of "Attention is All You Need" (Vaswani et al., 2017), one piece per concept.

Shapes: B batch, S source length, T target length, P past (cached) length, D d_model,
H heads, Dh = D / H. Masks are boolean, True where attention is allowed.
The `encode()` / `decode()` seam is where the ONNX export cuts the model in two graphs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import ModelConfig

KV = tuple[Tensor, Tensor]  # (key, value), each (B, H, L, Dh)


def subsequent_mask(size: int, device: torch.device | None = None) -> Tensor:
    """Causal mask (1, T, T): position i may attend to positions <= i."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril().unsqueeze(0)


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Key mask (B, 1, L) that hides padding tokens."""
    return (tokens != pad_id).unsqueeze(1)


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V; returns (output, attention weights)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    return weights @ v, weights  # (B, H, Tq, Dh), (B, H, Tq, Tk)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, H, L, Dh)."""
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, self.d_head).transpose(1, 2)

    def project_kv(self, x: Tensor) -> KV:
        """Keys and values of x, split into heads: the part a KV cache stores."""
        return self.split_heads(self.w_k(x)), self.split_heads(self.w_v(x))

    def forward(
        self,
        query: Tensor,
        key_value: Tensor | None = None,
        mask: Tensor | None = None,
        past: KV | None = None,
        kv: KV | None = None,
    ) -> tuple[Tensor, KV, Tensor]:
        """Attend from query (B, Tq, D) to key_value (B, Tk, D).

        `past` holds cached (key, value) that the new keys are appended to (self-attention);
        `kv` replaces the projection of key_value entirely (precomputed cross-attention).
        Returns the output (B, Tq, D), the (key, value) used, and the weights (B, H, Tq, Tk).
        """
        q = self.split_heads(self.w_q(query))  # (B, H, Tq, Dh)
        if kv is None:
            k, v = self.project_kv(query if key_value is None else key_value)
            if past is not None:
                k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        else:
            k, v = kv
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # (B, 1, Tq|1, Tk), broadcast over heads
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_head)  # concat heads
        return self.w_o(self.dropout(out)), (k, v), weights


# the feed-forward non-linearity sigma of FFN(x) = sigma(x W_1 + b_1) W_2 + b_2 (config.ACTIVATIONS)
ACTIVATION_FUNCTIONS = {
    "relu": F.relu,  # max(0, x): the paper, M2M100, NLLB
    "gelu": F.gelu,  # x Phi(x), Phi the standard normal CDF (erf form)
    "silu": F.silu,  # x sigmoid(x), "swish": Marian / OPUS-MT
}


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = sigma(x W_1 + b_1) W_2 + b_2; sigma = max(0, .) in the paper."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = ACTIVATION_FUNCTIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        """Apply the same two-layer network at every position."""
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


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
    (a parameter `pe`, saved) of max_len rows: the rows from `offset` on of the checkpoint's table.
    `norm` is BART's layernorm_embedding: LayerNorm(embeddings + positions).
    """

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0, layout: str = "interleaved",
                 offset: int = 0, norm: bool = False, eps: float = 1e-5) -> None:
        super().__init__()
        if layout == "learned":
            self.pe = nn.Parameter(torch.zeros(max_len, d_model))
        else:
            self.register_buffer("pe", sinusoidal_table(max_len, d_model, layout, offset), persistent=False)
        self.norm = nn.LayerNorm(d_model, eps=eps) if norm else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """x (B, L, D); positions (B, L) or None for 0..L-1."""
        # (L, D) broadcast over the batch, or a table lookup per position (B, L, D)
        pe = self.pe[: x.size(1)] if positions is None else F.embedding(positions, self.pe)
        x = x + pe
        return self.dropout(self.norm(x) if self.norm is not None else x)


class Embeddings(nn.Module):
    """Token embedding scaled by sqrt(d_model) (the paper), or by 1 (scale=False)."""

    def __init__(self, vocab_size: int, d_model: int, scale: bool = True) -> None:
        super().__init__()
        self.lut = nn.Embedding(vocab_size, d_model)
        self.scale = math.sqrt(d_model) if scale else 1.0

    def forward(self, tokens: Tensor) -> Tensor:
        """(B, L) int -> (B, L, D)."""
        return self.lut(tokens) * self.scale


class SublayerConnection(nn.Module):
    """Residual + LayerNorm: post-LN LayerNorm(x + Sublayer(x)), or pre-LN x + Sublayer(LayerNorm(x))."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool, eps: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer) -> tuple[Tensor, tuple]:
        """Apply `sublayer` (returning (out, *extra)) with residual and norm; pass extras through."""
        out, *extra = sublayer(self.norm(x) if self.norm_first else x)
        y = x + self.dropout(out)
        return (y if self.norm_first else self.norm(y)), tuple(extra)


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each wrapped in a SublayerConnection."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.ffn = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation)
        args = (cfg.d_model, cfg.dropout, cfg.norm_first, cfg.layer_norm_eps)
        self.sublayer = nn.ModuleList([SublayerConnection(*args) for _ in range(2)])

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        """x (B, S, D), src_mask (B, 1, S) -> (B, S, D)."""
        x, _ = self.sublayer[0](x, lambda h: self.self_attn(h, h, src_mask)[:1])
        x, _ = self.sublayer[1](x, lambda h: (self.ffn(h),))
        return x


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder output, then feed-forward."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.ffn = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation)
        args = (cfg.d_model, cfg.dropout, cfg.norm_first, cfg.layer_norm_eps)
        self.sublayer = nn.ModuleList([SublayerConnection(*args) for _ in range(3)])

    def forward(
        self, x: Tensor, cross_kv: KV, src_mask: Tensor, tgt_mask: Tensor, past: KV | None = None
    ) -> tuple[Tensor, KV, Tensor]:
        """x (B, T, D) -> (B, T, D), the updated self-attention cache, cross-attention weights."""
        x, (present,) = self.sublayer[0](x, lambda h: self.self_attn(h, h, tgt_mask, past=past)[:2])
        x, (weights,) = self.sublayer[1](
            x, lambda h: self.cross_attn(h, mask=src_mask, kv=cross_kv)[0::2]
        )
        x, _ = self.sublayer[2](x, lambda h: (self.ffn(h),))
        return x, present, weights


class Encoder(nn.Module):
    """A stack of N encoder layers (with a final LayerNorm when pre-LN)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers)])
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else None

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        """(B, S, D) -> (B, S, D)."""
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x) if self.norm is not None else x


class Decoder(nn.Module):
    """A stack of N decoder layers (with a final LayerNorm when pre-LN)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers)])
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else None

    def forward(
        self,
        x: Tensor,
        cross_kv: list[KV],
        src_mask: Tensor,
        tgt_mask: Tensor,
        past: list[KV] | None = None,
    ) -> tuple[Tensor, list[KV], Tensor]:
        """(B, T, D) -> (B, T, D), per-layer caches, last layer's cross-attention (B, H, T, S)."""
        presents, weights = [], None
        for i, layer in enumerate(self.layers):
            x, present, weights = layer(x, cross_kv[i], src_mask, tgt_mask, past[i] if past else None)
            presents.append(present)
        return (self.norm(x) if self.norm is not None else x), presents, weights


class Generator(nn.Module):
    """Final linear projection to the vocabulary, then log-softmax: log_softmax(x W + b).

    The bias b is what transformers calls `final_logits_bias` (Marian); models without one load zeros.
    """

    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> log-probabilities (B, T, V)."""
        return F.log_softmax(self.proj(x), dim=-1)


class Transformer(nn.Module):
    """Encoder-decoder Transformer; one shared vocabulary unless cfg.source_vocab_size says otherwise."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.src_embed = Embeddings(cfg.src_vocab, cfg.d_model, cfg.scale_embedding)
        self.tgt_embed = Embeddings(cfg.vocab_size, cfg.d_model, cfg.scale_embedding)
        pos = (cfg.d_model, cfg.max_len, cfg.dropout, cfg.position_table, cfg.position_offset,
               cfg.embedding_norm, cfg.layer_norm_eps)
        self.pos = PositionalEncoding(*pos)  # the source's (and the target's unless cfg.side_positions)
        self.tgt_pos = PositionalEncoding(*pos) if cfg.side_positions else None
        self.encoder, self.decoder = Encoder(cfg), Decoder(cfg)
        self.generator = Generator(cfg.d_model, cfg.vocab_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if cfg.tie_embeddings:  # one matrix for source, target and output (paper, section 3.4)
            self.tgt_embed.lut.weight = self.src_embed.lut.weight
            self.generator.proj.weight = self.src_embed.lut.weight
            nn.init.normal_(self.src_embed.lut.weight, std=cfg.d_model**-0.5)

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        """Source tokens (B, S) -> encoder output, the "memory" (B, S, D)."""
        return self.encoder(self.pos(self.src_embed(src)), src_mask)

    def cross_kv(self, memory: Tensor) -> list[KV]:
        """Each decoder layer's cross-attention keys and values, computed once per source."""
        return [layer.cross_attn.project_kv(memory) for layer in self.decoder.layers]

    def decode(
        self,
        tgt: Tensor,
        cross_kv: list[KV],
        src_mask: Tensor,
        past: list[KV] | None = None,
        positions: Tensor | None = None,
        self_mask: Tensor | None = None,
    ) -> tuple[Tensor, list[KV], Tensor]:
        """New target tokens (B, T) -> log-probs (B, T, V), updated cache, cross-attn (B, H, T, S).

        With a cache of P past positions, the new tokens sit at positions P..P+T-1 unless
        `positions` (B, T) says otherwise; `self_mask` (B, P+T) marks valid cached keys.
        """
        t = tgt.size(1)
        p = past[0][0].size(2) if past else 0
        if positions is None:
            positions = torch.arange(p, p + t, device=tgt.device).unsqueeze(0).expand(tgt.size(0), t)
        causal = torch.ones(t, p + t, dtype=torch.bool, device=tgt.device).tril(diagonal=p)
        tgt_mask = causal.unsqueeze(0)  # (1, T, P+T)
        if self_mask is not None:
            tgt_mask = tgt_mask & self_mask.unsqueeze(1)  # (B, T, P+T)
        x = (self.pos if self.tgt_pos is None else self.tgt_pos)(self.tgt_embed(tgt), positions)
        h, presents, weights = self.decoder(x, cross_kv, src_mask, tgt_mask, past)
        return self.generator(h), presents, weights

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Teacher-forced training pass: log-probs (B, T, V) for every target position."""
        src_mask = padding_mask(src, self.cfg.pad_id)
        memory = self.encode(src, src_mask)
        return self.decode(tgt, self.cross_kv(memory), src_mask)[0]
