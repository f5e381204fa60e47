"""A Hugging Face seq2seq checkpoint -> model/'s Transformer: its configuration switches and weights.

Five families map onto the paper's Transformer with the switches of `ModelConfig`:

    marian   (MarianMTModel: OPUS-MT)   post-LN; FFN activation `activation_function` (OPUS-MT:
             swish = silu); sinusoids in [sin | cos] halves; embeddings times sqrt(d_model) if
             `scale_embedding`; final_logits_bias; the decoder starts from pad; one shared
             vocabulary, or separate source / target embeddings (share_encoder_decoder_embeddings
             false, `decoder_vocab_size`)
    m2m_100  (M2M100ForConditionalGeneration: M2M100, NLLB)   pre-LN with a final LayerNorm on
             encoder and decoder; fairseq sinusoids ([sin | cos], frequencies 10000^(-i/(d/2-1)))
             read at position + pad_id + 1; embeddings times sqrt(d_model) if `scale_embedding`;
             no output bias; the decoder starts from eos
    bart     (BartForConditionalGeneration)   post-LN; learned position tables, one per side, read at
             position + 2 (BartLearnedPositionalEmbedding's offset); a LayerNorm on embeddings +
             positions (layernorm_embedding, one per side); `activation_function` (gelu);
             embeddings times sqrt(d_model) if `scale_embedding`; final_logits_bias; one shared
             vocabulary; the decoder starts from decoder_start_token_id (eos)
    mbart    (MBartForConditionalGeneration: mBART-50)   as bart, but pre-LN with a final
             LayerNorm on encoder and decoder
    pegasus  (PegasusForConditionalGeneration)   pre-LN with a final LayerNorm on encoder and
             decoder; sinusoids in [sin | cos] halves read at the position itself (as Marian's);
             embeddings times sqrt(d_model) if `scale_embedding`; `activation_function`;
             final_logits_bias; one shared vocabulary; the decoder starts from pad
    t5, mt5  (T5ForConditionalGeneration: T5 v1.0, v1.1, Flan-T5; MT5ForConditionalGeneration)
             relative position bias, RMSNorm, no attention scaling, relu or gated-gelu
             feed-forward, no biases: export/hf/t5.py

Anything else is refused with the reason (`UNSUPPORTED`). Weights come from model.safetensors,
pytorch_model.bin (torch.load with weights_only=True) or their sharded indexes, in float32; every
tensor of the model must be found and every tensor of the file used (or known to be derived).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from export.hf.activations import our_activation
from export.hf.errors import UnsupportedModel
from export.hf.t5 import T5_FAMILIES, map_t5_weights, t5_config
from model.checkpoint import file_sha256
from model.config import ModelConfig
from model.transformer import Transformer, sinusoidal_table

SUPPORTED = {"marian": "MarianMTModel", "m2m_100": "M2M100ForConditionalGeneration",
             "bart": "BartForConditionalGeneration", "mbart": "MBartForConditionalGeneration",
             "pegasus": "PegasusForConditionalGeneration", **T5_FAMILIES}
# family -> (pre-LN, position table, LayerNorm on the embeddings); the offsets are in `position_offset`
LAYOUTS = {"marian": (False, "halves", False), "m2m_100": (True, "fairseq", False),
           "bart": (False, "learned", True), "mbart": (True, "learned", True),
           "pegasus": (True, "halves", False)}
LEARNED_OFFSET = 2  # BartLearnedPositionalEmbedding / MBartLearnedPositionalEmbedding: row = position + 2
UNSUPPORTED = {  # model_type -> why it does not map onto model/'s Transformer
    "plbart": "learned positional embeddings and a LayerNorm on the embeddings",
    "fsmt": "not mapped yet (fairseq WMT19: separate vocabularies, learned output projection)",
    "nllb-moe": "mixture-of-experts feed-forward layers",
    "led": "learned positions and local + global (Longformer) attention",
    "blenderbot": "learned positional embeddings",
    "prophetnet": "n-stream self-attention and relative position buckets",
    "umt5": "a relative position bias of its own in every layer (T5 and mT5 share one per stack)",
    "longt5": "local or transient-global attention over the source (and no cache of ours for it)",
}
# legacy BART-style keys that converted Marian configs carry; transformers' MarianMTModel ignores them
# (it is always post-LN, sinusoidal, without embedding LayerNorm), so a true value means the weights
# were not made for it
MARIAN_FALSE_FLAGS = ("normalize_before", "add_final_layer_norm", "normalize_embedding", "add_bias_logits")
ATTENTION = {"w_q": "q_proj", "w_k": "k_proj", "w_v": "v_proj", "w_o": "out_proj"}
SUBLAYER_NORMS = {"encoder": ("self_attn_layer_norm", "final_layer_norm"),
                  "decoder": ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")}


@dataclass(frozen=True)
class Pretrained:
    """What was read: the family, its transformers class, the weight files and their combined sha256."""

    family: str
    architecture: str
    config: dict[str, Any]
    weight_files: tuple[str, ...]
    sha256: str


def read_config(model_dir: Path) -> dict[str, Any]:
    """config.json of a Hugging Face model directory."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: --model must be a Hugging Face model directory")
    return json.loads(path.read_text(encoding="utf-8"))


def family_of(hf: dict[str, Any]) -> str:
    """The checkpoint's model_type if supported; else UnsupportedModel naming the family and why."""
    kind = hf.get("model_type")
    if kind in SUPPORTED:
        return kind
    arch = ", ".join(hf.get("architectures") or []) or "unknown architecture"
    if kind in UNSUPPORTED:
        raise UnsupportedModel(f"{kind} ({arch}) is not supported: {UNSUPPORTED[kind]}; "
                               f"supported: {', '.join(SUPPORTED)}")
    raise UnsupportedModel(f"model_type {kind!r} ({arch}) is not supported; supported: "
                           f"{', '.join(SUPPORTED)} (encoder-decoder Transformers)")


def _same(hf: dict[str, Any], a: str, b: str, what: str) -> int:
    """hf[a] == hf[b] (one value for encoder and decoder), else UnsupportedModel."""
    if hf[a] != hf[b]:
        raise UnsupportedModel(f"{what} differ between encoder ({hf[a]}) and decoder ({hf[b]}); "
                               "model/'s Transformer has one value for both")
    return int(hf[a])


def model_config(hf: dict[str, Any], family: str) -> ModelConfig:
    """The ModelConfig of a supported checkpoint's config.json (tying decided later, from the weights)."""
    if family in T5_FAMILIES:
        return t5_config(hf)
    activation = our_activation(str(hf.get("activation_function", "relu")), "activation_function")
    if family == "marian":
        set_flags = [f for f in MARIAN_FALSE_FLAGS if hf.get(f)]
        if set_flags or hf.get("static_position_embeddings") is False:
            what = ", ".join(set_flags) or "static_position_embeddings false"
            raise UnsupportedModel(f"marian config sets {what}: transformers' MarianMTModel ignores it "
                                   "(always post-LN with sinusoids), so these weights are not made for it")
    d_model, pad = int(hf["d_model"]), int(hf["pad_token_id"])
    vocab = int(hf["vocab_size"])
    target_vocab = int(hf.get("decoder_vocab_size") or vocab)
    shared = family != "marian" or hf.get("share_encoder_decoder_embeddings", True)
    if shared and target_vocab != vocab:
        raise UnsupportedModel(f"shared embeddings but vocab_size {vocab} != decoder_vocab_size "
                               f"{target_vocab}")
    start = hf.get("decoder_start_token_id")
    norm_first, table, embedding_norm = LAYOUTS[family]
    return ModelConfig(
        vocab_size=target_vocab if not shared else vocab,
        d_model=d_model,
        n_heads=_same(hf, "encoder_attention_heads", "decoder_attention_heads", "attention heads"),
        n_encoder_layers=int(hf["encoder_layers"]),
        n_decoder_layers=int(hf["decoder_layers"]),
        d_ff=_same(hf, "encoder_ffn_dim", "decoder_ffn_dim", "feed-forward sizes"),
        dropout=float(hf.get("dropout", 0.0)),
        max_len=int(hf["max_position_embeddings"]),
        pad_id=pad,
        bos_id=int(start if hf.get("bos_token_id") is None else hf["bos_token_id"]),  # Marian: no bos
        eos_id=int(hf["eos_token_id"]),
        unk_id=int(hf.get("unk_token_id", 1 if family == "marian" else 3)),
        tie_embeddings=False,
        norm_first=norm_first,
        layer_norm_eps=1e-5,  # nn.LayerNorm's default, which every family uses
        activation=activation,
        position_table=table,
        position_offset=position_offset(family, pad),
        scale_embedding=bool(hf.get("scale_embedding", False)),
        source_vocab_size=None if shared or vocab == target_vocab else vocab,
        decoder_start_id=int(start) if start is not None else None,
        embedding_norm=embedding_norm,
    )


def position_offset(family: str, pad: int) -> int:
    """The row of the family's position table that position 0 reads."""
    return {"marian": 0, "pegasus": 0, "m2m_100": pad + 1}.get(family, LEARNED_OFFSET)


def weight_files(model_dir: Path) -> list[Path]:
    """The checkpoint's weight files: safetensors first, else PyTorch .bin (either maybe sharded)."""
    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if (model_dir / single).is_file():
            return [model_dir / single]
        if (model_dir / index).is_file():
            shards = json.loads((model_dir / index).read_text(encoding="utf-8"))["weight_map"].values()
            return [model_dir / name for name in sorted(set(shards))]
    raise FileNotFoundError(f"no model.safetensors or pytorch_model.bin (nor a sharded index) in {model_dir}")


def read_weights(files: list[Path]) -> dict[str, Tensor]:
    """Every tensor of the files as float32, named without the "model." prefix of the *MTModel class."""
    from safetensors.torch import load_file

    state: dict[str, Tensor] = {}
    for f in files:
        if f.suffix == ".safetensors":
            part = load_file(f)
        else:
            part = torch.load(f, map_location="cpu", weights_only=True)
        state |= {k.removeprefix("model."): v.float() for k, v in part.items()}
    return state


def _first(state: dict[str, Tensor], *keys: str) -> str:
    """The first of keys present in state."""
    for k in keys:
        if k in state:
            return k
    raise UnsupportedModel(f"weights lack {' / '.join(keys)}")


def embedding_keys(hf: dict[str, Any], state: dict[str, Tensor], family: str) -> dict[str, str]:
    """Which file tensor each of our embeddings loads, as transformers ties them.

    Each module reads its own tensor when the file has it (transformers unties tensors that differ);
    a missing one comes from the tensor it is tied to (tie_word_embeddings: all four of shared,
    encoder, decoder and output embeddings; Marian with separate embeddings: decoder and output).
    """
    shared = family != "marian" or hf.get("share_encoder_decoder_embeddings", True)
    names = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"]
    groups = [["shared.weight", *names]] if shared else [names[:1], names[1:]]
    tied = hf.get("tie_word_embeddings", True)

    def resolve(key: str) -> str:
        group = next(g for g in groups if key in g) if tied else [key]
        return _first(state, *sorted(group, key=lambda k: k != key))  # its own tensor first

    ours = ["src_embed.lut.weight", "tgt_embed.lut.weight", "generator.proj.weight"]
    return {o: resolve(k) for o, k in zip(ours, names, strict=True)}


def hf_name(ours: str) -> str:
    """The transformers name (BART-style, shared by every family) of one of our layer tensors."""
    side = {"pos": "encoder", "tgt_pos": "decoder"}.get(ours.split(".")[0])
    if side is not None:  # pos.pe, the learned table (sliced by map_weights); pos.norm.weight, ...
        return f"{side}.embed_positions.weight" if ours.endswith(".pe") else \
            f"{side}.layernorm_embedding.{ours.rpartition('.')[2]}"
    m = re.fullmatch(r"(encoder|decoder)\.layers\.(\d+)\.(.+)", ours)
    if m is None:
        side, _, param = ours.split(".")  # the final LayerNorm of a pre-LN stack: encoder.norm.weight
        return f"{side}.layer_norm.{param}"
    side, i, rest = m.groups()
    module, _, param = rest.rpartition(".")
    if module.startswith("sublayer."):  # sublayer.j.norm -> the LayerNorm of sublayer j
        module = SUBLAYER_NORMS[side][int(module.split(".")[1])]
    elif module.startswith(("self_attn.", "cross_attn.")):
        attn, proj = module.split(".")
        module = f"{'encoder_attn' if attn == 'cross_attn' else attn}.{ATTENTION[proj]}"
    else:
        module = {"ffn.w_1": "fc1", "ffn.w_2": "fc2"}[module]
    return f"{side}.layers.{i}.{module}.{param}"


def check_positions(state: dict[str, Tensor], cfg: ModelConfig) -> None:
    """A stored position table must be our sinusoidal one (else the checkpoint learned its positions)."""
    if cfg.position_table == "learned":
        return
    table = sinusoidal_table(cfg.max_len, cfg.d_model, cfg.position_table, cfg.position_offset)
    for side in ("encoder", "decoder"):
        stored = state.get(f"{side}.embed_positions.weight")
        if stored is None:
            continue
        rows = stored[cfg.position_offset:][: cfg.max_len]
        if rows.shape != table[: len(rows)].shape or (rows - table[: len(rows)]).abs().max() > 1e-4:
            raise UnsupportedModel(f"{side}.embed_positions differs from the {cfg.position_table} sinusoid "
                                   "table: learned positions are not supported")


def map_weights(hf: dict[str, Any], state: dict[str, Tensor], cfg: ModelConfig, family: str
                ) -> tuple[ModelConfig, dict[str, Tensor]]:
    """Our config (tying set) and state dict from the file's tensors; UnsupportedModel if any is left over."""
    if family in T5_FAMILIES:
        return map_t5_weights(hf, state, cfg, family)
    check_positions(state, cfg)
    embeddings = embedding_keys(hf, state, family)
    tables = [state[k] for k in embeddings.values()]
    if all(t.shape == tables[0].shape and torch.equal(t, tables[0]) for t in tables):
        cfg = replace(cfg, tie_embeddings=True)  # one matrix for source, target and output
    ours = Transformer(cfg).state_dict()
    mapped, used = {}, set(embeddings.values())
    for name, like in ours.items():
        if name in embeddings:
            key = embeddings[name]
        elif name == "generator.proj.bias":
            key = "final_logits_bias"
            if key not in state:  # M2M100 / NLLB: no output bias
                mapped[name] = torch.zeros_like(like)
                continue
        else:
            key = hf_name(name)
        if key not in state:
            raise UnsupportedModel(f"weights lack {key} (for {name})")
        mapped[name] = state[key].reshape(like.shape) if key == "final_logits_bias" else state[key]
        if name.endswith("pos.pe"):  # the learned table's rows from the offset on
            mapped[name] = state[key][cfg.position_offset :][: cfg.max_len]
        if mapped[name].shape != like.shape:
            raise UnsupportedModel(f"{key} has shape {tuple(state[key].shape)}, expected {tuple(like.shape)}")
        used.add(key)
    derived = {"encoder.embed_positions.weight", "decoder.embed_positions.weight", "lm_head.weight",
               "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "shared.weight"}
    left = sorted(k for k in state if k not in used and k not in derived and not k.endswith("._float_tensor"))
    if left:
        raise UnsupportedModel(f"{len(left)} tensor(s) of the checkpoint have no place in the model: "
                               f"{left[:5]}")
    return cfg, mapped


def load_pretrained(model_dir: str | Path) -> tuple[Transformer, Pretrained]:
    """Read a Hugging Face model directory into our Transformer (eval mode) and describe it."""
    model_dir = Path(model_dir)
    hf = read_config(model_dir)
    family = family_of(hf)
    cfg = model_config(hf, family)
    files = weight_files(model_dir)
    state = read_weights(files)
    cfg, mapped = map_weights(hf, state, cfg, family)
    model = Transformer(cfg)
    model.load_state_dict(mapped)
    hashes = [file_sha256(f) for f in files]
    sha = hashes[0] if len(hashes) == 1 else hashlib.sha256("".join(hashes).encode()).hexdigest()
    arch = (hf.get("architectures") or [SUPPORTED[family]])[0]
    info = Pretrained(family, arch, hf, tuple(f.name for f in files), sha)
    return model.eval(), info

