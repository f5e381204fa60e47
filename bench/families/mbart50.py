"""The mBART-50 entry: a random-weight `MBartForConditionalGeneration` of mbart-large-50's shape with a
made-up sentencepiece.bpe.model and an `MBart50Tokenizer` over it (en_XX -> de_DE), and the checkpoint's
generation settings.

One SentencePiece unigram model is trained on both made-up languages (bench/families/text.py) to
`Shape.spm_vocab` pieces, then padded in the model file itself with made-up target words of a score below
every learned piece's (appended as ModelProto `pieces` entries in the protobuf wire format: sentencepiece
loads them, never picks them for text), until the tokenizer (fairseq's four specials, the pieces, the 52
language codes, `<mask>`) has the model's vocabulary: 250,000 pieces for mbart-large-50's 250,054.
"""

from __future__ import annotations

from pathlib import Path

import torch

from bench.families.text import Shape, bart_sizes, corpus, pad_to, train_spm
from export.hf.spm_model import pieces_and_scores, precompiled_charsmap

SPM = "sentencepiece.bpe.model"
LANGUAGES = ("en_XX", "de_DE")  # source, target
FULL = Shape(d_model=1024, layers=12, heads=16, d_ff=4096, vocab_size=250054, max_positions=1024)
QUICK = Shape(d_model=64, layers=2, heads=4, d_ff=256, vocab_size=1000, spm_vocab=300, lexicon=800,
              corpus=3000, max_positions=1024)
GENERATION = {  # mbart-large-50's (config.json)
    "bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2,
    "forced_eos_token_id": 2, "num_beams": 5, "max_length": 200, "early_stopping": True}
# keys of mbart-large-50's config.json that transformers no longer reads and CTranslate2's loader does
LEGACY = {"normalize_before": True, "normalize_embedding": True, "add_final_layer_norm": True}
def build_tokenizer(root: Path, shape: Shape, seed: int):
    """sentencepiece.bpe.model in root, padded to the model's vocabulary; the MBart50Tokenizer over it."""
    from transformers import MBart50Tokenizer

    spm = root / SPM
    texts = corpus("source", shape, seed) + corpus("target", shape, seed)
    pieces = train_spm(spm, texts, shape.spm_vocab, seed)
    specials = len(MBart50Tokenizer(vocab=pieces_and_scores(spm), src_lang=LANGUAGES[0])) - len(pieces)
    pad_to(spm, pieces, shape, seed, shape.vocab_size - specials)
    tok = MBart50Tokenizer(vocab=pieces_and_scores(spm), _spm_precompiled_charsmap=precompiled_charsmap(spm),
                           src_lang=LANGUAGES[0], tgt_lang=LANGUAGES[1],
                           bos_token="<s>")  # as mbart-large-50 states it (CTranslate2 reads it)
    if len(tok) != shape.vocab_size:
        raise RuntimeError(f"the mBART-50 tokenizer has {len(tok)} entries, not {shape.vocab_size}")
    return tok


def build(root: Path, shape: Shape, seed: int) -> int:
    """The random mBART-50 and its tokenizer saved in root; returns the parameter count."""
    from transformers import GenerationConfig, MBartConfig, MBartForConditionalGeneration

    tok = build_tokenizer(root, shape, seed)
    config = MBartConfig(
        **bart_sizes(shape),
        activation_function="gelu", scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2, forced_eos_token_id=2, tokenizer_class="MBart50Tokenizer", dropout=0.1,
        attention_dropout=0.0, activation_dropout=0.0, **LEGACY)
    torch.manual_seed(seed)
    model = MBartForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(**GENERATION)
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return sum(p.numel() for p in model.parameters())
