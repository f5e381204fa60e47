"""T5 checkpoints (T5 v1.0, T5 v1.1 / Flan-T5: `t5`; mT5: `mt5`) -> model/'s Transformer: switches, weights.

What transformers' T5ForConditionalGeneration / MT5ForConditionalGeneration compute, and where it lands:

    positions    none added to the embeddings; each stack's first self-attention layer holds a learned bias
                 per head and bucket of key - query position (bidirectional buckets in the encoder, causal in
                 the decoder) that every self-attention layer of the stack adds to its logits;
                 cross-attention has none -> position_table "relative", one RelativePositionBias per stack
                 (relative_attention_num_buckets, relative_attention_max_distance)
    attention    logits not divided by sqrt(d_kv); heads of d_kv (num_heads * d_kv may differ from d_model)
                 -> W^Q times sqrt(d_kv) at import, head_dim: exact where sqrt(d_kv) is a power of two (d_kv
                 64 of every T5, Flan-T5 and mT5 size but t5-3b / t5-11b), else one rounding of W^Q
                 (d_kv 128: relative 6e-8)
    norms        pre-norm, RMSNorm without bias (T5LayerNorm, layer_norm_epsilon), a final norm per stack
                 -> norm_first, rms_norm
    feed-forward `feed_forward_proj`: "relu" (v1.0: wo(relu(wi x))) or "gated-gelu" (v1.1, Flan-T5, mT5:
                 wo(gelu_new(wi_0 x) * wi_1 x), gelu_new the tanh approximation) -> activation, gated_ffn
    linears      no biases -> zeros (the projections', the FFN's and the output's)
    embeddings   one shared table (shared.weight), not scaled -> scale_embedding false
    head         T5 v1.0 ties the output projection to the shared table and multiplies the decoder's output
                 by d_model ** -0.5 before it; v1.1 / Flan-T5 / mT5 have their own lm_head.weight and no
                 scaling. transformers 5 ties lm_head to the shared table unless the weights file holds an
                 lm_head.weight that differs (then it keeps both), and scales the output where the config's
                 `scale_decoder_outputs` says so, else unless its `tie_word_embeddings` is false (mT5: never)
                 -> the head is read from the file as transformers reads it, and the scale is folded into
                 the decoder's final norm weight (the output projection is the only reader of that norm)
    decoding     the decoder starts from decoder_start_token_id (pad, 0); eos 1; no bos

Strict as the other families: every tensor of the model found, every tensor of the file used, but
decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight, which original checkpoints carry
and transformers ignores (cross-attention has no position bias).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from export.hf.activations import our_activation
from export.hf.errors import UnsupportedModel
from model.config import ModelConfig
from model.transformer import Transformer

T5_FAMILIES = {"t5": "T5ForConditionalGeneration", "mt5": "MT5ForConditionalGeneration"}
DEFAULT_MAX_LEN = 512  # T5's n_positions (the tokenizers' model_max_length); relative positions have no limit
# a tensor original checkpoints carry and transformers ignores (cross-attention has no position bias)
IGNORED = ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",)
EMBEDDINGS = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight")
SUBLAYERS = {"encoder": ("SelfAttention", "DenseReluDense"),
             "decoder": ("SelfAttention", "EncDecAttention", "DenseReluDense")}
ATTENTION = {"self_attn": 0, "cross_attn": 1}  # our module -> its sublayer (T5's layer.j)
PROJECTIONS = {"w_q": "q", "w_k": "k", "w_v": "v", "w_o": "o"}


def feed_forward(hf: dict[str, Any]) -> tuple[str, bool]:
    """(our activation, gated) of a config, as T5Config derives dense_act_fn and is_gated_act from
    feed_forward_proj ("relu", "gated-gelu" -> gelu_new, "gated-<act>"); stated values win, as there."""
    proj = str(hf.get("feed_forward_proj", "relu"))
    parts = proj.split("-")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise UnsupportedModel(f"feed_forward_proj {proj!r} is not '<act>' or 'gated-<act>'")
    stated = hf.get("dense_act_fn")
    act = stated or ("gelu_new" if proj == "gated-gelu" else parts[-1])
    gated = hf.get("is_gated_act", parts[0] == "gated")
    key = "dense_act_fn" if stated else f"feed_forward_proj {proj!r}: activation"
    return our_activation(act, key), bool(gated)


def scaled_output(hf: dict[str, Any], family: str) -> bool:
    """Whether transformers multiplies the decoder's output by d_model ** -0.5 before the head: T5Config's
    scale_decoder_outputs when the config states it, else unless tie_word_embeddings is false; mT5 never."""
    if family == "mt5":
        return False
    if "scale_decoder_outputs" in hf:
        return bool(hf["scale_decoder_outputs"])
    return hf.get("tie_word_embeddings") is not False


def t5_config(hf: dict[str, Any]) -> ModelConfig:
    """The ModelConfig of a T5 / mT5 config.json (tying decided later, from the weights)."""
    activation, gated = feed_forward(hf)
    pad = int(hf.get("pad_token_id", 0))
    start = hf.get("decoder_start_token_id")
    start = pad if start is None else int(start)
    eos = hf.get("eos_token_id", 1)
    if isinstance(eos, list):
        if len(eos) != 1:
            raise UnsupportedModel(f"eos_token_id {eos} names several ids; the bundle has one eos")
        eos = eos[0]
    layers = int(hf.get("num_layers", 6))
    return ModelConfig(
        vocab_size=int(hf["vocab_size"]), d_model=int(hf["d_model"]), n_heads=int(hf["num_heads"]),
        n_encoder_layers=layers, n_decoder_layers=int(hf.get("num_decoder_layers") or layers),
        d_ff=int(hf["d_ff"]), dropout=float(hf.get("dropout_rate", 0.0)),
        max_len=int(hf.get("n_positions") or DEFAULT_MAX_LEN), pad_id=pad, bos_id=start, eos_id=int(eos),
        unk_id=int(hf.get("unk_token_id", 2)), tie_embeddings=False, norm_first=True,
        layer_norm_eps=float(hf.get("layer_norm_epsilon", 1e-6)), activation=activation,
        position_table="relative", scale_embedding=False, decoder_start_id=start, rms_norm=True,
        gated_ffn=gated, head_dim=int(hf["d_kv"]),
        relative_buckets=int(hf.get("relative_attention_num_buckets", 32)),
        relative_max_distance=int(hf.get("relative_attention_max_distance", 128)))


def t5_name(ours: str, gated: bool) -> str | None:
    """The transformers name of one of our tensors (None: a bias T5 does not have, loaded as zeros)."""
    if ours.endswith(".bias"):
        return None
    if ours.endswith("position_bias.buckets.weight"):
        return f"{ours.split('.')[0]}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    if ours in ("encoder.norm.weight", "decoder.norm.weight"):
        return f"{ours.split('.')[0]}.final_layer_norm.weight"
    m = re.fullmatch(r"(encoder|decoder)\.layers\.(\d+)\.(\w+)\.(\w+)\.?(\w*)\.weight", ours)
    if m is None:
        raise UnsupportedModel(f"no T5 tensor for {ours}")
    side, i, module, part, rest = m.groups()
    block = f"{side}.block.{i}.layer"
    if module == "sublayer":  # sublayer.j.norm
        return f"{block}.{part}.layer_norm.weight"
    if module in ATTENTION:
        j = ATTENTION[module]
        return f"{block}.{j}.{SUBLAYERS[side][j]}.{PROJECTIONS[part]}.weight"
    ffn = {"w_1": "wi_0" if gated else "wi", "v": "wi_1", "w_2": "wo"}[part]
    return f"{block}.{len(SUBLAYERS[side]) - 1}.DenseReluDense.{ffn}.weight"


def embedding_keys(state: dict[str, Tensor]) -> dict[str, str]:
    """Which file tensor each of our embeddings loads, as transformers 5 reads a T5 file: each module its own
    tensor where the file has it, else the shared table (tied)."""
    if "shared.weight" not in state:
        raise UnsupportedModel("T5 weights lack shared.weight")
    own = {"src_embed.lut.weight": "encoder.embed_tokens.weight",
           "tgt_embed.lut.weight": "decoder.embed_tokens.weight", "generator.proj.weight": "lm_head.weight"}
    return {ours: key if key in state else "shared.weight" for ours, key in own.items()}


def map_t5_weights(hf: dict[str, Any], state: dict[str, Tensor], cfg: ModelConfig, family: str
                   ) -> tuple[ModelConfig, dict[str, Tensor]]:
    """Our config (tying set) and state dict from a T5 file's tensors (module doc: W^Q times sqrt(d_kv),
    the head's scale in the decoder's final norm, zero biases); UnsupportedModel if one is missing or left
    over."""
    embeddings = embedding_keys(state)
    tables = [state[k] for k in embeddings.values()]
    if all(t.shape == tables[0].shape and torch.equal(t, tables[0]) for t in tables):
        cfg = replace(cfg, tie_embeddings=True)
    ours = Transformer(cfg).state_dict()
    mapped, used = {}, set(embeddings.values())
    for name, like in ours.items():
        key = embeddings.get(name) or t5_name(name, cfg.gated_ffn)
        if key is None:
            mapped[name] = torch.zeros_like(like)
            continue
        if key not in state:
            raise UnsupportedModel(f"weights lack {key} (for {name})")
        tensor = state[key]
        if tensor.shape != like.shape:
            raise UnsupportedModel(f"{key} has shape {tuple(tensor.shape)}, expected {tuple(like.shape)}")
        if name.endswith("attn.w_q.weight"):  # T5 does not divide the logits by sqrt(d_kv); the model does
            tensor = tensor * math.sqrt(cfg.d_head)
        if name == "decoder.norm.weight" and scaled_output(hf, family):
            tensor = tensor * cfg.d_model**-0.5
        mapped[name] = tensor
        used.add(key)
    left = sorted(k for k in state if k not in used and k not in EMBEDDINGS and k not in IGNORED)
    if left:
        per_layer = any(k.endswith("relative_attention_bias.weight") for k in left)
        why = " (a position bias in layers past the first, as UMT5's)" if per_layer else ""
        raise UnsupportedModel(f"{len(left)} tensor(s) of the checkpoint have no place in the model: "
                               f"{left[:5]}{why}")
    return cfg, mapped
