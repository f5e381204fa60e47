"""A Hugging Face checkpoint's tokenizer -> the bundle's SentencePiece files and its format-2 objects.

What the bundle records (interface/generation.py, docs/bundle-format.md):

    tokenizer   kind "sentencepiece": Marian's source.spm / target.spm as they are; M2M100 / NLLB's
                one sentencepiece.bpe.model as both; vocab.json = the transformers tokenizer's
                get_vocab() (piece -> model id; for M2M100 / NLLB with the fairseq offsets and the
                language tokens); kind "tokenizers": BART's byte-level BPE and T5 / mT5's
                SentencePiece unigram (with T5's <extra_id_N> sentinels as added tokens), the
                transformers tokenizer's own tokenizers file written as tokenizer.json (however the
                checkpoint holds it: tokenizer.json, vocab.json + merges.txt, or a bare spiece.model);
                Pegasus's unigram model with its id offset (pad, eos, <mask_1>, <mask_2>,
                <unk_2>..<unk_102>, then the pieces) the same way (tokenizer.json, or built from a bare
                spiece.model: `pegasus_from_spm`)
    generation  decoder_start_id (the model's decoder_start_token_id: Marian, Pegasus and T5 pad, M2M100 /
                NLLB / BART eos), source_suffix (what the tokenizer appends to a source: [eos]) and
                source_prefix (what it puts before a source that is not a language id: BART's
                [bos]); tasks (T5's task prefixes, "summarize: ", by name: their ids, each of which
                must tokenize apart from the text after it: `task_prefix_ids`) and task (the default
                one); its rules (suppress_ids, ...) come from the generation config (export/pretrained.py)
    languages   many-to-many models only (M2M100, NLLB, mBART-50: "en_XX", ...): code -> id of its
                language token, the source prefixed with its language, the first generated token
                forced to the target language
    source_language  Marian only, when its tokenizer states one: the tokenizer's source_lang
                (tokenizer_config.json), the language the model reads; M2M100 / NLLB read the
                request's source language instead

The affixes are read off the tokenizer itself (a sample text encoded with and without its special
tokens), and a tokenizer whose affixes the format cannot state is refused.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from export.hf.spm_model import pieces_and_scores, precompiled_charsmap
from interface.generation import (
    SOURCE_LANGUAGE,
    parse_generation,
    parse_languages,
    parse_source_language,
    parse_tokenizer,
)
from model.config import ModelConfig

VOCAB_FILE = "vocab.json"
TOKENIZERS_FILE = "tokenizer.json"  # kind "tokenizers"
MBART_SPM = "sentencepiece.bpe.model"  # mBART-50's (and M2M100 / NLLB's) SentencePiece model
SPIECE = "spiece.model"  # T5's, Flan-T5's, mT5's and Pegasus's SentencePiece model
TOKENIZERS_FAMILIES = ("bart", "pegasus", "t5", "mt5")  # written as the transformers tokenizer's own file
PEGASUS_OFFSET = 103  # PegasusTokenizer's default offset: pieces from id 2 on sit at their id + offset
NLLB_CODE = re.compile(r"[a-z]{3}_[A-Z][a-z]{3}")  # eng_Latn, fra_Latn, ...
SAMPLE = "a b"  # encoded with and without special tokens to find the affixes
# texts a task prefix must tokenize apart from (leading space, punctuation, digits, an unknown character)
PREFIX_CHECKS = (SAMPLE, " a", "B, c.", "3 x", "日本")


class TokenizerMismatch(ValueError):
    """The tokenizer cannot be expressed in the bundle, or disagrees with the model."""


@dataclass
class TokenizerImport:
    """The bundle's tokenizer files, special ids and format-2 objects."""

    files: dict[str, Path]  # bundle file name -> file to copy
    vocab: dict[str, int]  # written as vocab.json (kind sentencepiece)
    special: dict[str, int]  # pad, bos, eos, unk
    tokenizer: dict[str, Any]
    generation: dict[str, Any]
    languages: dict[str, Any] | None = None
    source_language: str | None = None  # Marian's source_lang
    refused_tasks: dict[str, str] = field(default_factory=dict)  # task -> why its prefix cannot be stated
    texts: dict[str, str] = field(default_factory=dict)  # bundle file name -> contents (tokenizer.json)

    def write(self, bundle_dir: Path) -> None:
        """Copy the SentencePiece model(s) and write vocab.json (or write tokenizer.json) into the bundle."""
        for name, src in self.files.items():
            shutil.copyfile(src, bundle_dir / name)
        for name, text in self.texts.items():
            (bundle_dir / name).write_text(text, encoding="utf-8")
        if self.tokenizer["kind"] != "sentencepiece":
            return
        by_id = dict(sorted(self.vocab.items(), key=lambda kv: kv[1]))
        text = json.dumps(by_id, ensure_ascii=False, indent=0)
        (bundle_dir / VOCAB_FILE).write_text(text + "\n", encoding="utf-8")

    def manifest(self) -> dict[str, Any]:
        """bundle.json's tokenizer, generation (languages, source_language), checked by the runtime's."""
        parse_tokenizer(self.tokenizer)
        parse_generation(self.generation)
        out = {"tokenizer": self.tokenizer, "generation": self.generation}
        if self.languages is not None:
            parse_languages(self.languages)
            out["languages"] = self.languages
        if self.source_language is not None:
            out[SOURCE_LANGUAGE] = parse_source_language(self.source_language)
        return out


def load_hf_tokenizer(model_dir: Path, family: str = "") -> Any:
    """The checkpoint's transformers tokenizer, from local files only; an mBART-50, Pegasus or T5 directory
    whose SentencePiece model transformers cannot read (no tokenizer.json) through `mbart50_from_spm`,
    `pegasus_from_spm` or `t5_from_spm`."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as e:  # a missing file surfaces as OSError, TypeError or AssertionError
        bare = {"mbart": (MBART_SPM, mbart50_from_spm), "pegasus": (SPIECE, pegasus_from_spm),
                "t5": (SPIECE, t5_from_spm), "mt5": (SPIECE, t5_from_spm)}.get(family)
        if bare and (model_dir / bare[0]).is_file() and not (model_dir / TOKENIZERS_FILE).is_file():
            return bare[1](model_dir)
        raise FileNotFoundError(f"cannot load the tokenizer of {model_dir} (are its tokenizer files there?): "
                                f"{type(e).__name__}: {e}") from e


def tokenizer_settings(model_dir: Path) -> dict[str, Any]:
    """tokenizer_config.json of a model directory ({} without one)."""
    path = model_dir / "tokenizer_config.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def mbart50_from_spm(model_dir: Path) -> Any:
    """An MBart50Tokenizer of the directory's bare sentencepiece.bpe.model (its pieces and scores, its
    normalizer's charsmap: export/hf/spm_model.py) and tokenizer_config.json's src_lang / tgt_lang."""
    from transformers import MBart50Tokenizer

    settings = tokenizer_settings(model_dir)
    spm = model_dir / MBART_SPM
    charsmap = precompiled_charsmap(spm) or None
    return MBart50Tokenizer(vocab=pieces_and_scores(spm), _spm_precompiled_charsmap=charsmap,
                            src_lang=settings.get("src_lang") or "en_XX", tgt_lang=settings.get("tgt_lang"))


def pegasus_vocab(spm: Path, offset: int = PEGASUS_OFFSET, pad: str = "<pad>", eos: str = "</s>",
                  masks: tuple[str, ...] = ("<mask_1>", "<mask_2>")) -> list[tuple[str, float]]:
    """A Pegasus tokenizer's unigram vocabulary (piece, score) in id order, as its tokenizer.json holds it:
    pad, eos, the sentence and token masks, <unk_2>..<unk_{offset-1}> (score -100: never chosen), then the
    SentencePiece model's pieces from id 2 on (its own pad and eos left out): piece i at id i + offset."""
    reserved = [(f"<unk_{i}>", -100.0) for i in range(2, offset)]
    return [(pad, 0.0), (eos, 0.0), *((m, 0.0) for m in masks), *reserved, *pieces_and_scores(spm)[2:]]


def pegasus_from_spm(model_dir: Path) -> Any:
    """A PegasusTokenizer of the directory's bare spiece.model (`pegasus_vocab` of its pieces and scores,
    its normalizer's charsmap) and tokenizer_config.json's special tokens and offset."""
    from transformers import PegasusTokenizer

    settings = tokenizer_settings(model_dir)
    keys = ("pad_token", "eos_token", "unk_token", "mask_token", "mask_token_sent")
    named = {k: settings[k] for k in keys if isinstance(settings.get(k), str)}
    offset = int(settings.get("offset") or PEGASUS_OFFSET)
    spm = model_dir / SPIECE
    masks = (named.get("mask_token_sent", "<mask_1>"), named.get("mask_token", "<mask_2>"))
    vocab = pegasus_vocab(spm, offset, named.get("pad_token", "<pad>"), named.get("eos_token", "</s>"), masks)
    return PegasusTokenizer(vocab=vocab, _spm_precompiled_charsmap=precompiled_charsmap(spm) or None,
                            offset=offset, **named)


def t5_from_spm(model_dir: Path) -> Any:
    """A T5Tokenizer of the directory's bare spiece.model, as transformers converts one: the model's pieces
    and scores, then tokenizer_config.json's extra_ids (default 100) sentinels <extra_id_N> in reverse
    order (<extra_id_0> last), its additional_special_tokens (default: those sentinels), the normalizer's
    charsmap (export/hf/spm_model.py)."""
    from transformers import T5Tokenizer

    settings = tokenizer_settings(model_dir)
    spm = model_dir / SPIECE
    extra = int(settings.get("extra_ids", 100))
    sentinels = [f"<extra_id_{i}>" for i in range(extra - 1, -1, -1)]
    vocab = pieces_and_scores(spm) + [(token, 0.0) for token in sentinels]
    special = {k: settings[k] for k in ("eos_token", "unk_token", "pad_token")
               if isinstance(settings.get(k), str)}
    return T5Tokenizer(vocab=vocab, _spm_precompiled_charsmap=precompiled_charsmap(spm) or None,
                       extra_ids=extra, additional_special_tokens=settings.get("additional_special_tokens")
                       or sentinels, **special)


def affixes(tok: Any) -> tuple[list[int], list[int]]:
    """(prefix, suffix): the ids the tokenizer puts before and after a text's own ids."""
    body = tok(SAMPLE, add_special_tokens=False)["input_ids"]
    full = tok(SAMPLE)["input_ids"]
    for i in range(len(full) - len(body) + 1):
        if full[i : i + len(body)] == body:
            return full[:i], full[i + len(body) :]
    raise TokenizerMismatch(f"the tokenizer's ids of {SAMPLE!r} with special tokens ({full}) do not contain "
                            f"those without ({body})")


def spm_files(tok: Any, model_dir: Path, family: str) -> tuple[Path, Path]:
    """The (source, target) SentencePiece model files of the tokenizer."""
    if family == "marian":
        if getattr(tok, "separate_vocabs", False):
            raise TokenizerMismatch("a Marian tokenizer with separate source and target vocabularies "
                                    "(target_vocab.json) is not supported: the bundle holds one vocab.json")
        source, target = (Path(f) for f in tok.spm_files)
    else:
        path = Path(getattr(tok, "spm_file", None) or model_dir / "sentencepiece.bpe.model")
        source = target = path
    for f in {source, target}:
        if not f.is_file():
            raise FileNotFoundError(f"SentencePiece model {f} not found (the bundle's tokenizer needs it)")
    return source, target


def language_codes(tok: Any) -> dict[str, int]:
    """Language code -> id of its token: M2M100's lang_code_to_id, else NLLB-style code tokens."""
    codes = getattr(tok, "lang_code_to_id", None)
    if codes:
        return {str(c): int(i) for c, i in codes.items()}
    vocab = tok.get_vocab()
    return {t: int(vocab[t]) for t in sorted(vocab) if NLLB_CODE.fullmatch(t)}


def source_language(tok: Any, family: str) -> str | None:
    """The language a Marian tokenizer reads (its source_lang, stripped), else None."""
    lang = getattr(tok, "source_lang", None) if family == "marian" else None
    return lang.strip() if isinstance(lang, str) and lang.strip() else None


def special_ids(tok: Any, cfg: ModelConfig) -> dict[str, int]:
    """pad / bos / eos / unk of the tokenizer; they must agree with the model's config.

    bos: Marian defines none; the runtime's only use of bos is the decoder's first input, so the
    decoder start (pad) is recorded (generation.decoder_start_id says the same explicitly).
    """
    ids = {"pad": tok.pad_token_id, "eos": tok.eos_token_id, "unk": tok.unk_token_id,
           "bos": tok.bos_token_id if tok.bos_token_id is not None else cfg.start_id}
    if None in ids.values():
        raise TokenizerMismatch(f"the tokenizer lacks a special token: {ids}")
    for name, model_id in (("pad", cfg.pad_id), ("eos", cfg.eos_id)):
        if ids[name] != model_id:
            raise TokenizerMismatch(f"the tokenizer's {name} id {ids[name]} differs from the model's "
                                    f"{model_id}")
    return {k: int(v) for k, v in ids.items()}


def tokenizer_files(tok: Any, model_dir: Path, family: str) -> tuple[dict[str, Any], dict[str, Path],
                                                                      dict[str, str]]:
    """(`tokenizer` object, files to copy, files to write) of the bundle: SentencePiece models as they
    are, or BART's byte-level BPE, Pegasus's and T5's unigram as the transformers tokenizer's own
    tokenizers file (what transformers 5 tokenizes with: its T5Tokenizer rebuilds the normalizer and
    pre-tokenizer whatever a hub tokenizer.json says)."""
    if family in TOKENIZERS_FAMILIES:
        backend = getattr(tok, "backend_tokenizer", None)
        if backend is None:
            raise TokenizerMismatch(f"the {family} tokenizer {type(tok).__name__} has no tokenizers backend "
                                    "(ByT5's byte tokenizer, say): the bundle needs a tokenizers file")
        from tokenizers import Tokenizer

        own = Tokenizer.from_str(backend.to_str())  # a copy: transformers may have left padding set on it
        own.no_padding()
        own.no_truncation()
        return {"kind": "tokenizers", "file": TOKENIZERS_FILE}, {}, {TOKENIZERS_FILE: own.to_str()}
    source, target = spm_files(tok, model_dir, family)
    names = {"source_model": "source.spm", "target_model": "target.spm"} if family == "marian" else \
        {"source_model": source.name, "target_model": source.name}
    files = {names["source_model"]: source, names["target_model"]: target}
    return {"kind": "sentencepiece", **names, "vocab": VOCAB_FILE}, files, {}


def _added_specials(tok: Any) -> set[str]:
    """The special tokens the tokenizer adds over its model's vocabulary (BART's <mask>)."""
    added = getattr(tok, "added_tokens_decoder", {}) or {}
    return {str(t) for t in added.values() if getattr(t, "special", False)} & set(tok.all_special_tokens)


def _without_added(text: str, tokens: set[str]) -> str:
    """A tokenizers JSON file without these added tokens: a text holding one is then read as plain text."""
    data = json.loads(text)
    data["added_tokens"] = [t for t in data.get("added_tokens", []) if t["content"] not in tokens]
    return json.dumps(data, ensure_ascii=False)


def task_prefix_ids(tok: Any, text: str) -> list[int]:
    """The ids of a task prefix (T5's "translate English to German: "): the tokenizer's ids of text + X must
    be these ids + those of X for every text X of PREFIX_CHECKS, so that a bundle stating them gives the
    ids of the prefixed text; TokenizerMismatch otherwise (a prefix that merges with what follows)."""
    if not text.strip():
        raise TokenizerMismatch("the task prefix is empty")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    for after in PREFIX_CHECKS:
        joined = tok(text + after, add_special_tokens=False)["input_ids"]
        apart = ids + tok(after, add_special_tokens=False)["input_ids"]
        if joined != apart:
            raise TokenizerMismatch(f"the task prefix {text!r} does not tokenize apart from the text after "
                                    f"it ({text + after!r}: {joined}, not {apart}); end it with a space")
    return list(ids)


def read_tokenizer(model_dir: Path, family: str, cfg: ModelConfig, tasks: Mapping[str, str] | None = None,
                   task: str | None = None) -> TokenizerImport:
    """The bundle's tokenizer of a supported checkpoint (export/hf/mapping.py family), with the ids of each
    task prefix in `tasks` (name -> a text a source may start with) as `generation.tasks`, `task` the default
    one; a prefix that does not tokenize apart is left out, its reason in `refused_tasks`."""
    tok = load_hf_tokenizer(model_dir, family)
    spec, files, texts = tokenizer_files(tok, model_dir, family)
    vocab = {str(p): int(i) for p, i in tok.get_vocab().items()}
    codes = language_codes(tok) if family in ("m2m_100", "mbart") else {}
    vocab |= {getattr(tok, "lang_code_to_token", {}).get(c, c): i for c, i in codes.items()}
    rows = max(cfg.vocab_size, cfg.src_vocab)
    unused = {p for p, i in vocab.items() if i >= rows and p in _added_specials(tok)}
    too_big = {p: i for p, i in vocab.items() if i >= rows and p not in unused}
    if too_big:
        raise TokenizerMismatch(f"{len(too_big)} tokenizer id(s) beyond the model's vocabulary, e.g. "
                                f"{next(iter(too_big.items()))}")
    if unused:  # bart-large-cnn: <mask> is id 50,264 of a model of 50,264 rows; no text may reach it
        vocab = {p: i for p, i in vocab.items() if p not in unused}
        texts = {name: _without_added(text, unused) for name, text in texts.items()}
    special = special_ids(tok, cfg)
    prefix, suffix = affixes(tok)
    if suffix != [cfg.eos_id]:
        raise TokenizerMismatch(f"the tokenizer appends {suffix} to a source; the bundle format states a "
                                f"suffix of ids but not one with a language code (legacy NLLB / mBART-25?)")
    languages, fixed = None, prefix
    if codes:
        if len(prefix) != 1 or prefix[0] not in codes.values():
            raise TokenizerMismatch(f"a many-to-many tokenizer must prefix a source with its language id, "
                                    f"got {prefix}")
        languages, fixed = {"codes": codes, "source_prefix": True, "forced_target": True}, []
    elif set(prefix) & set(language_codes(tok).values()):
        raise TokenizerMismatch(f"the tokenizer prefixes a source with {prefix}, a language id, but the "
                                f"{family} family has no languages")
    generation: dict[str, Any] = {"decoder_start_id": cfg.start_id, "source_suffix": suffix}
    if fixed:
        generation["source_prefix"] = fixed
    prefixes, refused = {}, {}
    for name, text in (tasks or {}).items():
        try:
            prefixes[name] = task_prefix_ids(tok, text)
        except TokenizerMismatch as e:
            refused[name] = str(e)
    if prefixes:
        generation["tasks"] = prefixes
    if task is not None and task in prefixes:
        generation["task"] = task
    return TokenizerImport(
        files=files, vocab=vocab, special=special, tokenizer=spec, generation=generation,
        languages=languages, source_language=source_language(tok, family), texts=texts, refused_tasks=refused,
    )
