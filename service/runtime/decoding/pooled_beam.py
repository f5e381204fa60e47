"""Beam search as transformers' `generate` does it (num_beams > 1, do_sample False), for one request.

Imported checkpoints (bundle.json `generation.beam_search` "transformers", interface/generation.py) decode
with it, so that a served translation is the one transformers' pipeline gives. It differs from `BeamSearch`
(service/runtime/decoding/search.py, GNMT-style: a finished beam stays in the beam, frozen) in every rule that
matters; those of transformers 5's generation/utils.py `_beam_search`, per source:

- running beams start as k copies of the decoder's input, scored [0, -1e9, ...] (only the first one's
  continuations count at first); each step takes the best 2k continuations over all running beams
  (score: the running sum of the processed log-probs, float32), best first;
- a continuation "hits a stopping criterion" when its token is eos or when it is the last token
  max_output_tokens allows. Those among the best k enter the pool of finished hypotheses with the score
  sum / generated_len ** length_penalty (generated_len counts the tokens after the prompt, eos
  included); the pool keeps its k best (the others get -1e9 added, never in it);
- the best k continuations that did not hit one (a hit one gets -1e9 added) are the next running
  beams: the rows of the batch, reordered by the parents `advance` returns;
- the search stops when nothing can improve the pool: the best running beam's score divided by
  generated_len ** length_penalty (early_stopping "never" with length_penalty > 0: by the longest
  length max_output_tokens allows) is no better than the worst pooled score and the pool is full;
  with early_stopping True as soon as the pool holds k hypotheses; when every continuation hit a
  criterion (max_output_tokens reached).

The arithmetic is transformers' own, in float32 (the -1e9 penalties included), so that ties and roundings fall
the same way. Ties between equal scores go to the lower index (torch.topk does not say; exact ties between
real scores do not happen in practice).

A prompt (tokens forced as a target prefix: transformers gets them as decoder_input_ids) is taken as it is,
one token per step from the request's forced tokens, without scoring: it counts in our max_output_tokens but
not in generated_len; a forced first token alone (M2M100's target language, ForcedBOSTokenLogitsProcessor) is
generated, with the log-probs the rules made (0 at the token). `options.length_penalty` is transformers'
length_penalty (None: its default 1.0). The hypotheses' `score` is generate's sequences_scores; `log_prob` the
sum of the processed log-probs of the generated tokens.
"""

from __future__ import annotations

import numpy as np

from service.domain.types import FinishReason, ResolvedOptions
from service.runtime.decoding.search import BeamSearch, RawHypothesis
from service.runtime.decoding.topk import top

NEG = np.float32(-1.0e9)  # transformers' "never this one" score offset
DEFAULT_LENGTH_PENALTY = 1.0  # transformers' GenerationConfig default


class PooledBeamSearch(BeamSearch):
    """transformers' beam search over the k rows of one request (module doc).

    A BeamSearch to the batch: the same constructor, `advance`, `done`, `at_limit` and `results`; the
    rows are the running beams, reordered by the returned parents; finished hypotheses live in a pool
    off the rows.
    """

    def __init__(self, options: ResolvedOptions, src_len: int, eos: int, pad: int,
                 eos_at_limit: bool = False, *, prompt: int = 0, early_stopping: bool | str = False) -> None:
        k, t = options.beam_size, options.max_output_tokens
        if not (isinstance(early_stopping, bool) or early_stopping == "never"):
            raise ValueError(f"early_stopping must be true, false or 'never', got {early_stopping!r}")
        if not 0 <= prompt <= len(options.forced) or prompt >= t:
            raise ValueError(f"prompt must be between 0 and the {len(options.forced)} forced tokens, and "
                             f"below max_output_tokens {t}; got {prompt}")
        self.options, self.eos, self.pad, self.src_len = options, eos, pad, src_len
        self.eos_at_limit, self.prompt, self.early_stopping = eos_at_limit, prompt, early_stopping
        given = options.length_penalty
        self.length_penalty = DEFAULT_LENGTH_PENALTY if given is None else float(given)
        self.steps = 0  # tokens so far, the prompt included (transformers' cur_len - 1)
        align = options.return_alignment
        # running beams: the batch's rows
        self.tokens = np.full((k, t), pad, np.int64)
        self.scores = np.full(k, NEG, np.float32)
        self.scores[0] = 0.0
        self.attn = np.zeros((k, t, src_len), np.float32) if align else None
        # the pool of finished hypotheses, best first
        self.pool_tokens = np.full((k, t), pad, np.int64)
        self.pool_scores = np.full(k, NEG, np.float32)  # sequences_scores
        self.pool_sums = np.zeros(k, np.float32)  # the processed log-probs summed
        self.pool_lengths = np.zeros(k, np.int64)  # tokens, the prompt and the last one included
        self.pool_finished = np.zeros(k, bool)
        self.pool_attn = np.zeros((k, t, src_len), np.float32) if align else None
        self.improvable = True  # transformers' is_early_stop_heuristic_unsatisfied
        self.stopped = False

    @property
    def done(self) -> bool:
        """Nothing can improve the pool, or max_output_tokens reached."""
        return self.stopped or self.steps >= self.options.max_output_tokens

    @property
    def at_limit(self) -> bool:
        """The next token is the last one max_output_tokens allows."""
        return self.steps == self.options.max_output_tokens - 1

    def advance(self, logp: np.ndarray, attn: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Consume logp (k, V) of this step (the processed log-probs of the running beams' rows) and their
        cross-attention (k, S); returns (the parent row of each next row (k,), the next tokens (k,))."""
        k, v = logp.shape
        t = self.steps
        if t < self.prompt:  # a prompt token: every row takes it, nothing is scored
            word = np.full(k, self.options.forced[t], np.int64)
            self.tokens[:, t] = word
            if self.attn is not None and attn is not None:
                self.attn[:, t] = attn[:, : self.src_len]
            self.steps += 1
            return np.arange(k), word
        cand = (logp.astype(np.float32, copy=False) + self.scores[:, None]).reshape(-1)
        best = top(cand, 2 * k)  # beams_to_keep: max(2, 1 + one eos id) * num_beams
        sums = cand[best]
        parent, word = best // v, best % v
        hits = (word == self.eos) | (t + 1 >= self.options.max_output_tokens)
        # the next running beams: the best k that hit no criterion
        running = sums + hits.astype(np.float32) * NEG
        keep = top(running, k)
        # the pool: the ones among the best k that hit one, scored with the length penalty
        entering = hits.copy()
        entering[k:] = False
        scored = sums / np.float32((t + 1 - self.prompt) ** self.length_penalty)
        if self.early_stopping is True and self.pool_finished.all():
            scored = scored + NEG
        if not self.improvable:
            scored = scored + NEG
        scored = scored + (~entering).astype(np.float32) * NEG
        self._merge(scored, sums, entering, parent, word, attn)
        # the rows go on with the kept continuations
        self.tokens = self.tokens[parent[keep]]
        self.tokens[:, t] = word[keep]
        if self.attn is not None and attn is not None:
            self.attn = self.attn[parent[keep]]
            self.attn[:, t] = attn[parent[keep], : self.src_len]
        self.scores = running[keep]
        self.steps += 1
        self._check_stop(bool(hits.all()))
        return parent[keep], word[keep]

    def _merge(self, scored: np.ndarray, sums: np.ndarray, entering: np.ndarray, parent: np.ndarray,
               word: np.ndarray, attn: np.ndarray | None) -> None:
        """The pool's k best of itself and this step's 2k scored continuations (before the rows move on)."""
        k, t = len(self.pool_scores), self.steps
        pick = top(np.concatenate([self.pool_scores, scored]), k)
        old, new = pick[pick < k], pick[pick >= k] - k
        if not len(new):
            return  # the pool keeps its order: nothing new ranks in it
        place = np.flatnonzero(pick >= k)  # where the new ones go, the old ones keep their order around them
        kept = np.flatnonzero(pick < k)
        tokens = np.empty_like(self.pool_tokens)
        tokens[kept] = self.pool_tokens[old]
        tokens[place] = self.tokens[parent[new]]
        tokens[place, t] = word[new]
        self.pool_tokens = tokens
        if self.pool_attn is not None and self.attn is not None:
            pool_attn = np.empty_like(self.pool_attn)
            pool_attn[kept] = self.pool_attn[old]
            pool_attn[place] = self.attn[parent[new]]
            if attn is not None:
                pool_attn[place, t] = attn[parent[new], : self.src_len]
            self.pool_attn = pool_attn
        for name, values in (("pool_scores", scored), ("pool_sums", sums), ("pool_finished", entering),
                             ("pool_lengths", np.full(len(scored), t + 1, np.int64))):
            merged = np.empty_like(getattr(self, name))
            merged[kept] = getattr(self, name)[old]
            merged[place] = values[new]
            setattr(self, name, merged)

    def _check_stop(self, all_hit: bool) -> None:
        """After a step: transformers' _check_early_stop_heuristic, then whether the search goes on."""
        lp, done = self.length_penalty, self.pool_finished
        if self.early_stopping == "never" and lp > 0.0:
            longest = self.options.max_output_tokens - self.prompt
        else:
            longest = self.steps - self.prompt
        best = self.scores[0] / np.float32(longest ** lp)
        worst = np.where(done, self.pool_scores.min(), NEG)
        self.improvable = self.improvable and bool((best > worst).any())
        open_beam = not (done.all() and self.early_stopping is True)
        self.stopped = not (self.improvable and open_beam and not all_hit)

    def results(self) -> list[RawHypothesis]:
        """The n best hypotheses of the pool, best first (as generate's num_return_sequences)."""
        hyps = []
        for j in np.flatnonzero(self.pool_finished)[: self.options.n_best]:
            n = int(self.pool_lengths[j])
            tokens = self.pool_tokens[j, :n].tolist()
            ended = n > self.prompt and tokens[-1] == self.eos
            body = tokens[:-1] if ended else tokens
            align = self.pool_attn[j, : len(body)].copy() if self.pool_attn is not None else None
            limited = not ended or (self.eos_at_limit and n == self.options.max_output_tokens)
            reason = FinishReason.LENGTH if limited else FinishReason.EOS
            score = float(self.pool_scores[j])
            hyps.append(RawHypothesis(body, float(self.pool_sums[j]), score, reason, align))
        return hyps
