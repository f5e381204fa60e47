"""Tiny Hugging Face checkpoints built offline, as `python -m export.pretrained` finds them on disk.

Marian (MarianMTModel + MarianTokenizer: source.spm, target.spm, vocab.json), M2M100 / NLLB
(M2M100ForConditionalGeneration + M2M100Tokenizer or NllbTokenizer over one
sentencepiece.bpe.model), mBART-50, BART and T5 / Flan-T5 / mT5 (T5Tokenizer over spiece.model) models
of a few thousand parameters: SentencePiece models trained here on a
few hundred generated sentences, the transformers tokenizer built from those files, the model from
its config class with random weights, then a few dozen Adam steps on a word-for-word "translation"
of the generated sentences, so that decoding follows the source and stops at eos (a random
model repeats one token forever). Everything is saved with save_pretrained.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sentencepiece
import torch

from export.hf.spm_model import pieces_and_scores, precompiled_charsmap
from export.hf.tokenizer import PEGASUS_OFFSET
from export.verify.int8 import Int8Limits

WORDS = {  # source word -> its "translation"
    "the": "die", "cat": "katze", "saw": "sah", "anna": "anna", "big": "gross", "red": "rote",
    "apples": "aepfel", "on": "am", "day": "tag", "we": "wir", "house": "haus", "tree": "baum",
    "runs": "rennt", "quickly": "schnell",
    "blue": "blau", "small": "klein", "dog": "hund", "eats": "isst", "under": "unter", "river": "fluss",
    "happy": "froh", "old": "alt", "night": "nacht", "water": "wasser", "bread": "brot", "window": "fenster",
    "door": "tuer", "garden": "garten", "friend": "freund", "mother": "mutter", "reads": "liest",
}
NLLB_CODES = ("eng_Latn", "deu_Latn", "fra_Latn")


@dataclass(frozen=True)
class Shape:
    """A tiny model's dimensions and switches."""

    d_model: int = 16
    layers: tuple[int, int] = (1, 1)  # encoder, decoder
    heads: int = 2
    d_ff: int = 32
    activation: str = "swish"
    shared: bool = True  # Marian: one embedding matrix for source, target and output
    scale_embedding: bool = True
    head_dim: int | None = None  # T5's d_kv (None: d_model / heads)


def parallel(n: int, seed: int) -> list[tuple[str, str]]:
    """Source sentences and their word-for-word translations."""
    rng = random.Random(seed)
    words = sorted(WORDS)
    pairs = []
    for _ in range(n):
        sentence = [rng.choice(words) for _ in range(rng.randint(2, 7))]
        pairs.append((" ".join(sentence), " ".join(WORDS[w] for w in sentence)))
    return pairs


def dimensions(shape: Shape) -> dict[str, Any]:
    """The config arguments of a shape that Marian and M2M100 name alike."""
    return dict(d_model=shape.d_model, encoder_layers=shape.layers[0], decoder_layers=shape.layers[1],
                encoder_attention_heads=shape.heads, decoder_attention_heads=shape.heads,
                encoder_ffn_dim=shape.d_ff, decoder_ffn_dim=shape.d_ff, max_position_embeddings=64,
                activation_function=shape.activation, scale_embedding=shape.scale_embedding, dropout=0.0)


def train_spm(path: Path, texts: list[str], vocab_size: int, model_type: str = "unigram", **ids: int) -> Path:
    """A SentencePiece model of `texts` (unk 0, then bos / eos as the family's converters leave them; or the
    special ids given: unk_id, bos_id, eos_id, pad_id, -1 for none)."""
    prefix = path.with_name(path.name + ".train")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_prefix=str(prefix), vocab_size=vocab_size,
        model_type=model_type, character_coverage=1.0, hard_vocab_limit=False, minloglevel=2, **ids)
    prefix.with_name(prefix.name + ".model").replace(path)
    prefix.with_name(prefix.name + ".vocab").unlink()
    return path


def spm_pieces(path: Path) -> list[str]:
    """The pieces of a SentencePiece model, in id order."""
    sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def fit(model: Any, tok: Any, pairs: list[tuple[str, str]], steps: int, seed: int, lr: float = 1e-2,
        weight_decay: float = 0.0) -> None:
    """A few Adam steps (AdamW with a decoupled `weight_decay`) of teacher-forced cross-entropy on the pairs
    (eval mode after)."""
    torch.manual_seed(seed)
    params = model.parameters()
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay) if weight_decay else \
        torch.optim.Adam(params, lr=lr)
    model.train()
    rng = random.Random(seed)
    for _ in range(steps):
        batch = rng.sample(pairs, 16)
        enc = tok([s for s, _ in batch], text_target=[t for _, t in batch], padding=True, return_tensors="pt")
        enc["labels"][enc["labels"] == tok.pad_token_id] = -100
        loss = model(**enc).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def opus_mt_generation(pad: int, eos: int, max_length: int = 64) -> dict[str, Any]:
    """The generation settings of OPUS-MT checkpoints (Helsinki-NLP's generation_config.json): pad never
    generated, eos forced at max_length, renormalized log-probs, 4 beams."""
    return {"bad_words_ids": [[pad]], "forced_eos_token_id": eos, "renormalize_logits": True, "num_beams": 4,
            "max_length": max_length}


def marian_dir(root: Path, shape: Shape, seed: int = 0, steps: int = 120, pad_bias: float | None = None,
               opus_rules: bool = False) -> Path:
    """A tiny MarianMTModel directory: source.spm / target.spm, a joint vocab.json, config, weights;
    with `pad_bias` as pad's output bias (final_logits_bias), and OPUS-MT's generation settings in
    generation_config.json with `opus_rules`."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    root.mkdir(parents=True, exist_ok=True)
    pairs = parallel(300, seed)
    train_spm(root / "source.spm", [s for s, _ in pairs], 50)
    train_spm(root / "target.spm", [t for _, t in pairs], 50)
    pieces = [p for p in spm_pieces(root / "source.spm") + spm_pieces(root / "target.spm")
              if p not in ("<unk>", "<s>", "</s>")]
    vocab = {"</s>": 0, "<unk>": 1} | {p: i + 2 for i, p in enumerate(dict.fromkeys(pieces))}
    vocab["<pad>"] = len(vocab)  # OPUS-MT: pad is the last id, and the decoder's start
    (root / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tok = MarianTokenizer(str(root / "source.spm"), str(root / "target.spm"), str(root / "vocab.json"))
    torch.manual_seed(seed)
    config = MarianConfig(
        vocab_size=len(vocab), **dimensions(shape), share_encoder_decoder_embeddings=shape.shared,
        pad_token_id=vocab["<pad>"], eos_token_id=0, decoder_start_token_id=vocab["<pad>"],
        forced_eos_token_id=None)
    model = MarianMTModel(config)
    fit(model, tok, pairs, steps, seed)
    with torch.no_grad():  # a bias the mapping must carry (MarianMTModel starts it at zero)
        model.final_logits_bias.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(seed))
        if pad_bias is not None:  # pad's logit, which only bad_words_ids keeps from winning
            model.final_logits_bias[0, vocab["<pad>"]] = pad_bias
    if opus_rules:
        model.generation_config.update(**opus_mt_generation(vocab["<pad>"], vocab["</s>"]))
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return root


def m2m100_dir(root: Path, shape: Shape, seed: int = 0, nllb: bool = False, steps: int = 120) -> Path:
    """A tiny M2M100ForConditionalGeneration directory with an M2M100 (or NLLB) tokenizer."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer, NllbTokenizer
    from transformers.tokenization_utils_base import generate_merges

    root.mkdir(parents=True, exist_ok=True)
    pairs = parallel(300, seed)
    spm = train_spm(root / "sentencepiece.bpe.model", [x for p in pairs for x in p], 90, "bpe")
    pieces = spm_pieces(spm)
    fairseq = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}  # then each piece at its id + 1
    vocab = fairseq | {p: i + 1 for i, p in enumerate(pieces) if p not in fairseq}
    if nllb:
        tok = NllbTokenizer(vocab=vocab, merges=generate_merges({p: i for i, p in enumerate(pieces)}),
                            extra_special_tokens=list(NLLB_CODES), src_lang="eng_Latn", tgt_lang="deu_Latn",
                            _spm_precompiled_charsmap=precompiled_charsmap(spm))  # as the hub tokenizer.json
    else:
        (root / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
        tok = M2M100Tokenizer(str(root / "vocab.json"), str(spm), language_codes="wmt21", src_lang="en",
                              tgt_lang="de", additional_special_tokens=[f"__{c}__" for c in M2M_CODES])
    torch.manual_seed(seed)
    config = M2M100Config(
        vocab_size=len(tok), **dimensions(shape), pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2, encoder_layerdrop=0.0, decoder_layerdrop=0.0, attention_dropout=0.0)
    model = M2M100ForConditionalGeneration(config)
    fit(model, tok, pairs, steps, seed)
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return root


M2M_CODES = ("en", "ha", "is", "ja", "cs", "ru", "zh", "de")  # transformers' M2M100 "wmt21" codes


# Pre-LN stacks (mBART, Pegasus) are trained with decoupled weight decay: without it, 200 Adam steps at lr
# 1e-2 gave the tiny mBART an attention sublayer of gain ~14 (value and output projections of spectral norms
# 3.3 and 4.1; nothing in a pre-LN stack with a final LayerNorm bounds the residual's scale), so that its
# residual (std ~15, values to 40) nearly cancels at a rare position (std 2.7): fp16 rounds each term
# relative to its own size, and the final LayerNorm divides by that position's std, so its K/V missed the
# fp16 tolerance (0.0645 > 0.05) with no fault in the graph. With decay 1.0 the same model's worst fp16
# K/V difference is 0.0004-0.0009 (seeds 3, 5).
PRE_LN_DECAY = 1.0


def mbart50_dir(root: Path, shape: Shape, seed: int = 0, steps: int = 120) -> Path:
    """A tiny MBartForConditionalGeneration directory with an MBart50Tokenizer over a unigram
    sentencepiece.bpe.model trained here (fairseq ids, then the 52 mBART-50 language codes, then <mask>)."""
    from transformers import MBart50Tokenizer, MBartConfig, MBartForConditionalGeneration

    root.mkdir(parents=True, exist_ok=True)
    pairs = parallel(300, seed)
    spm = train_spm(root / "sentencepiece.bpe.model", [x for p in pairs for x in p], 90)
    tok = MBart50Tokenizer(vocab=pieces_and_scores(spm), _spm_precompiled_charsmap=precompiled_charsmap(spm),
                           src_lang="en_XX",
                           tgt_lang="de_DE")
    torch.manual_seed(seed)
    config = MBartConfig(vocab_size=len(tok), **dimensions(shape), pad_token_id=1, bos_token_id=0,
                         eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None,
                         attention_dropout=0.0, activation_dropout=0.0)
    model = MBartForConditionalGeneration(config)
    fit(model, tok, pairs, steps, seed, weight_decay=PRE_LN_DECAY)
    with torch.no_grad():  # a bias the mapping must carry (zeros at first)
        model.final_logits_bias.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(seed))
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return root


def bart_dir(root: Path, shape: Shape, seed: int = 0, steps: int = 120, tokenizer_json: bool = False) -> Path:
    """A tiny BartForConditionalGeneration directory with a byte-level BPE trained here (vocab.json +
    merges.txt as BART's hub checkpoints have them, or only tokenizer.json with `tokenizer_json`)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import BartConfig, BartForConditionalGeneration, BartTokenizer

    root.mkdir(parents=True, exist_ok=True)
    pairs = parallel(300, seed)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([x for p in pairs for x in p], vocab_size=400, min_frequency=2,
                            show_progress=False, special_tokens=["<s>", "<pad>", "</s>", "<unk>"])  # BART's
    bpe.save_model(str(root))
    tok = BartTokenizer(vocab=str(root / "vocab.json"), merges=str(root / "merges.txt"))
    torch.manual_seed(seed)
    # as bart-large-cnn: the tokenizer's last id, <mask>, is beyond the model's rows (50,265 ids, 50,264 rows)
    config = BartConfig(vocab_size=len(tok) - 1, **dimensions(shape), pad_token_id=1, bos_token_id=0,
                        eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None,
                        attention_dropout=0.0, activation_dropout=0.0)
    model = BartForConditionalGeneration(config)
    fit(model, tok, pairs, steps, seed)
    with torch.no_grad():  # a bias the mapping must carry (zeros at first)
        model.final_logits_bias.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(seed))
    model.save_pretrained(root)
    tok.save_pretrained(root)
    if tokenizer_json:
        for name in ("vocab.json", "merges.txt"):
            (root / name).unlink(missing_ok=True)
    return root


def pegasus_dir(root: Path, shape: Shape, seed: int = 0, steps: int = 120, max_positions: int = 64,
                generation: dict[str, Any] | None = None) -> Path:
    """A tiny PegasusForConditionalGeneration directory with a PegasusTokenizer over a unigram spiece.model
    trained here with Pegasus's ids (pad 0, eos 1, unk 2), laid out as the hub's tokenizer.json (pad, eos,
    <mask_1>, <mask_2>, <unk_2>..<unk_102>, then the pieces from id 2 at id + 103); `generation` as its
    generation_config.json settings."""
    from transformers import PegasusConfig, PegasusForConditionalGeneration, PegasusTokenizer

    root.mkdir(parents=True, exist_ok=True)
    pairs = parallel(300, seed)
    spm = train_spm(root / "spiece.model", [x for p in pairs for x in p], 90, pad_id=0, eos_id=1, unk_id=2,
                    bos_id=-1)
    reserved = [("<pad>", 0.0), ("</s>", 0.0), ("<mask_1>", 0.0), ("<mask_2>", 0.0)] + \
        [(f"<unk_{i}>", -100.0) for i in range(2, PEGASUS_OFFSET)]
    tok = PegasusTokenizer(vocab=reserved + pieces_and_scores(spm)[2:],
                           _spm_precompiled_charsmap=precompiled_charsmap(spm))
    torch.manual_seed(seed)
    sizes = dimensions(shape) | {"max_position_embeddings": max_positions}
    config = PegasusConfig(vocab_size=len(tok), **sizes,
                           pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=None,
                           attention_dropout=0.0, activation_dropout=0.0)
    model = PegasusForConditionalGeneration(config)
    fit(model, tok, pairs, steps, seed, weight_decay=PRE_LN_DECAY)
    with torch.no_grad():  # a bias the mapping must carry (zeros at first)
        model.final_logits_bias.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(seed))
    if generation:
        model.generation_config.update(**generation)
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return root


def language_id(tok: Any, code: str) -> int:
    """The id of a language's token (M2M100: "de" -> __de__; NLLB: the code itself)."""
    codes = getattr(tok, "lang_code_to_id", None)
    return int(codes[code]) if codes else int(tok.convert_tokens_to_ids(code))


T5_VARIANTS = ("v1", "flan", "mt5")  # T5 v1.0 (relu, tied head, scaled), Flan-T5 / v1.1 (gated-gelu, own
# lm_head), mT5 (MT5ForConditionalGeneration: gated-gelu, own lm_head, no sentinels)
T5_TASKS = {"summarization": {"prefix": "summarize: ", "num_beams": 4},
            "translation_en_to_de": {"prefix": "translate English to German: ", "max_length": 300}}


def t5_tokenizer(spm: Path, extra_ids: int) -> Any:
    """transformers' T5Tokenizer of a SentencePiece model, as it converts one: its pieces and scores, then
    `extra_ids` sentinels <extra_id_N> in reverse order, its charsmap."""
    from transformers import T5Tokenizer

    sentinels = [(f"<extra_id_{i}>", 0.0) for i in range(extra_ids - 1, -1, -1)]
    return T5Tokenizer(vocab=pieces_and_scores(spm) + sentinels, extra_ids=extra_ids,
                       _spm_precompiled_charsmap=precompiled_charsmap(spm))


def t5_dir(root: Path, shape: Shape, variant: str = "v1", seed: int = 0, steps: int = 200, lr: float = 3e-3,
           buckets: int = 16) -> Path:
    """A tiny T5ForConditionalGeneration (or MT5ForConditionalGeneration) directory of a T5_VARIANTS variant,
    with a T5Tokenizer over a unigram spiece.model trained here (pad 0, eos 1, unk 2; T5: 100 sentinels, mT5:
    none), a vocabulary padded past the tokenizer's (as 32128 past 32100), `buckets` relative-position buckets
    up to distance 20 (T5 learns slowly at this size: a lower rate than `fit`'s default keeps it from
    repeating one word), and config.json as the hub's: T5 v1.0 without tie_word_embeddings, Flan-T5 and mT5
    with it false and an lm_head.weight of their own; config.json's task_specific_params as T5's
    (T5_TASKS)."""
    import transformers

    root.mkdir(parents=True, exist_ok=True)
    pairs = parallel(300, seed)
    spm = train_spm(root / "spiece.model", [x for p in pairs for x in p], 90, pad_id=0, eos_id=1, unk_id=2,
                    bos_id=-1)
    tok = t5_tokenizer(spm, 0 if variant == "mt5" else 100)
    names = ("MT5Config", "MT5ForConditionalGeneration") if variant == "mt5" else \
        ("T5Config", "T5ForConditionalGeneration")
    config_class, model_class = (getattr(transformers, n) for n in names)
    torch.manual_seed(seed)
    config = config_class(
        vocab_size=len(tok) + 6, d_model=shape.d_model, d_kv=shape.head_dim or shape.d_model // shape.heads,
        d_ff=shape.d_ff, num_layers=shape.layers[0], num_decoder_layers=shape.layers[1],
        num_heads=shape.heads,
        relative_attention_num_buckets=buckets, relative_attention_max_distance=20, dropout_rate=0.0,
        feed_forward_proj="relu" if variant == "v1" else "gated-gelu", decoder_start_token_id=0,
        task_specific_params=T5_TASKS)
    model = model_class(config)
    if variant != "v1":  # an output projection of its own (transformers ties it to the shared table at first)
        with torch.no_grad():
            model.lm_head.weight = torch.nn.Parameter(model.shared.weight.detach() * shape.d_model**-0.5)
    fit(model, tok, pairs, steps, seed, lr)
    model.save_pretrained(root)
    tok.save_pretrained(root)
    hub = json.loads((root / "config.json").read_text(encoding="utf-8"))
    hub.pop("scale_decoder_outputs", None)  # what transformers 5 writes; hub configs say tie_word_embeddings
    hub.pop("tie_word_embeddings", None)
    if variant != "v1":
        hub["tie_word_embeddings"] = False
    (root / "config.json").write_text(json.dumps(hub, indent=2), encoding="utf-8")
    return root


# the int8 variant, its greedy-agreement gate waived: the export checks it on random ids, where a tiny model's
# greedy picks are near-ties that int8 flips (test_pretrained_variants.py checks it on the texts instead)
INT8 = {"quantize": "int8", "int8_limits": Int8Limits(agreement=0.0)}
# name: (family, shape, bundle options); together: d_model 16 / 32, 1-2 layers, 2 / 4 heads, swish and
# relu, gelu, gated-gelu, shared and separate embeddings, scaled and unscaled embeddings, sinusoid, learned
# and relative positions, each lowering, fp16 on six, int8 on three
HF_MODELS = {
    "marian": ("marian", Shape(), {"fp16": True}),
    "marian-separate": ("marian", Shape(d_model=32, layers=(2, 2), heads=4, d_ff=64, activation="relu",
                                        shared=False, scale_embedding=False), {"attention": "fused"}),
    "m2m100": ("m2m100", Shape(activation="relu"), {"fp16": True}),
    "nllb": ("nllb", Shape(d_model=32, layers=(2, 1), heads=4, d_ff=64, activation="relu"),
             {"attention": "plain"}),
    "bart": ("bart", Shape(d_model=32, layers=(1, 2), heads=4, d_ff=64, activation="gelu",
                           scale_embedding=False), {"fp16": True, **INT8}),
    "mbart": ("mbart", Shape(d_model=32, heads=4, d_ff=64, activation="gelu"), {"fp16": True, **INT8}),
    "pegasus": ("pegasus", Shape(d_model=32, layers=(2, 1), heads=4, d_ff=64, activation="relu"),
                {"fp16": True, **INT8}),
    # T5 v1.0 (relu, tied and scaled head), Flan-T5 (gated-gelu, own head), mT5 (4 heads of d_kv 16:
    # 64 != 32); d_kv 16 as T5's 64, a power of 4: W^Q times sqrt(d_kv) is exact (export/hf/t5.py)
    "t5": ("t5-v1", Shape(d_model=32, heads=2, d_ff=64), {"fp16": True}),
    "flan-t5": ("t5-flan", Shape(d_model=32, layers=(2, 1), heads=2, d_ff=64), {"attention": "fused"}),
    "mt5": ("t5-mt5", Shape(d_model=32, heads=4, d_ff=64, head_dim=16), {"attention": "plain"}),
}
