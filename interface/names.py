"""ONNX input/output names and dynamic axes, declared once for the exporter and the runtime.

Torch-free on purpose: `service/` imports this module. Names follow the HF Optimum /
onnxruntime-genai convention for encoder-decoder models (`past_key_values.{i}.decoder.key` ->
`present.{i}.decoder.key`; cross-attention K/V as `*.encoder.*`).

encoder.onnx
    input_ids            int64  [batch, src_len]          source ids (+ eos), right-padded
    attention_mask       int64  [batch, src_len]          1 = real token, 0 = padding
 -> present.{i}.encoder.key/value  float [batch, heads, src_len, head_dim]  per decoder layer

decoder.onnx, kv_cache "concat" (one step, or several new tokens)
    input_ids            int64  [batch, new_len]
    position_ids         int64  [batch, new_len]          position of each new token
    attention_mask       int64  [batch, past_len + new_len]  1 = valid self-attention key
    encoder_attention_mask int64 [batch, src_len]
    past_key_values.{i}.decoder.key/value  float [batch, heads, past_len, head_dim]
    past_key_values.{i}.encoder.key/value  float [batch, heads, src_len, head_dim]
 -> logprobs             float  [batch, new_len, vocab]   log-softmax over the vocabulary
    present.{i}.decoder.key/value  float [batch, heads, past_len + new_len, head_dim]
    cross_attentions     float  [batch, new_len, src_len]  last layer, mean over heads
    log_normalizer       float32 [batch, new_len]         logsumexp of the logits over the vocabulary
                                                          (float32 in the fp16 variant too), so that
                                                          logits = logprobs + log_normalizer[..., None]
Decoders exported before `log_normalizer` existed end at cross_attentions
(`decoder_outputs(n, normalizer=False)`); a runtime tells them apart by the decoder's output names.

decoder.onnx, kv_cache "inplace" (export/lowering/inplace.py): the same but for the masks
    seqlens_k            int32  [batch]                   per row: cache length after the step - 1
    total_sequence_length int32 []                        max over rows of seqlens_k + 1
    encoder_seqlens_k    int32  [batch]                   per row: source length - 1 (>= 0)
    encoder_total_sequence_length int32 []                src_len of the encoder K/V inputs
    past_key_values.{i}.decoder.key/value  float [batch, heads, max_cache, head_dim]
 -> present.{i}.decoder.key/value  float [batch, heads, max_cache, head_dim]  (bind to the past
    buffer: updated in place); no attention_mask and no encoder_attention_mask input: row b
    attends to its first encoder_seqlens_k[b] + 1 source positions, whatever the rest holds, and
    its cross_attentions beyond them are unspecified (not computed).

weights.data, weights.{variant}.data (export/weights.py; `weights_file`): the ONNX external data of
the base graphs (encoder, decoder), or of one variant's, each tensor stored once;
ONNX Runtime reads it relative to the model file it opens by path.
"""

from __future__ import annotations

BUNDLE_FORMAT_VERSION = 1
ENCODER_FILE, DECODER_FILE, TOKENIZER_FILE, BUNDLE_FILE = (
    "encoder.onnx", "decoder.onnx", "tokenizer.json", "bundle.json",
)

INPUT_IDS, ATTENTION_MASK, POSITION_IDS = "input_ids", "attention_mask", "position_ids"
SEQLENS_K, TOTAL_SEQUENCE_LENGTH = "seqlens_k", "total_sequence_length"  # in-place cache only
KV_CACHES = ("concat", "inplace")
ENCODER_ATTENTION_MASK = "encoder_attention_mask"
ENCODER_SEQLENS_K, ENCODER_TOTAL_LENGTH = "encoder_seqlens_k", "encoder_total_sequence_length"  # in-place
LOGPROBS, CROSS_ATTENTIONS = "logprobs", "cross_attentions"
LOG_NORMALIZER = "log_normalizer"  # logsumexp of the logits: logits = logprobs + log_normalizer[..., None]


def weights_file(variant: str | None = None) -> str:
    """The shared external-data file of a variant's graphs: weights.data (None: the base files),
    weights.fp16.data for "fp16"."""
    return "weights.data" if variant is None else f"weights.{variant}.data"


def past_name(layer: int, kind: str, kv: str) -> str:
    """Cache input name, kind in {decoder, encoder}, kv in {key, value}."""
    return f"past_key_values.{layer}.{kind}.{kv}"


def present_name(layer: int, kind: str, kv: str) -> str:
    """Cache output name, kind in {decoder, encoder}, kv in {key, value}."""
    return f"present.{layer}.{kind}.{kv}"


def self_cache_io(n_layers: int) -> dict[str, str]:
    """Self-attention cache input -> its output (an in-place cache binds both to one buffer)."""
    return {past_name(i, "decoder", kv): present_name(i, "decoder", kv)
            for i in range(n_layers) for kv in ("key", "value")}


def encoder_inputs() -> list[str]:
    """Encoder graph inputs, in order."""
    return [INPUT_IDS, ATTENTION_MASK]


def encoder_outputs(n_layers: int) -> list[str]:
    """Encoder graph outputs: cross-attention K/V of every decoder layer."""
    return [present_name(i, "encoder", kv) for i in range(n_layers) for kv in ("key", "value")]


def decoder_inputs(n_layers: int, kv_cache: str = "concat") -> list[str]:
    """Decoder graph inputs, in order; an in-place cache takes per-row lengths instead of a mask."""
    if kv_cache not in KV_CACHES:
        raise ValueError(f"unknown kv_cache {kv_cache!r}; known: {KV_CACHES}")
    if kv_cache == "concat":
        masks = [ATTENTION_MASK, ENCODER_ATTENTION_MASK]
    else:
        masks = [SEQLENS_K, TOTAL_SEQUENCE_LENGTH, ENCODER_SEQLENS_K, ENCODER_TOTAL_LENGTH]
    names = [INPUT_IDS, POSITION_IDS, *masks]
    for i in range(n_layers):
        names += [past_name(i, "decoder", "key"), past_name(i, "decoder", "value")]
    for i in range(n_layers):
        names += [past_name(i, "encoder", "key"), past_name(i, "encoder", "value")]
    return names


def decoder_outputs(n_layers: int, normalizer: bool = True) -> list[str]:
    """Decoder graph outputs, in order; without `normalizer`, those of a decoder exported before
    `log_normalizer` (the same list without its last entry)."""
    names = [LOGPROBS]
    for i in range(n_layers):
        names += [present_name(i, "decoder", "key"), present_name(i, "decoder", "value")]
    return names + [CROSS_ATTENTIONS] + ([LOG_NORMALIZER] if normalizer else [])


def dynamic_axes(n_layers: int, kv_cache: str = "concat") -> dict[str, dict[str, dict[int, str]]]:
    """Symbolic axis names of every input and output of both graphs."""
    inplace = kv_cache == "inplace"
    kv_dec = {0: "batch", 2: "max_cache" if inplace else "past_len"}
    kv_enc = {0: "batch", 2: "src_len"}
    enc = {INPUT_IDS: {0: "batch", 1: "src_len"}, ATTENTION_MASK: {0: "batch", 1: "src_len"}}
    enc |= {n: kv_enc for n in encoder_outputs(n_layers)}
    dec = {
        INPUT_IDS: {0: "batch", 1: "new_len"},
        POSITION_IDS: {0: "batch", 1: "new_len"},
        ATTENTION_MASK: {0: "batch", 1: "total_len"},
        ENCODER_ATTENTION_MASK: {0: "batch", 1: "src_len"},
        LOGPROBS: {0: "batch", 1: "new_len"},
        LOG_NORMALIZER: {0: "batch", 1: "new_len"},
        CROSS_ATTENTIONS: {0: "batch", 1: "new_len", 2: "src_len"},
    }
    for i in range(n_layers):
        for kv in ("key", "value"):
            dec[past_name(i, "decoder", kv)] = kv_dec
            dec[past_name(i, "encoder", kv)] = kv_enc
            dec[present_name(i, "decoder", kv)] = kv_dec if inplace else {0: "batch", 2: "total_len"}
    if inplace:
        del dec[ATTENTION_MASK], dec[ENCODER_ATTENTION_MASK]
        dec[SEQLENS_K] = dec[ENCODER_SEQLENS_K] = {0: "batch"}
    return {"encoder": enc, "decoder": dec}

MODEL_NAME = "translator"  # the model a bundle serves as when nothing else names it (bundle.json "name")
