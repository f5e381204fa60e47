"""transformers' generate as it is (its own beam search: finished hypotheses leave the beam for a pool), the
oracle of what an imported bundle serves; and a synthetic next-token distribution that both generate (as a
logits processor) and our search can be run on, to compare the beam search alone.

`hf_generate` runs generate on right-padded source ids with only the settings given (nothing inherited from
the checkpoint's generation config unless `inherit`), and returns each source's best hypotheses as
`Generated`: the tokens after the decoder start and any prompt, without eos; the score (beam search:
sequences_scores; greedy: the chosen tokens' processed log-probs summed); the log-prob (the processed
log-probs summed: sequences_scores * generated_len ** length_penalty for beam search).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tests.support.bundle_search import right_pad


@dataclass(frozen=True)
class Generated:
    """One hypothesis of generate."""

    tokens: list[int]  # after the decoder start and the prompt, eos dropped
    score: float
    log_prob: float
    ended: bool  # ends with eos


def hf_generate(model: Any, sources: Sequence[Sequence[int]], beam: int, max_new: int | None = None,
                rules: Mapping[str, Any] | None = None, prompt: Sequence[int] = (), n_best: int = 1,
                inherit: bool = False, processors: Sequence[Any] = (), **settings: Any
                ) -> list[list[Generated]]:
    """generate's n_best hypotheses of each source (module doc): num_beams `beam`, max_new_tokens `max_new`
    (after the prompt), the generation `rules` and `settings` (length_penalty, early_stopping,
    forced_bos_token_id, ...), `prompt` as decoder_input_ids after the decoder start."""
    from transformers import GenerationConfig, LogitsProcessorList

    cfg = model.config
    eos, pad, start = cfg.eos_token_id, cfg.pad_token_id, cfg.decoder_start_token_id
    original = model.generation_config
    base = original.to_dict() if inherit else {}
    lengths = {} if max_new is None else {"max_new_tokens": max_new}
    config = GenerationConfig(**{
        **base, "num_beams": beam, "do_sample": False, "decoder_start_token_id": start, "pad_token_id": pad,
        "eos_token_id": eos, **lengths, **dict(rules or {}), **settings, "num_return_sequences": n_best,
        "return_dict_in_generate": True, "output_scores": True})
    src = torch.from_numpy(right_pad([list(s) for s in sources], pad))
    extra = {}
    if prompt:
        extra["decoder_input_ids"] = torch.tensor([[start, *prompt]] * len(sources))
    if not inherit:  # nothing of the checkpoint's config fills what `config` leaves unset
        model.generation_config = GenerationConfig(decoder_start_token_id=start, pad_token_id=pad,
                                                   eos_token_id=eos)
    try:
        with torch.no_grad():
            out = model.generate(input_ids=src, attention_mask=(src != pad).long(), generation_config=config,
                                 logits_processor=LogitsProcessorList(processors), **extra)
    finally:
        model.generation_config = original
    skip = 1 + len(prompt)
    lp = config.length_penalty if config.length_penalty is not None else 1.0
    found: list[list[Generated]] = [[] for _ in sources]
    for i, row in enumerate(out.sequences):
        tokens = row[skip:].tolist()
        n = tokens.index(eos) + 1 if eos in tokens else len(tokens)
        if beam > 1:
            score = float(out.sequences_scores[i])
            log_prob = score * n**lp
        else:
            chosen = [torch.log_softmax(out.scores[t][i], -1)[tokens[t]] for t in range(n)]
            log_prob = score = float(sum(chosen))
        found[i // n_best].append(Generated(tokens[: n - 1] if eos in tokens[:n] else tokens[:n], score,
                                            log_prob, eos in tokens[:n]))
    return found


def synthetic_logp(history: Sequence[int], vocab: int, eos: int, seed: int, eos_boost: float) -> np.ndarray:
    """Log-probs (vocab,) float32 of the token after `history` (the decoder start first), a function of the
    history alone: random logits (a few ids -inf), eos raised by eos_boost, log-softmaxed."""
    key = zlib.crc32(np.asarray([seed, *history], np.int64).tobytes())
    rng = np.random.default_rng(key)
    logits = rng.normal(0.0, 2.0, vocab)
    logits[rng.integers(0, vocab, 3)] = -np.inf
    logits[eos] = rng.normal(eos_boost, 1.0)
    top = logits.max()
    return (logits - top - np.log(np.exp(logits - top).sum())).astype(np.float32)


class SyntheticScores:
    """A logits processor giving every row synthetic_logp of its input_ids (the model's own log-probs
    replaced), so that generate searches the synthetic distribution."""

    def __init__(self, vocab: int, eos: int, seed: int, eos_boost: float) -> None:
        self.vocab, self.eos, self.seed, self.eos_boost = vocab, eos, seed, eos_boost

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Scores (rows, V) replaced."""
        rows = [synthetic_logp(ids, self.vocab, self.eos, self.seed, self.eos_boost)
                for ids in input_ids.tolist()]
        return torch.from_numpy(np.stack(rows)).to(scores.dtype)
