"""The BART entry: a random-weight `BartForConditionalGeneration` of bart-large-cnn's shape with a made-up
byte-level BPE (vocab.json + merges.txt as BART's hub checkpoints hold it, and the tokenizer.json
transformers writes beside them), and bart-large-cnn's generation config.

The BPE is trained on the made-up source language (bench/families/text.py) to `Shape.spm_vocab` entries
after BART's four specials (`<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3), then vocab.json is padded with
made-up target words (`Ġ` + word: byte-level BPE's word start) up to the model's vocabulary, `<mask>`
last. The model keeps its own initialisation (normal, std 0.02) and a zero final_logits_bias, as
bart-large-cnn's.

bart-large-cnn's tokenizer has 50,265 entries (`<mask>` is 50,264) for 50,264 embedding rows; the import
refuses a tokenizer id beyond the model's vocabulary, so here `<mask>` is the last row (50,263).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bench.families.text import Shape, bart_sizes, corpus, filler, numbered

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # BART's ids 0-3
MASK = "<mask>"
WORD_START = "\u0120"  # "Ġ": a space in byte-level BPE's alphabet
FULL = Shape(d_model=1024, layers=12, heads=16, d_ff=4096, vocab_size=50264, max_positions=1024)
QUICK = Shape(d_model=64, layers=2, heads=4, d_ff=256, vocab_size=1000, spm_vocab=300, lexicon=800,
              corpus=3000, max_positions=1024)
GENERATION = {  # bart-large-cnn's generation_config.json
    "bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2,
    "forced_bos_token_id": 0, "forced_eos_token_id": 2, "num_beams": 4, "length_penalty": 2.0,
    "max_length": 142, "min_length": 56, "no_repeat_ngram_size": 3, "early_stopping": True}
# keys of bart-large-cnn's config.json that transformers no longer reads and CTranslate2's BartLoader does
LEGACY = {"normalize_before": False, "normalize_embedding": True, "add_final_layer_norm": False}


def build_tokenizer(root: Path, shape: Shape, seed: int) -> int:
    """vocab.json and merges.txt in root, vocab.json padded to the model's vocabulary but `<mask>` (the
    tokenizer adds it last); returns the BPE's own entries."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus("source", shape, seed), vocab_size=shape.spm_vocab, min_frequency=2,
                            show_progress=False, special_tokens=list(SPECIALS))
    bpe.save_model(str(root))
    vocab: dict[str, int] = json.loads((root / "vocab.json").read_text(encoding="utf-8"))
    learned = len(vocab)
    words = filler(shape, seed, WORD_START) + [numbered(WORD_START, k) for k in range(shape.vocab_size)]
    for word in words:
        if len(vocab) >= shape.vocab_size - 1:
            break
        vocab.setdefault(word, len(vocab))
    (root / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return learned


def build(root: Path, shape: Shape, seed: int) -> int:
    """The random BART and its tokenizer saved in root; returns the parameter count."""
    from transformers import BartConfig, BartForConditionalGeneration, BartTokenizer, GenerationConfig

    build_tokenizer(root, shape, seed)
    tok = BartTokenizer(vocab=str(root / "vocab.json"), merges=str(root / "merges.txt"), mask_token=MASK)
    if len(tok) != shape.vocab_size or tok.convert_tokens_to_ids(MASK) != shape.vocab_size - 1:
        raise RuntimeError(f"the BART tokenizer has {len(tok)} entries, not {shape.vocab_size}, <mask> last")
    config = BartConfig(
        **bart_sizes(shape),
        activation_function="gelu", scale_embedding=False, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2, forced_bos_token_id=0, forced_eos_token_id=2, dropout=0.1,
        attention_dropout=0.0, activation_dropout=0.0, **LEGACY)
    torch.manual_seed(seed)
    model = BartForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(**GENERATION)
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return sum(p.numel() for p in model.parameters())
