"""Our checkpoint as a CTranslate2 model: the same weights, filled into a `TransformerSpec`.

CTranslate2 is a benchmark reference only (the service never uses it). The mapping:
pre-LN or post-LN as our config says, ReLU, embeddings scaled by sqrt(d_model), our sinusoidal
table passed explicitly (CTranslate2's own table puts sin and cos in halves, ours interleaves),
our LayerNorm epsilon, Q/K/V and cross-attention K/V fused with `fuse_linear`, the shared
embedding matrix used for source, target and output projection. The vocabulary is the
tokenizer's own token strings in id order, so token ids map one to one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import ctranslate2
import numpy as np
import torch
from ctranslate2.converters import utils as ct2_utils
from ctranslate2.specs import common_spec, transformer_spec
from tokenizers import Tokenizer

from model.checkpoint import load_checkpoint, tokenizer_path
from model.transformer import (
    MultiHeadAttention,
    PositionwiseFeedForward,
    SublayerConnection,
    Transformer,
    sinusoidal_table,
)


def _np(t: torch.Tensor) -> np.ndarray:
    """A float32 numpy copy of a tensor."""
    return t.detach().float().cpu().numpy().copy()


def _linear(spec: common_spec.LinearSpec, layer: torch.nn.Linear) -> None:
    """Weight (out, in) and bias, as CTranslate2 stores them."""
    spec.weight = _np(layer.weight)
    spec.bias = _np(layer.bias)


def _norm(spec: common_spec.LayerNormSpec, sub: SublayerConnection | torch.nn.LayerNorm) -> None:
    """gamma / beta of a LayerNorm (or of a SublayerConnection's norm)."""
    norm = sub.norm if isinstance(sub, SublayerConnection) else sub
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _attention(spec, mha: MultiHeadAttention, self_attention: bool) -> None:
    """Fused Q/K/V (self) or Q + fused K/V (cross), then W^O."""
    if self_attention:
        parts = [common_spec.LinearSpec() for _ in range(3)]
        for p, lin in zip(parts, (mha.w_q, mha.w_k, mha.w_v), strict=True):
            _linear(p, lin)
        ct2_utils.fuse_linear(spec.linear[0], parts)
    else:
        _linear(spec.linear[0], mha.w_q)
        parts = [common_spec.LinearSpec() for _ in range(2)]
        for p, lin in zip(parts, (mha.w_k, mha.w_v), strict=True):
            _linear(p, lin)
        ct2_utils.fuse_linear(spec.linear[1], parts)
    _linear(spec.linear[-1], mha.w_o)


def _ffn(spec, ffn: PositionwiseFeedForward, sub: SublayerConnection) -> None:
    """The two linear layers and the norm of the FFN sublayer."""
    _norm(spec.layer_norm, sub)
    _linear(spec.linear_0, ffn.w_1)
    _linear(spec.linear_1, ffn.w_2)


def build_spec(model: Transformer, vocab: list[str]) -> transformer_spec.TransformerSpec:
    """A TransformerSpec holding model's weights."""
    cfg = model.cfg
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.n_encoder_layers, cfg.n_decoder_layers), cfg.n_heads, pre_norm=cfg.norm_first,
        no_final_norm=not cfg.norm_first, activation=common_spec.Activation.RELU,
    )
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps
    spec.config.decoder_start_token = vocab[cfg.bos_id]
    spec.config.bos_token, spec.config.eos_token = vocab[cfg.bos_id], vocab[cfg.eos_id]
    spec.config.unk_token = vocab[cfg.unk_id]
    table = _np(sinusoidal_table(cfg.max_len, cfg.d_model))
    enc, dec = spec.encoder, spec.decoder
    for side, emb in ((enc, model.src_embed), (dec, model.tgt_embed)):
        side.scale_embeddings = True
        side.position_encodings.encodings = table
        table_spec = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        table_spec.weight = _np(emb.lut.weight)
    if cfg.norm_first:
        _norm(enc.layer_norm, model.encoder.norm)
        _norm(dec.layer_norm, model.decoder.norm)
    for ls, layer in zip(enc.layer, model.encoder.layers, strict=True):
        _attention(ls.self_attention, layer.self_attn, self_attention=True)
        _norm(ls.self_attention.layer_norm, layer.sublayer[0])
        _ffn(ls.ffn, layer.ffn, layer.sublayer[1])
    for ls, layer in zip(dec.layer, model.decoder.layers, strict=True):
        _attention(ls.self_attention, layer.self_attn, self_attention=True)
        _norm(ls.self_attention.layer_norm, layer.sublayer[0])
        _attention(ls.attention, layer.cross_attn, self_attention=False)
        _norm(ls.attention.layer_norm, layer.sublayer[1])
        _ffn(ls.ffn, layer.ffn, layer.sublayer[2])
    _linear(dec.projection, model.generator.proj)
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)
    return spec


def checkpoint_vocab(checkpoint: Path) -> list[str]:
    """The token strings of the checkpoint's tokenizer, in id order."""
    tok = Tokenizer.from_file(str(tokenizer_path(checkpoint, load_checkpoint(checkpoint)[1])))
    return [tok.id_to_token(i) for i in range(tok.get_vocab_size())]


def convert(checkpoint: Path, out: Path, vocab: list[str] | None = None) -> Path:
    """Write a CTranslate2 model directory for the checkpoint (fp32 weights); returns out.

    vocab: token strings in id order (default: those of the checkpoint's tokenizer).
    """
    model, _ = load_checkpoint(checkpoint)
    vocab = vocab or checkpoint_vocab(checkpoint)
    if len(vocab) != model.cfg.vocab_size:
        raise ValueError(f"tokenizer has {len(vocab)} tokens, the model {model.cfg.vocab_size}")
    out.mkdir(parents=True, exist_ok=True)
    spec = build_spec(model, vocab)
    spec.validate()
    spec.optimize(quantization=None)  # fp32; also deduplicates the shared embedding matrix
    spec.save(str(out))
    return out


class CT2Engine:
    """Greedy decoding of token ids with a CTranslate2 Translator."""

    def __init__(self, model_dir: Path, vocab: list[str], threads: int = 2, device: str = "cpu",
                 compute_type: str = "float32") -> None:
        self.translator = ctranslate2.Translator(str(model_dir), device=device, intra_threads=threads,
                                                 inter_threads=1, compute_type=compute_type)
        self.vocab, self.index = vocab, {t: i for i, t in enumerate(vocab)}

    def greedy(self, sources: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Generated ids (no bos/eos) for sources given as ids (incl. eos), as one batch."""
        tokens = [[self.vocab[i] for i in src] for src in sources]
        results = self.translator.translate_batch(
            tokens, beam_size=1, max_batch_size=len(tokens), max_decoding_length=max_new_tokens,
            return_scores=False,
        )
        return [[self.index[t] for t in r.hypotheses[0]] for r in results]


def main() -> None:
    """CLI: convert a checkpoint."""
    ap = argparse.ArgumentParser(prog="python -m bench.engines.ct2", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, default=Path("artifacts/default/model.pt"))
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    print(convert(a.checkpoint, a.out))


if __name__ == "__main__":
    main()
