"""The Pegasus entry: a random-weight `PegasusForConditionalGeneration` of pegasus-large's shape (that of
every fine-tuned Pegasus, pegasus-xsum's included: d_model 1024, 16 + 16 layers, 16 heads, d_ff 4096, relu,
pre-LN with a final LayerNorm per stack, sinusoidal positions, embeddings scaled by sqrt(d_model),
vocabulary 96,103) with a made-up spiece.model and a `PegasusTokenizer` over it, and pegasus-large's
generation settings (8 beams, length penalty 0.8, at most 256 tokens, eos forced at the limit).

A SentencePiece unigram model (Pegasus's ids: pad 0, eos 1, unk 2, no bos) is trained on the made-up
source language (bench/families/text.py; Pegasus summarizes, so source and output are one language) to
`Shape.spm_vocab` pieces, then padded in the model file with made-up target words (bench/families/text.py
`pad_spm`) to the model's vocabulary less Pegasus's 103 reserved ids: 96,000 pieces for 96,103. The
tokenizer is laid out as the hub's tokenizer.json (`<pad>`, `</s>`, `<mask_1>`, `<mask_2>`, `<unk_2>` ..
`<unk_102>`, then the pieces from id 2 at id + 103) and saved as tokenizer.json; spiece.model is kept
beside it. The model keeps its own initialisation (normal, std 0.02) and a zero final_logits_bias.
"""

from __future__ import annotations

from pathlib import Path

import torch

from bench.families.text import Shape, bart_sizes, corpus, pad_to, train_spm
from export.hf.spm_model import pieces_and_scores, precompiled_charsmap
from export.hf.tokenizer import PEGASUS_OFFSET

SPM = "spiece.model"
FULL = Shape(d_model=1024, layers=16, heads=16, d_ff=4096, vocab_size=96103, max_positions=1024)
QUICK = Shape(d_model=64, layers=2, heads=4, d_ff=256, vocab_size=1000, spm_vocab=300, lexicon=800,
              corpus=3000, max_positions=1024)
GENERATION = {  # pegasus-large's (config.json)
    "bos_token_id": 0, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0,
    "forced_eos_token_id": 1, "num_beams": 8, "length_penalty": 0.8, "max_length": 256}
# keys of pegasus-large's config.json that transformers no longer reads and CTranslate2's loader (BART's)
# does: without normalize_before its converter stops, without normalize_embedding it expects an embedding
# LayerNorm that Pegasus has not
LEGACY = {"normalize_before": True, "normalize_embedding": False, "add_final_layer_norm": True,
          "static_position_embeddings": True}


def reserved() -> list[tuple[str, float]]:
    """Pegasus's entries before the pieces: pad, eos, two masks, <unk_2> .. <unk_102>."""
    return [("<pad>", 0.0), ("</s>", 0.0), ("<mask_1>", 0.0), ("<mask_2>", 0.0)] + \
        [(f"<unk_{i}>", -100.0) for i in range(2, PEGASUS_OFFSET)]


def build_tokenizer(root: Path, shape: Shape, seed: int):
    """spiece.model in root, padded to the model's vocabulary less the reserved ids; the PegasusTokenizer
    over it."""
    from transformers import PegasusTokenizer

    spm = root / SPM
    pieces = train_spm(spm, corpus("source", shape, seed), shape.spm_vocab, seed, pad_id=0, eos_id=1,
                       unk_id=2, bos_id=-1)
    pad_to(spm, pieces, shape, seed, shape.vocab_size - PEGASUS_OFFSET)
    tok = PegasusTokenizer(vocab=reserved() + pieces_and_scores(spm)[2:],
                           _spm_precompiled_charsmap=precompiled_charsmap(spm))
    if len(tok) != shape.vocab_size:
        raise RuntimeError(f"the Pegasus tokenizer has {len(tok)} entries, not {shape.vocab_size}")
    return tok


def build(root: Path, shape: Shape, seed: int) -> int:
    """The random Pegasus and its tokenizer saved in root; returns the parameter count."""
    from transformers import GenerationConfig, PegasusConfig, PegasusForConditionalGeneration

    tok = build_tokenizer(root, shape, seed)
    config = PegasusConfig(
        **bart_sizes(shape),
        activation_function="relu", scale_embedding=True, pad_token_id=0, bos_token_id=0, eos_token_id=1,
        decoder_start_token_id=0, forced_eos_token_id=1, dropout=0.1, attention_dropout=0.1,
        activation_dropout=0.1, **LEGACY)
    torch.manual_seed(seed)
    model = PegasusForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(**GENERATION)
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return sum(p.numel() for p in model.parameters())
