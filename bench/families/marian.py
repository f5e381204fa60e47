"""The Marian entry: a random-weight `MarianMTModel` of opus-mt-en-de's shape with made-up SentencePiece
tokenizers (the directory `python -m export.pretrained` and CTranslate2's `TransformersConverter` read:
config.json, generation_config.json, model.safetensors, source.spm, target.spm, vocab.json).

One SentencePiece unigram model trained on each made-up language (bench/families/text.py), a joint
vocab.json as OPUS-MT has one: `</s>` 0, `<unk>` 1, the pieces of both models, then made-up words of the
target language up to the model's vocabulary, `<pad>` last (the decoder's start). The model has its own
initialisation (normal, std 0.02), the pad row of the shared embedding zero (as OPUS-MT's converted
checkpoints have it, and CTranslate2's Marian decoder starts from a zero embedding) and an output bias
drawn from N(0, 0.1).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bench.families.text import Shape, corpus, filler, numbered, train_spm

SPECIALS = ("<unk>", "<s>", "</s>")
FULL = Shape()  # opus-mt-en-de: d_model 512, 6 + 6 layers, 8 heads, d_ff 2048, vocabulary 58,101
QUICK = Shape(d_model=64, layers=2, heads=4, d_ff=256, vocab_size=1000, spm_vocab=300, lexicon=800,
              corpus=3000)


def joint_vocab(pieces: list[str], words: list[str], size: int) -> dict[str, int]:
    """OPUS-MT's vocab.json: </s> 0, <unk> 1, the pieces, filler words up to size - 1, <pad> last."""
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in [*pieces, *words]:
        if len(vocab) == size - 1:
            break
        if piece not in SPECIALS and piece != "<pad>":
            vocab.setdefault(piece, len(vocab))
    for k in range(size):  # more filler if the words ran out
        if len(vocab) == size - 1:
            break
        vocab.setdefault(numbered("\u2581", k), len(vocab))
    vocab["<pad>"] = size - 1
    return vocab


def build_tokenizer(root: Path, shape: Shape, seed: int) -> dict[str, int]:
    """source.spm, target.spm and vocab.json in root; returns the vocabulary."""
    pieces = []
    for side, name in (("source", "source.spm"), ("target", "target.spm")):
        pieces += train_spm(root / name, corpus(side, shape, seed), shape.spm_vocab, seed)
    vocab = joint_vocab(pieces, filler(shape, seed), shape.vocab_size)
    (root / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return vocab


def build(root: Path, shape: Shape, seed: int) -> int:
    """The random MarianMTModel and its tokenizer saved in root; returns the parameter count."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

    vocab = build_tokenizer(root, shape, seed)
    tok = MarianTokenizer(str(root / "source.spm"), str(root / "target.spm"), str(root / "vocab.json"))
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=shape.vocab_size, d_model=shape.d_model, encoder_layers=shape.layers,
        decoder_layers=shape.layers, encoder_attention_heads=shape.heads, decoder_attention_heads=shape.heads,
        encoder_ffn_dim=shape.d_ff, decoder_ffn_dim=shape.d_ff, max_position_embeddings=shape.max_positions,
        activation_function="swish", scale_embedding=True, static_position_embeddings=True,
        share_encoder_decoder_embeddings=True, pad_token_id=pad, eos_token_id=0, bos_token_id=0,
        decoder_start_token_id=pad, forced_eos_token_id=0, dropout=0.1)
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.get_input_embeddings().weight[pad].zero_()
        bias = torch.randn(model.final_logits_bias.shape, generator=torch.Generator().manual_seed(seed))
        model.final_logits_bias.copy_(0.1 * bias)
        model.final_logits_bias[..., pad] = 0.0
    model.generation_config = GenerationConfig(  # opus-mt-en-de's
        decoder_start_token_id=pad, eos_token_id=0, pad_token_id=pad, forced_eos_token_id=0, num_beams=4,
        max_length=512, bad_words_ids=[[pad]])
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return sum(p.numel() for p in model.parameters())


class Codec:
    """CTranslate2's side of a Marian directory's text: source.spm's pieces + </s> in, target.spm out."""

    def __init__(self, hf_dir: Path) -> None:
        import sentencepiece

        self.source = sentencepiece.SentencePieceProcessor(model_file=str(hf_dir / "source.spm"))
        self.target = sentencepiece.SentencePieceProcessor(model_file=str(hf_dir / "target.spm"))

    def encode(self, text: str) -> list[str]:
        """The source tokens CTranslate2 translates."""
        return [*self.source.encode(text, out_type=str), "</s>"]

    def decode(self, tokens: list[str]) -> str:
        """The text of generated tokens."""
        return self.target.decode_pieces(tokens)
