"""Greedy and beam search over a bundle's ONNX graphs, and transformers' generate searching the same way.

`onnx_search` runs a bundle's encoder.onnx and decoder.onnx (either cache interface; an in-place
cache bound as past and present, reordered in place) with the search of model/decoding.py and
service/runtime/decoding/search.py: a beam that emits eos stays in the beam with a frozen score, followed
by pad at no cost; beams rank by summed log-prob (alpha 0); beam 1 is greedy. A forced first token
(M2M100 / NLLB's target language) adds 0, as transformers' ForcedBOSTokenLogitsProcessor does;
`suppress` ids are never generated (transformers' bad_words_ids), and both start the decoder from
the bundle's generation.decoder_start_id.

`generate` (`hf_search`, `hf_scored_search`) is transformers' generate with the same budget, no
sampling and optionally a checkpoint's generation rules (bad_words_ids, forced_eos_token_id,
renormalize_logits). Greedy is generate's own. Its beam search differs from ours in one rule: a
beam that emits eos leaves the beam for a pool of finished hypotheses and the k best unfinished
continuations go on. To search as ours does, generate runs with eos_token_id unset (nothing leaves
the beam, max_new_tokens ends it), a logits processor giving a finished row only pad at log-prob 0
(`FrozenFinished`), and length_penalty 0 (finished hypotheses ranked by summed log-prob, as alpha 0).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from export.verify.base import BoundCache, empty_cache, kv_cache_of, open_session, step_feeds
from interface import names


def right_pad(sources: list[list[int]], pad: int) -> np.ndarray:
    """(B, S) int64 ids, right-padded."""
    out = np.full((len(sources), max(map(len, sources))), pad, np.int64)
    for i, s in enumerate(sources):
        out[i, : len(s)] = s
    return out


def cut(tokens: list[int], eos: int) -> list[int]:
    """Tokens up to (not including) the first eos."""
    return tokens[: tokens.index(eos)] if eos in tokens else tokens


def onnx_search(bundle: Path, source: list[int], beam: int, max_new: int, forced: int | None = None,
                suppress: tuple[int, ...] = ()) -> list[int]:
    """The best hypothesis (tokens after the decoder start, without eos) of one source."""
    manifest = json.loads((bundle / names.BUNDLE_FILE).read_text(encoding="utf-8"))
    special, start = manifest["special_tokens"], manifest["generation"]["decoder_start_id"]
    eos, pad = special["eos"], special["pad"]
    enc, dec = (open_session(bundle / f) for f in (names.ENCODER_FILE, names.DECODER_FILE))
    kv_cache = kv_cache_of(dec)
    src = right_pad([source] * beam, pad)
    src_mask = (src != pad).astype(np.int64)
    cross = enc.run(None, {names.INPUT_IDS: src, names.ATTENTION_MASK: src_mask})
    past = empty_cache(kv_cache, cross, max_new)
    bound = BoundCache(dec, past) if kv_cache == "inplace" else None
    scores = np.full(beam, -np.inf, np.float32)
    scores[0] = 0.0
    tokens = np.full((beam, 1), start, np.int64)
    finished = np.zeros(beam, bool)
    n = len(cross) // 2
    for step in range(max_new):
        feeds = step_feeds(kv_cache, tokens[:, -1:], step, src_mask, past, cross)
        if bound is not None:
            logp = bound.run(feeds)[:, -1].astype(np.float32)
        else:
            out = dec.run([names.LOGPROBS, *names.self_cache_io(n).values()], feeds)
            logp, past = out[0][:, -1].astype(np.float32), out[1:]
        logp[:, list(suppress)] = -np.inf
        if step == 0 and forced is not None:
            logp[:] = -np.inf
            logp[:, forced] = 0.0
        logp[finished] = -np.inf
        logp[finished, pad] = 0.0
        cand = (scores[:, None] + logp).reshape(-1)
        top = np.argsort(-cand, kind="stable")[:beam]
        parent, word = top // logp.shape[1], top % logp.shape[1]
        scores = cand[top]
        tokens = np.concatenate([tokens[parent], word[:, None]], axis=1)
        finished = finished[parent] | (word == eos)
        if bound is not None:  # the bound buffers are the cache: reorder their rows in place
            for buf in bound.buffers:
                buf[:] = buf[parent]
        else:
            past = [p[parent] for p in past]
        if finished.all():
            break
    return cut(tokens[int(np.argmax(scores)), 1:].tolist(), eos)


class FrozenFinished:
    """A logits processor: a row that has emitted eos after its first `prompt` tokens gets only pad, at 0."""

    def __init__(self, eos: int, pad: int, prompt: int = 1) -> None:
        self.eos, self.pad, self.prompt = eos, pad, prompt

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Scores (rows, V) after log-softmax."""
        done = (input_ids[:, self.prompt :] == self.eos).any(dim=-1)
        scores[done] = float("-inf")
        scores[done, self.pad] = 0.0
        return scores


def generate(model: Any, sources: list[list[int]], beam: int, max_new: int, forced: int | None = None,
             rules: Mapping[str, Any] | None = None, **outputs: Any) -> Any:
    """transformers' generate of right-padded sources, searching as `onnx_search` does (module doc), with
    generation `rules` (bad_words_ids, forced_eos_token_id, renormalize_logits, ...) and `outputs`
    (return_dict_in_generate, output_scores, ...) as generate's settings; nothing else inherited."""
    from transformers import GenerationConfig, LogitsProcessorList

    cfg = model.config
    eos, pad = cfg.eos_token_id, cfg.pad_token_id
    model.generation_config = GenerationConfig(  # nothing inherited from the checkpoint's defaults
        decoder_start_token_id=cfg.decoder_start_token_id, pad_token_id=pad,
        eos_token_id=eos if beam == 1 else None)
    settings = GenerationConfig(
        num_beams=beam, do_sample=False, max_new_tokens=max_new, length_penalty=0.0,
        forced_bos_token_id=forced, decoder_start_token_id=cfg.decoder_start_token_id, pad_token_id=pad,
        eos_token_id=eos if beam == 1 else None, **dict(rules or {}), **outputs)
    processors = LogitsProcessorList([FrozenFinished(eos, pad)] if beam > 1 else [])
    src = torch.from_numpy(right_pad(sources, pad))
    with torch.no_grad():
        return model.generate(input_ids=src, attention_mask=(src != pad).long(), generation_config=settings,
                              logits_processor=processors)


def hf_search(model: Any, sources: list[list[int]], beam: int, max_new: int, forced: int | None = None,
              suppress: tuple[int, ...] = ()) -> list[list[int]]:
    """The best hypothesis of `generate`, `suppress` ids as its bad_words_ids."""
    rules = {"bad_words_ids": [[s] for s in suppress]} if suppress else None
    out = generate(model, sources, beam, max_new, forced, rules)
    return [cut(row[1:].tolist(), eos=model.config.eos_token_id) for row in out]


def hf_scored_search(model: Any, sources: list[list[int]], beam: int, max_new: int,
                     rules: Mapping[str, Any] | None = None) -> list[tuple[list[int], float]]:
    """The best hypothesis of `generate` with `rules`, and its score: beam search's sequences_scores (the
    processed log-probs summed, length_penalty 0); for greedy, the chosen tokens' processed scores
    log-softmaxed and summed up to eos (with renormalize_logits they are log-probs already, and a
    forced token's is 0)."""
    eos = model.config.eos_token_id
    out = generate(model, sources, beam, max_new, None, rules, return_dict_in_generate=True,
                   output_scores=True)
    found = []
    for i, row in enumerate(out.sequences):
        tokens = row[1:].tolist()
        if beam > 1:
            found.append((cut(tokens, eos), float(out.sequences_scores[i])))
            continue
        n = tokens.index(eos) + 1 if eos in tokens else len(tokens)
        logp = [torch.log_softmax(out.scores[t][i], -1)[tokens[t]] for t in range(n)]
        found.append((cut(tokens, eos), float(sum(logp))))
    return found
