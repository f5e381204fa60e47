"""How a bundle's text becomes ids and back, how its decoder starts and which rules its steps follow:
bundle.json's `tokenizer`, `generation` and `languages` objects, declared once for the exporter and
the runtime (torch-free).

Bundles of our own models (format_version 1) have none of these keys: one Hugging Face tokenizers
file `tokenizer.json`, the source is its ids + eos, the decoder starts from bos. Bundles imported
from pretrained checkpoints (export/pretrained.py, format_version 2) state them:

    "tokenizer": {"kind": "tokenizers", "file": "tokenizer.json"}
    "tokenizer": {"kind": "sentencepiece", "source_model": "source.spm", "target_model": "target.spm",
                  "vocab": "vocab.json"}
        SentencePiece splits text into pieces (source_model for sources, target_model detokenizes
        outputs; the same file for both is fine); `vocab` maps each piece to the model's id (a JSON
        object, the transformers tokenizer's get_vocab()); a piece it lacks is the unk id.
    "generation": {"decoder_start_id": 58100, "source_suffix": [0], "suppress_ids": [58100],
                   "forced_eos_at_limit": true, "renormalize": true}
        decoder_start_id: the decoder's first input (Marian: pad; M2M100 / NLLB: eos; ours: bos);
        source_suffix: ids after a source's pieces (usually [eos]).
        The rest are rules on each decoder step's log-probs (rows of every request, greedy and beam),
        applied in this order before the search picks tokens; the defaults change nothing:
        suppress_ids (default []): ids never generated: their log-prob is -inf at every step
            (transformers' bad_words_ids of single tokens and suppress_tokens; OPUS-MT: [pad]);
            never eos (the model could not stop);
        then a forced first token (`languages.forced_target`): -inf everywhere but 0 at the token;
        forced_eos_at_limit (default false): the last token a request's max_new_tokens allows (the
            max_new_tokens-th) is eos, forced the same way; it wins over a forced first token. This
            is transformers' forced_eos_token_id = eos: it forces eos when the sequence so far,
            decoder start included, is max_length - 1 long; generate's max_new_tokens N means
            max_length N + 1 (the same token), a config's max_length L our max_new_tokens L - 1;
        renormalize (default false): each row's log-probs are normalized again (log-softmax) after
            the rules above, as transformers' renormalize_logits: the suppressed ids' probability
            is spread over the others, which changes scores (and beam ranks), not greedy tokens.
        A token's log-prob as processed is what a hypothesis's log_prob sums (a forced token adds
        0, a suppressed id's mass is lost unless renormalized), as transformers' beam scores.
    "languages": {"codes": {"en": 128022, "de": 128020}, "source_prefix": true, "forced_target": true}
        many-to-many models only: a request names its source and target language by code; with
        source_prefix the source starts with its language's id, with forced_target the first
        generated token is the target language's id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TOKENIZER_KINDS = ("tokenizers", "sentencepiece")
FORMAT_WITH_GENERATION = 2  # the first bundle format_version that may hold the objects above


@dataclass(frozen=True)
class TokenizerSpec:
    """bundle.json's `tokenizer`: its kind and files (names relative to the bundle)."""

    kind: str = "tokenizers"
    file: str = "tokenizer.json"  # kind "tokenizers"
    source_model: str = ""  # kind "sentencepiece"
    target_model: str = ""
    vocab: str = ""

    def files(self) -> list[str]:
        """The bundle files this tokenizer reads."""
        if self.kind == "tokenizers":
            return [self.file]
        return sorted({self.source_model, self.target_model, self.vocab})


@dataclass(frozen=True)
class GenerationSpec:
    """bundle.json's `generation`; None fields follow the special tokens (bos / [eos])."""

    decoder_start_id: int | None = None
    source_suffix: tuple[int, ...] | None = None
    suppress_ids: tuple[int, ...] = ()  # never generated
    forced_eos_at_limit: bool = False  # eos is the last token max_new_tokens allows
    renormalize: bool = False  # log-softmax again after suppressing and forcing


@dataclass(frozen=True)
class LanguageSpec:
    """bundle.json's `languages`: the codes of a many-to-many model and how they are used."""

    codes: dict[str, int] = field(default_factory=dict)
    source_prefix: bool = False
    forced_target: bool = False


def parse_tokenizer(value: Any) -> TokenizerSpec:
    """TokenizerSpec of a manifest value (None: the format-1 default); ValueError saying what is wrong."""
    if value is None:
        return TokenizerSpec()
    if not isinstance(value, dict) or value.get("kind") not in TOKENIZER_KINDS:
        raise ValueError(f"'tokenizer' must be an object whose kind is one of {', '.join(TOKENIZER_KINDS)}")
    needed = ("file",) if value["kind"] == "tokenizers" else ("source_model", "target_model", "vocab")
    missing = [k for k in needed if not isinstance(value.get(k), str) or not value[k]]
    if missing:
        raise ValueError(f"'tokenizer' of kind {value['kind']} lacks {', '.join(missing)}")
    return TokenizerSpec(kind=value["kind"], **{k: value[k] for k in needed})


def parse_generation(value: Any) -> GenerationSpec:
    """GenerationSpec of a manifest value (None: the defaults); ValueError saying what is wrong."""
    if value is None:
        return GenerationSpec()
    if not isinstance(value, dict):
        raise ValueError("'generation' must be an object")
    start, suffix = value.get("decoder_start_id"), value.get("source_suffix")
    suppress = value.get("suppress_ids", [])
    if start is not None and (not _is_id(start)):
        raise ValueError("'generation.decoder_start_id' must be a token id")
    if suffix is not None and (not isinstance(suffix, list) or not all(isinstance(i, int) for i in suffix)):
        raise ValueError("'generation.source_suffix' must be a list of token ids")
    if not isinstance(suppress, list) or not all(_is_id(i) for i in suppress):
        raise ValueError("'generation.suppress_ids' must be a list of token ids")
    flags = {k: value.get(k, False) for k in ("forced_eos_at_limit", "renormalize")}
    for key, flag in flags.items():
        if not isinstance(flag, bool):
            raise ValueError(f"'generation.{key}' must be true or false")
    return GenerationSpec(start, tuple(suffix) if suffix is not None else None,
                          tuple(dict.fromkeys(suppress)), **flags)


def _is_id(value: Any) -> bool:
    """A token id: a non-negative int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse_languages(value: Any) -> LanguageSpec:
    """LanguageSpec of a manifest value (None: not a many-to-many model)."""
    if value is None:
        return LanguageSpec()
    codes = value.get("codes") if isinstance(value, dict) else None
    if not isinstance(codes, dict) or not all(isinstance(c, str) and isinstance(i, int)
                                               for c, i in codes.items()):
        raise ValueError("'languages.codes' must map language codes to token ids")
    return LanguageSpec(dict(codes), bool(value.get("source_prefix")), bool(value.get("forced_target")))
