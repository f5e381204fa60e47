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
from model.norms import layer_norm
from model.positions import PositionalEncoding, RelativePositionBias, sinusoidal_table  # noqa: F401 (re-exported)

KV = tuple[Tensor, Tensor]  # (key, value), each (B, H, L, Dh)


def subsequent_mask(size: int, device: torch.device | None = None) -> Tensor:
    """Causal mask (1, T, T): position i may attend to positions <= i."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril().unsqueeze(0)


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Key mask (B, 1, L) that hides padding tokens."""
    return (tokens != pad_id).unsqueeze(1)


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, bias: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(d_k) + bias) V; returns (output, attention weights).

    `bias` (B|1, H, Tq, Tk) is T5's relative position bias (model/positions.py), added before masking.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, Tq, Tk)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    return weights @ v, weights  # (B, H, Tq, Dh), (B, H, Tq, Tk)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i).

    Heads of d_head = d_model / h dimensions (the paper), or of the given d_head (T5's d_kv: h * d_head
    may differ from d_model).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, d_head: int | None = None) -> None:
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_head or d_model // n_heads
        inner = n_heads * self.d_head
        self.w_q = nn.Linear(d_model, inner)
        self.w_k = nn.Linear(d_model, inner)
        self.w_v = nn.Linear(d_model, inner)
        self.w_o = nn.Linear(inner, d_model)
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
        bias: Tensor | None = None,
    ) -> tuple[Tensor, KV, Tensor]:
        """Attend from query (B, Tq, D) to key_value (B, Tk, D).

        `past` holds cached (key, value) that the new keys are appended to (self-attention);
        `kv` replaces the projection of key_value entirely (precomputed cross-attention); `bias`
        (B|1, H, Tq, Tk) is added to the logits (T5's relative position bias).
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
        out, weights = scaled_dot_product_attention(q, k, v, mask, bias)
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_head)  # concat heads
        return self.w_o(self.dropout(out)), (k, v), weights


# the feed-forward non-linearity sigma of FFN(x) = sigma(x W_1 + b_1) W_2 + b_2 (config.ACTIVATIONS)
def gelu_tanh(x: Tensor) -> Tensor:
    """GELU's tanh approximation 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), written out as
    transformers' gelu_new (T5 v1.1's gated-gelu) computes it."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACTIVATION_FUNCTIONS = {
    "relu": F.relu,  # max(0, x): the paper, M2M100, NLLB, T5 v1.0
    "gelu": F.gelu,  # x Phi(x), Phi the standard normal CDF (erf form)
    "gelu_tanh": gelu_tanh,  # GELU's tanh approximation: T5 v1.1, Flan-T5, mT5 (gelu_new)
    "silu": F.silu,  # x sigmoid(x), "swish": Marian / OPUS-MT
}


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = sigma(x W_1 + b_1) W_2 + b_2; sigma = max(0, .) in the paper.

    Gated (a GLU variant, Shazeer 2020; T5 v1.1's gated-gelu): FFN(x) = (sigma(x W_1 + b_1) * (x V + c)) W_2
    + b_2, the activation times a second linear projection `v` of the same input.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu",
                 gated: bool = False) -> None:
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.v = nn.Linear(d_model, d_ff) if gated else None
        self.dropout = nn.Dropout(dropout)
        self.activation = ACTIVATION_FUNCTIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        """Apply the same two-layer network at every position."""
        h = self.activation(self.w_1(x))
        if self.v is not None:
            h = h * self.v(x)
        return self.w_2(self.dropout(h))


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
    """Residual + LayerNorm: post-LN LayerNorm(x + Sublayer(x)), or pre-LN x + Sublayer(LayerNorm(x));
    RMSNorm for LayerNorm with `rms` (T5)."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool, eps: float, rms: bool = False) -> None:
        super().__init__()
        self.norm = layer_norm(d_model, eps, rms)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer) -> tuple[Tensor, tuple]:
        """Apply `sublayer` (returning (out, *extra)) with residual and norm; pass extras through."""
        out, *extra = sublayer(self.norm(x) if self.norm_first else x)
        y = x + self.dropout(out)
        return (y if self.norm_first else self.norm(y)), tuple(extra)


def attention(cfg: ModelConfig) -> MultiHeadAttention:
    """A layer's self- or cross-attention."""
    return MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout, cfg.d_head)


def feed_forward(cfg: ModelConfig) -> PositionwiseFeedForward:
    """A layer's feed-forward network (gated with cfg.gated_ffn)."""
    return PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation, cfg.gated_ffn)


def sublayer(cfg: ModelConfig) -> SublayerConnection:
    """The residual connection and norm around one sublayer."""
    return SublayerConnection(cfg.d_model, cfg.dropout, cfg.norm_first, cfg.layer_norm_eps, cfg.rms_norm)


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each wrapped in a SublayerConnection."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = attention(cfg)
        self.ffn = feed_forward(cfg)
        self.sublayer = nn.ModuleList([sublayer(cfg) for _ in range(2)])

    def forward(self, x: Tensor, src_mask: Tensor, bias: Tensor | None = None) -> Tensor:
        """x (B, S, D), src_mask (B, 1, S), bias (1, H, S, S) or None -> (B, S, D)."""
        x, _ = self.sublayer[0](x, lambda h: self.self_attn(h, h, src_mask, bias=bias)[:1])
        x, _ = self.sublayer[1](x, lambda h: (self.ffn(h),))
        return x


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder output, then feed-forward."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn, self.cross_attn = attention(cfg), attention(cfg)
        self.ffn = feed_forward(cfg)
        self.sublayer = nn.ModuleList([sublayer(cfg) for _ in range(3)])

    def forward(
        self, x: Tensor, cross_kv: KV, src_mask: Tensor, tgt_mask: Tensor, past: KV | None = None,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, KV, Tensor]:
        """x (B, T, D) -> (B, T, D), the updated self-attention cache, cross-attention weights; `bias`
        (B|1, H, T, P+T) is the self-attention's position bias (cross-attention has none)."""
        x, (present,) = self.sublayer[0](
            x, lambda h: self.self_attn(h, h, tgt_mask, past=past, bias=bias)[:2])
        x, (weights,) = self.sublayer[1](
            x, lambda h: self.cross_attn(h, mask=src_mask, kv=cross_kv)[0::2]
        )
        x, _ = self.sublayer[2](x, lambda h: (self.ffn(h),))
        return x, present, weights


def stack_parts(cfg: ModelConfig, bidirectional: bool
                ) -> tuple[nn.Module | None, RelativePositionBias | None]:
    """A stack's final norm (pre-LN) and its relative position bias (position_table "relative"), or None."""
    norm = layer_norm(cfg.d_model, cfg.layer_norm_eps, cfg.rms_norm) if cfg.norm_first else None
    relative = cfg.position_table == "relative"
    bias = RelativePositionBias(cfg.n_heads, cfg.relative_buckets, cfg.relative_max_distance, bidirectional) \
        if relative else None
    return norm, bias


class Encoder(nn.Module):
    """A stack of N encoder layers (with a final LayerNorm when pre-LN, and T5's relative position bias,
    bidirectional, shared by its layers)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers)])
        self.norm, self.position_bias = stack_parts(cfg, bidirectional=True)

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        """(B, S, D) -> (B, S, D)."""
        bias = None
        if self.position_bias is not None:  # (1, H, S, S): column differences, whatever the padding
            positions = torch.arange(x.size(1), device=x.device).unsqueeze(0)
            bias = self.position_bias(positions, positions)
        for layer in self.layers:
            x = layer(x, src_mask, bias)
        return self.norm(x) if self.norm is not None else x


class Decoder(nn.Module):
    """A stack of N decoder layers (with a final LayerNorm when pre-LN, and T5's relative position bias,
    unidirectional, shared by its self-attention layers)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers)])
        self.norm, self.position_bias = stack_parts(cfg, bidirectional=False)

    def forward(
        self,
        x: Tensor,
        cross_kv: list[KV],
        src_mask: Tensor,
        tgt_mask: Tensor,
        past: list[KV] | None = None,
        positions: Tensor | None = None,
        key_positions: Tensor | None = None,
    ) -> tuple[Tensor, list[KV], Tensor]:
        """(B, T, D) -> (B, T, D), per-layer caches, last layer's cross-attention (B, H, T, S); with a
        position bias, `positions` (B, T) of the new tokens and `key_positions` (B|1, K) of the keys."""
        bias = self.position_bias(positions, key_positions) if self.position_bias is not None else None
        presents, weights = [], None
        for i, layer in enumerate(self.layers):
            x, present, weights = layer(x, cross_kv[i], src_mask, tgt_mask, past[i] if past else None, bias)
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
        key_positions: Tensor | None = None,
    ) -> tuple[Tensor, list[KV], Tensor]:
        """New target tokens (B, T) -> log-probs (B, T, V), updated cache, cross-attn (B, H, T, S).

        With a cache of P past positions, the new tokens sit at positions P..P+T-1 unless
        `positions` (B, T) says otherwise; `self_mask` (B, P+T) marks valid cached keys. A relative
        position bias reads the keys' positions from `key_positions` (B|1, K), else counts each row's
        valid keys (self_mask's running sum - 1: a row's first key is at 0 wherever its history begins),
        else 0..P+T-1.
        """
        t = tgt.size(1)
        p = past[0][0].size(2) if past else 0
        if positions is None:
            positions = torch.arange(p, p + t, device=tgt.device).unsqueeze(0).expand(tgt.size(0), t)
        causal = torch.ones(t, p + t, dtype=torch.bool, device=tgt.device).tril(diagonal=p)
        tgt_mask = causal.unsqueeze(0)  # (1, T, P+T)
        if self_mask is not None:
            tgt_mask = tgt_mask & self_mask.unsqueeze(1)  # (B, T, P+T)
        if self.decoder.position_bias is not None and key_positions is None:
            key_positions = self_mask.long().cumsum(-1) - 1 if self_mask is not None else \
                torch.arange(p + t, device=tgt.device).unsqueeze(0)
        x = (self.pos if self.tgt_pos is None else self.tgt_pos)(self.tgt_embed(tgt), positions)
        h, presents, weights = self.decoder(x, cross_kv, src_mask, tgt_mask, past, positions, key_positions)
        return self.generator(h), presents, weights

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Teacher-forced training pass: log-probs (B, T, V) for every target position."""
        src_mask = padding_mask(src, self.cfg.pad_id)
        memory = self.encode(src, src_mask)
        return self.decode(tgt, self.cross_kv(memory), src_mask)[0]
