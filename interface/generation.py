"""How a bundle's text becomes ids and back, how its decoder starts and which rules its steps follow:
bundle.json's `tokenizer`, `generation` and `languages` objects, declared once for the exporter and
the runtime (torch-free).

Bundles of our own models (format_version 1) have none of these keys: one Hugging Face tokenizers
file `tokenizer.json`, the source is its ids + eos, the decoder starts from bos. Bundles imported
from pretrained checkpoints (export/pretrained.py, format_version 2) state them:

    "tokenizer": {"kind": "tokenizers", "file": "tokenizer.json"}
        a Hugging Face tokenizers file (ours; BART's byte-level BPE), used without its special tokens
    "tokenizer": {"kind": "sentencepiece", "source_model": "source.spm", "target_model": "target.spm",
                  "vocab": "vocab.json"}
        SentencePiece splits text into pieces (source_model for sources, target_model detokenizes
        outputs; the same file for both is fine); `vocab` maps each piece to the model's id (a JSON
        object, the transformers tokenizer's get_vocab()); a piece it lacks is the unk id.
    "generation": {"decoder_start_id": 58100, "source_suffix": [0], "suppress_ids": [58100],
                   "forced_eos_at_limit": true, "renormalize": true}
        decoder_start_id: the decoder's first input (Marian: pad; M2M100 / NLLB / BART: eos; ours: bos);
        source_suffix: ids after a source's pieces (usually [eos]);
        source_prefix (default []): ids before a source's pieces, after its language id if any
            (BART: [bos]).
        tasks (default {}): task name -> the ids of its prefix (T5's "summarize: "), read after
            source_prefix and before the text's pieces when a request names the task; no name is
            NO_TASK, the request's word for "no prefix";
        task (default none): the task whose prefix a request naming none is read with (one of tasks).
        The rest are rules on each decoder step's log-probs (rows of every request, greedy and beam),
        applied in this order before the search picks tokens; the defaults change nothing:
        suppress_ids (default []): ids never generated: their log-prob is -inf at every step
            (transformers' bad_words_ids of single tokens and suppress_tokens; OPUS-MT: [pad]);
            never eos (the model could not stop);
        then a forced first token (`languages.forced_target`, else forced_bos_id): -inf everywhere but 0
            at the token;
        forced_bos_id (default none): the first generated token of every request, forced as above when
            the model has no target languages (transformers' forced_bos_token_id: BART's [bos]);
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
    "generation": {..., "beam_search": "transformers", "early_stopping": false, "begin_suppress_ids": [],
                   "defaults": {"num_beams": 4, "max_length": 512}}
        beam_search (default "gnmt"): the beam search of beam_size > 1. "gnmt" is ours
            (service/runtime/decoding/search.py: finished beams stay in the beam, length penalty
            ((5 + len) / 6) ** alpha, alpha 0 by default); "transformers" is transformers' generate's
            (service/runtime/decoding/pooled_beam.py: finished hypotheses leave for a pool of num_beams, score
            sum / generated_len ** length_penalty, length_penalty 1 by default): imported checkpoints
            use it, so that they decode as transformers' pipeline does;
        early_stopping (default false; true, false or "never"): transformers' early_stopping, the
            "transformers" search's stopping rule;
        begin_suppress_ids (default []): ids never generated at the first position after the decoder's
            prompt (after a forced first token when there is one): transformers'
            begin_suppress_tokens (SuppressTokensAtBeginLogitsProcessor); eos may be one;
        defaults (default {}): what the checkpoint's generation config decodes with when a request
            leaves the option unset, in transformers' terms: num_beams (our beam_size), max_length
            (the decoder start included: our max_new_tokens max_length - 1, at most the model's
            limit), min_length (the decoder start included: our min_length max(0, min_length - 1)),
            no_repeat_ngram_size, length_penalty (our alpha, >= 0), repetition_penalty (> 0). A
            request's own value wins; the server's limits (--max-beam, --max-output-tokens) bound them.
    "languages": {"codes": {"en": 128022, "de": 128020}, "source_prefix": true, "forced_target": true}
        many-to-many models only: a request names its source and target language by code; with
        source_prefix the source starts with its language's id, with forced_target the first
        generated token is the target language's id.
    "source_language": "en"
        optional, any format_version (a top-level key, not in `languages`, which makes a model
        many-to-many): the language the model reads, a code as its maker states it (a Marian
        tokenizer's source_lang; `python -m export --source-language` for ours); absent: unknown.
        What a request's source language defaults to where one is needed (sentence segmentation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

TOKENIZER_KINDS = ("tokenizers", "sentencepiece")
BEAM_SEARCHES = ("gnmt", "transformers")  # ours, and transformers' generate's
EARLY_STOPPING = (False, True, "never")  # transformers' early_stopping values
FORMAT_WITH_GENERATION = 2  # the first bundle format_version that may hold the objects above
NO_TASK = "none"  # a request's task meaning "no prefix" (over a bundle's default task): no task has this name
SOURCE_LANGUAGE = "source_language"  # bundle.json's key of the language the model reads


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
class GenerationDefaults:
    """`generation.defaults`: a checkpoint's generation settings, in transformers' terms (None: unset)."""

    num_beams: int | None = None
    max_length: int | None = None  # the decoder start included
    min_length: int | None = None  # the decoder start included
    no_repeat_ngram_size: int | None = None
    length_penalty: float | None = None
    repetition_penalty: float | None = None

    @property
    def max_new_tokens(self) -> int | None:
        """max_length in our terms: generated tokens (eos included), without the decoder start."""
        return None if self.max_length is None else self.max_length - 1

    @property
    def min_new_tokens(self) -> int | None:
        """min_length in our terms: tokens generated before eos may be, without the decoder start."""
        return None if self.min_length is None else max(0, self.min_length - 1)

    def as_dict(self) -> dict[str, Any]:
        """The set values, as bundle.json states them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class GenerationSpec:
    """bundle.json's `generation`; None fields follow the special tokens (bos / [eos])."""

    decoder_start_id: int | None = None
    source_suffix: tuple[int, ...] | None = None
    suppress_ids: tuple[int, ...] = ()  # never generated
    forced_eos_at_limit: bool = False  # eos is the last token max_new_tokens allows
    renormalize: bool = False  # log-softmax again after suppressing and forcing
    beam_search: str = "gnmt"  # BEAM_SEARCHES: ours, or transformers' generate's
    early_stopping: bool | str = False  # EARLY_STOPPING: the "transformers" search's stopping rule
    begin_suppress_ids: tuple[int, ...] = ()  # never generated at the first position after the prompt
    defaults: GenerationDefaults = GenerationDefaults()  # what a request leaves unset decodes with
    source_prefix: tuple[int, ...] = ()  # before a source's pieces (after its language id)
    forced_bos_id: int | None = None  # the first generated token (without target languages)
    tasks: dict[str, tuple[int, ...]] = field(default_factory=dict)  # task name -> its prefix's ids
    task: str | None = None  # the default task (one of tasks)


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
    forced_bos = value.get("forced_bos_id")
    if forced_bos is not None and not _is_id(forced_bos):
        raise ValueError("'generation.forced_bos_id' must be a token id")
    prefix = value.get("source_prefix", [])
    if not isinstance(prefix, list) or not all(_is_id(i) for i in prefix):
        raise ValueError("'generation.source_prefix' must be a list of token ids")
    if not isinstance(suppress, list) or not all(_is_id(i) for i in suppress):
        raise ValueError("'generation.suppress_ids' must be a list of token ids")
    flags = {k: value.get(k, False) for k in ("forced_eos_at_limit", "renormalize")}
    for key, flag in flags.items():
        if not isinstance(flag, bool):
            raise ValueError(f"'generation.{key}' must be true or false")
    search, early = value.get("beam_search", "gnmt"), value.get("early_stopping", False)
    if search not in BEAM_SEARCHES:
        raise ValueError(f"'generation.beam_search' must be one of {', '.join(BEAM_SEARCHES)}, "
                         f"got {search!r}")
    if not isinstance(early, bool) and early != "never":
        raise ValueError(f"'generation.early_stopping' must be true, false or \"never\", got {early!r}")
    begin = value.get("begin_suppress_ids", [])
    if not isinstance(begin, list) or not all(_is_id(i) for i in begin):
        raise ValueError("'generation.begin_suppress_ids' must be a list of token ids")
    tasks, task = parse_tasks(value.get("tasks", {}), value.get("task"))
    return GenerationSpec(start, tuple(suffix) if suffix is not None else None,
                          tuple(dict.fromkeys(suppress)), **flags, beam_search=search, early_stopping=early,
                          begin_suppress_ids=tuple(dict.fromkeys(begin)),
                          defaults=parse_defaults(value.get("defaults")), source_prefix=tuple(prefix),
                          forced_bos_id=forced_bos, tasks=tasks, task=task)


def parse_tasks(tasks: Any, task: Any) -> tuple[dict[str, tuple[int, ...]], str | None]:
    """`generation.tasks` and `generation.task` checked; ValueError saying what is wrong."""
    if not isinstance(tasks, dict):
        raise ValueError("'generation.tasks' must be an object of task name -> token ids")
    for name, ids in tasks.items():
        if not name.strip() or name == NO_TASK:
            raise ValueError(f"'generation.tasks' may not name a task {name!r} (empty, or {NO_TASK!r})")
        if not isinstance(ids, list) or not ids or not all(_is_id(i) for i in ids):
            raise ValueError(f"'generation.tasks.{name}' must be a non-empty list of token ids")
    if task is not None and task not in tasks:
        raise ValueError(f"'generation.task' must be one of 'generation.tasks', got {task!r}")
    return {name: tuple(ids) for name, ids in tasks.items()}, task


def parse_defaults(value: Any) -> GenerationDefaults:
    """GenerationDefaults of `generation.defaults` (None: none); ValueError saying what is wrong."""
    if value is None:
        return GenerationDefaults()
    if not isinstance(value, dict):
        raise ValueError("'generation.defaults' must be an object")
    known = [f.name for f in fields(GenerationDefaults)]
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ValueError(f"'generation.defaults' holds {', '.join(map(repr, unknown))}; it may hold "
                         f"{', '.join(known)}")
    lowest = {"num_beams": 1, "max_length": 2, "min_length": 0, "no_repeat_ngram_size": 0}
    for key, low in lowest.items():
        got = value.get(key)
        if got is not None and (not _is_int(got) or got < low):
            raise ValueError(f"'generation.defaults.{key}' must be an integer >= {low}, got {got!r}")
    for key, low, strict in (("length_penalty", 0.0, False), ("repetition_penalty", 0.0, True)):
        got = value.get(key)
        if got is not None and (not _is_number(got) or got < low or (strict and got == low)):
            raise ValueError(f"'generation.defaults.{key}' must be a finite number {'>' if strict else '>='} "
                             f"{low:g}, got {got!r}")
    return GenerationDefaults(**{k: float(v) if k.endswith("penalty") else v
                                 for k, v in value.items() if v is not None})


def _is_int(value: Any) -> bool:
    """An int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_id(value: Any) -> bool:
    """A token id: a non-negative int (not a bool)."""
    return _is_int(value) and value >= 0


def parse_languages(value: Any) -> LanguageSpec:
    """LanguageSpec of a manifest value (None: not a many-to-many model)."""
    if value is None:
        return LanguageSpec()
    codes = value.get("codes") if isinstance(value, dict) else None
    if not isinstance(codes, dict) or not all(isinstance(c, str) and isinstance(i, int)
                                               for c, i in codes.items()):
        raise ValueError("'languages.codes' must map language codes to token ids")
    return LanguageSpec(dict(codes), bool(value.get("source_prefix")), bool(value.get("forced_target")))


def parse_source_language(value: Any) -> str | None:
    """The `source_language` of a manifest value (None: not stated); ValueError unless a non-empty code."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise ValueError(f"'{SOURCE_LANGUAGE}' must be a non-empty language code such as \"en\" "
                         f"(no surrounding spaces), got {value!r}")
    return value
