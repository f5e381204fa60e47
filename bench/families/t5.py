"""The T5 entry: a random-weight `T5ForConditionalGeneration` of t5-base's shape (T5 v1.0: relu
feed-forward, the head tied to the shared table and the decoder's output scaled by d_model ** -0.5, 32
relative-position buckets up to distance 128, no learned positions) with a made-up spiece.model and a
`T5Tokenizer` over it, t5-base's config.json (its task_specific_params) and generation_config.json.

T5 reads its task from the text: every benchmark text starts with t5-base's translation prefix (`PREFIX`,
"translate English to German: "), the made-up source language playing English and the target language
German, as the Marian entry translates them. The prefix is written into the texts themselves (a request may
write it so instead of naming its `task`: docs/api.md), as CTranslate2 has no tasks, so our engine, our
server and CTranslate2 read the same source.

One SentencePiece unigram model (pad 0, eos 1, unk 2, no bos: T5's ids) is trained on the prefixed source
sentences and the target sentences (bench/families/text.py) to `Shape.spm_vocab` pieces, then padded in the
model file with made-up target words (bench/families/text.py `pad_spm`) until, with T5's 100 sentinels
(`<extra_id_99>` .. `<extra_id_0>`), the tokenizer has the model's vocabulary less t5-base's 28 unused rows:
32,000 pieces + 100 = 32,100 entries for 32,128 embedding rows. The tokenizer is built from the pieces
and scores and saved as tokenizer.json (transformers cannot read a bare spiece.model here); spiece.model
is kept beside it, as on the hub.

The model keeps its own initialisation (T5's: the shared table N(0, 1), the projections scaled by their
fan-in), but the 28 rows past the tokenizer are zero: no text has them and a trained model never generates
them, while a random row would be generated like any other, and CTranslate2's converter names those rows
`<extra_id_0>` .. `<extra_id_27>` again (T5Loader.get_vocabulary), so its tokens there could not be told
from the sentinels'. Zero rows give a logit of exactly 0, never the largest of a random model's.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bench.families.text import Shape, corpus, pad_to, train_spm
from export.hf.spm_model import pieces_and_scores, precompiled_charsmap

SPM = "spiece.model"
EXTRA_IDS = 100  # T5's sentinels <extra_id_N>, after the pieces in reverse order
UNUSED_ROWS = 28  # t5-base's embedding rows past its tokenizer (32,128 - 32,100)
PREFIX = "translate English to German: "  # the benchmark texts' task prefix
FULL = Shape(d_model=768, layers=12, heads=12, d_ff=3072, vocab_size=32128)  # d_kv = 768 / 12 = 64
QUICK = Shape(d_model=64, layers=2, heads=4, d_ff=256, vocab_size=1000, spm_vocab=300, lexicon=800,
              corpus=3000)
RELATIVE = {"relative_attention_num_buckets": 32, "relative_attention_max_distance": 128}
TASKS = {  # t5-base's config.json task_specific_params
    "summarization": {"early_stopping": True, "length_penalty": 2.0, "max_length": 200, "min_length": 30,
                      "no_repeat_ngram_size": 3, "num_beams": 4, "prefix": "summarize: "},
    **{f"translation_en_to_{code}": {"early_stopping": True, "max_length": 300, "num_beams": 4,
                                     "prefix": f"translate English to {language}: "}
       for code, language in (("de", "German"), ("fr", "French"), ("ro", "Romanian"))},
}
GENERATION = {"decoder_start_token_id": 0, "eos_token_id": 1, "pad_token_id": 0}  # t5-base's: greedy


def build_tokenizer(root: Path, shape: Shape, seed: int):
    """spiece.model in root, padded to the model's vocabulary less the sentinels and the unused rows; the
    T5Tokenizer over it."""
    from transformers import T5Tokenizer

    spm = root / SPM
    texts = [PREFIX + s for s in corpus("source", shape, seed)] + corpus("target", shape, seed)
    pieces = train_spm(spm, texts, shape.spm_vocab, seed, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    pad_to(spm, pieces, shape, seed, shape.vocab_size - UNUSED_ROWS - EXTRA_IDS)
    sentinels = [(f"<extra_id_{i}>", 0.0) for i in range(EXTRA_IDS - 1, -1, -1)]
    tok = T5Tokenizer(vocab=pieces_and_scores(spm) + sentinels, extra_ids=EXTRA_IDS,
                      _spm_precompiled_charsmap=precompiled_charsmap(spm))
    if len(tok) != shape.vocab_size - UNUSED_ROWS:
        raise RuntimeError(f"the T5 tokenizer has {len(tok)} entries, not {shape.vocab_size - UNUSED_ROWS}")
    return tok


def build(root: Path, shape: Shape, seed: int) -> int:
    """The random T5 and its tokenizer saved in root; returns the parameter count."""
    from transformers import GenerationConfig, T5Config, T5ForConditionalGeneration

    tok = build_tokenizer(root, shape, seed)
    config = T5Config(
        vocab_size=shape.vocab_size, d_model=shape.d_model, d_kv=shape.d_model // shape.heads,
        d_ff=shape.d_ff, num_layers=shape.layers, num_decoder_layers=shape.layers, num_heads=shape.heads,
        **RELATIVE,
        feed_forward_proj="relu", dropout_rate=0.1, layer_norm_epsilon=1e-6, initializer_factor=1.0,
        n_positions=shape.max_positions, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
        task_specific_params=TASKS)
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.shared.weight[len(tok):].zero_()
    model.generation_config = GenerationConfig(**GENERATION)
    model.save_pretrained(root)
    tok.save_pretrained(root)
    hub = json.loads((root / "config.json").read_text(encoding="utf-8"))
    for key in ("scale_decoder_outputs", "tie_word_embeddings"):  # what transformers 5 writes; t5-base's
        hub.pop(key, None)  # config.json states neither (tied and scaled by default)
    (root / "config.json").write_text(json.dumps(hub, indent=2), encoding="utf-8")
    return sum(p.numel() for p in model.parameters())
