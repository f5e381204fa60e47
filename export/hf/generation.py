"""A Hugging Face checkpoint's generation settings -> the bundle's `generation` rules, search and defaults.

transformers reads them from generation_config.json, else config.json. What changes generate's output
becomes a rule of interface/generation.py (bad_words_ids of single tokens and suppress_tokens ->
suppress_ids, forced_eos_token_id -> forced_eos_at_limit, renormalize_logits -> renormalize), the search
is transformers' own beam search (with the checkpoint's early_stopping and begin_suppress_tokens), a
forced_bos_token_id of a model without target languages (BART) becomes forced_bos_id, and
the settings generate decodes with by default become `generation.defaults`. What a bundle cannot state
is refused (`UnsupportedModel`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from export.hf.mapping import UnsupportedModel
from interface.generation import parse_defaults
from model.config import ModelConfig

# transformers' generation settings worth knowing when comparing outputs (recorded; the rules among
# them, bad_words_ids, suppress_tokens, forced_eos_token_id and renormalize_logits, are applied too)
GENERATION_KEYS = ("num_beams", "max_length", "max_new_tokens", "min_length", "length_penalty",
                   "early_stopping", "bad_words_ids", "suppress_tokens", "begin_suppress_tokens",
                   "forced_bos_token_id", "forced_eos_token_id", "renormalize_logits", "no_repeat_ngram_size",
                   "repetition_penalty", "do_sample")
# generation.defaults (interface/generation.py), named as transformers names them
DEFAULT_KEYS = ("num_beams", "max_length", "min_length", "no_repeat_ngram_size", "length_penalty",
                "repetition_penalty")


def generation_settings(model_dir: Path, hf: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's generation settings as transformers loads them: generation_config.json, else
    config.json (generation/utils.py: GenerationConfig.from_pretrained, config.json as a fallback)."""
    path = model_dir / "generation_config.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else hf


def generation_defaults(settings: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's own generation settings worth recording (GENERATION_KEYS that are set)."""
    return {k: settings[k] for k in GENERATION_KEYS if settings.get(k) is not None}


def _ids(value: Any) -> list[int]:
    """An id or a list of ids (as transformers accepts them) as a list; None as []."""
    return [] if value is None else [value] if isinstance(value, int) else list(value)


def generation_rules(settings: dict[str, Any], cfg: ModelConfig) -> dict[str, Any]:
    """The `generation` rules (interface/generation.py) of what transformers' generate applies from the
    checkpoint's settings: bad_words_ids of single tokens (but [eos], which NoBadWordsLogitsProcessor
    drops) and suppress_tokens -> suppress_ids; forced_eos_token_id = eos -> forced_eos_at_limit;
    renormalize_logits -> renormalize. UnsupportedModel for what the rules cannot state."""
    eos = {cfg.eos_id, *_ids(settings.get("eos_token_id"))}
    bad = settings.get("bad_words_ids") or []
    longer = [b for b in bad if not isinstance(b, list) or len(b) != 1 or not isinstance(b[0], int)]
    if longer:
        raise UnsupportedModel(f"bad_words_ids holds {longer[0]!r}, not a single token: a bundle suppresses "
                               "single ids only (generation.suppress_ids), not sequences of several")
    tokens = _ids(settings.get("suppress_tokens"))
    if eos & set(tokens):
        raise UnsupportedModel(f"suppress_tokens holds the eos id {cfg.eos_id}: generation could never stop")
    suppress = list(dict.fromkeys([b[0] for b in bad if b[0] not in eos] + tokens))
    outside = [i for i in suppress if not isinstance(i, int) or not 0 <= i < cfg.vocab_size]
    if outside:
        raise UnsupportedModel(f"bad_words_ids / suppress_tokens hold {outside[0]!r}, not an id of the "
                               f"model's vocabulary of {cfg.vocab_size}")
    forced = _ids(settings.get("forced_eos_token_id"))
    if forced and forced != [cfg.eos_id]:
        raise UnsupportedModel(f"forced_eos_token_id {settings['forced_eos_token_id']!r} is not the eos id "
                               f"{cfg.eos_id}: a bundle can force only eos at the length limit")
    return {"suppress_ids": suppress, "forced_eos_at_limit": bool(forced),
            "renormalize": settings.get("renormalize_logits") is True}


def forced_bos(settings: dict[str, Any], cfg: ModelConfig, many_to_many: bool) -> dict[str, Any]:
    """`generation.forced_bos_id` of the checkpoint's forced_bos_token_id ({} when unset, or for a
    many-to-many model, whose first token is the request's target language); UnsupportedModel if it is not
    one id of the model's vocabulary."""
    forced = settings.get("forced_bos_token_id")
    if forced is None or many_to_many:
        return {}
    if not isinstance(forced, int) or isinstance(forced, bool) or not 0 <= forced < cfg.vocab_size:
        raise UnsupportedModel(f"forced_bos_token_id {forced!r} is not an id of the model's vocabulary of "
                               f"{cfg.vocab_size}")
    return {"forced_bos_id": forced}


def generation_search(settings: dict[str, Any], cfg: ModelConfig) -> dict[str, Any]:
    """`generation`'s search and defaults (interface/generation.py) of the checkpoint's settings:
    transformers' beam search with its early_stopping, begin_suppress_tokens -> begin_suppress_ids, and
    the settings of DEFAULT_KEYS that are set -> defaults (max_new_tokens, which wins over max_length in
    generate, as the max_length it means: max_new_tokens + the decoder start). UnsupportedModel for what a
    bundle cannot state."""
    early = settings.get("early_stopping", False)
    if not isinstance(early, bool) and early != "never":
        raise UnsupportedModel(f"early_stopping {early!r} is not true, false or 'never'")
    begin = _ids(settings.get("begin_suppress_tokens"))
    outside = [i for i in begin if not isinstance(i, int) or not 0 <= i < cfg.vocab_size]
    if outside:
        raise UnsupportedModel(f"begin_suppress_tokens holds {outside[0]!r}, not an id of the model's "
                               f"vocabulary of {cfg.vocab_size}")
    defaults = {k: settings[k] for k in DEFAULT_KEYS if settings.get(k) is not None}
    if settings.get("max_new_tokens") is not None:
        defaults["max_length"] = settings["max_new_tokens"] + 1
    try:
        parse_defaults(defaults)
    except ValueError as e:
        raise UnsupportedModel(f"the checkpoint's generation settings: {e}") from None
    return {"beam_search": "transformers", "early_stopping": early, "begin_suppress_ids": begin,
            "defaults": defaults}
