"""Subword tokenizer (HF `tokenizers`): byte-level BPE with digits split one by one."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0, 1, 2, 3 = pad, bos, eos, unk


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Learn a byte-level BPE on `texts`; any text round-trips exactly through encode/decode."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load a saved tokenizer.json, with a clear error if it is missing."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    return Tokenizer.from_file(str(path))
