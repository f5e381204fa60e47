"""A request's decoding controls on each step's log-probs, vectorised over the rows of a batch that ask for
them: repetition penalty, no repeated n-grams, suppressed sequences, the unknown token, a minimum length
and the bundle's begin-suppressed ids (service/domain/options.py says what each option means).

The processors are transformers' logits processors, in its order (generation/utils.py
`_get_logits_processor`): RepetitionPenalty, NoRepeatNGram, NoBadWords, MinLength, then the bundle's
rules (service/runtime/decoding/rules.py: suppressed ids, a forced token, eos at the limit,
       renormalization) and,
for sampling rows, the warpers (service/runtime/decoding/sampling.py). Each works on what transformers' search
hands it: raw logits for greedy and sampling rows, log-probs for beam rows. The decoder gives log-probs
and, in bundles that have it, the log-normalizer c of each row (logits = logp + c), so a greedy row's
penalty is applied to logp + c exactly and the row is normalized again (its log-probs stay
log-probs); a bundle without the normalizer penalizes the log-probs (c = 0). Every other processor
only sets log-probs to -inf, which is the same on logits and on log-probs.

A row's history is what transformers calls input_ids: the decoder start, then every token generated
(a target prefix and a forced target language included), kept per row by `TokenHistory`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from service.domain.types import ResolvedOptions
from service.runtime.decoding.rules import StepRules

Controlled = tuple[np.ndarray, ResolvedOptions, bool]  # a request's rows, options, greedy (or sampling)


class TokenHistory:
    """Per row: the decoder start and the tokens generated since, in a (rows, max_len + 1) int64 array."""

    def __init__(self, max_len: int) -> None:
        self._cols = max_len + 1
        self.tokens = np.zeros((0, self._cols), np.int64)
        self.length = np.zeros(0, np.int64)  # tokens held (start included); 0 for holes

    def grow(self, k: int) -> None:
        """Append k empty rows."""
        self.tokens = np.concatenate([self.tokens, np.zeros((k, self._cols), np.int64)])
        self.length = np.concatenate([self.length, np.zeros(k, np.int64)])

    def start(self, rows: np.ndarray, token: int) -> None:
        """New requests' rows hold only the decoder start."""
        self.tokens[rows, 0], self.length[rows] = token, 1

    def append(self, rows: np.ndarray | slice, tokens: np.ndarray) -> None:
        """One generated token per row."""
        at = self.length[rows]
        self.tokens[np.arange(len(self.length))[rows], at] = tokens
        self.length[rows] = at + 1

    def reorder(self, dst: np.ndarray, src: np.ndarray) -> None:
        """Rows dst take the histories of rows src (beam search's parents)."""
        self.tokens[dst], self.length[dst] = self.tokens[src], self.length[src]

    def keep(self, keep: np.ndarray | slice) -> None:
        """Only these rows, renumbered."""
        self.tokens, self.length = self.tokens[keep], self.length[keep]

    def generated(self, row: int) -> int:
        """Tokens a row generated so far."""
        return int(self.length[row]) - 1

    def padded(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(R, L) histories of these rows up to their longest, and their lengths; the padding repeats each
        row's decoder start (a token already in the row, so gathers and scatters over it are harmless)."""
        length = self.length[rows]
        width = int(length.max(initial=1))
        out = self.tokens[rows, :width]
        return np.where(np.arange(width)[None, :] >= length[:, None], out[:, :1], out), length


@dataclass(frozen=True)
class RowGroup:
    """The controlled rows of a batch, per row: options, and whether a processor sees logits (greedy and
    sampling rows: transformers processes raw logits there) or log-probs (beam); with each control's
    rows and values gathered once (the batch keeps the group until requests or rows change)."""

    rows: np.ndarray
    options: Sequence[ResolvedOptions]  # per row
    logits: np.ndarray  # bool per row

    def __post_init__(self) -> None:
        opts = self.options
        penalty = np.array([o.repetition_penalty for o in opts], np.float64)
        sizes = np.array([o.no_repeat_ngram_size for o in opts], np.int64)
        derived = {
            "penalized": np.flatnonzero(penalty != 1.0), "penalty": penalty,
            "ngram": np.flatnonzero(sizes > 0), "sizes": sizes,
            "suppressing": [i for i, o in enumerate(opts) if o.suppress_sequences],
            "min_output_tokens": np.array([o.min_output_tokens for o in opts], np.int64),
            "no_unk": self.rows[[o.disable_unk for o in opts]] if len(opts) else self.rows,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, controlled: Sequence[Controlled]) -> RowGroup | None:
        """The group of these requests (rows, options, greedy), None when there are none."""
        if not controlled:
            return None
        return cls(np.concatenate([r for r, _, _ in controlled]), [o for r, o, _ in controlled for _ in r],
                   np.concatenate([np.full(len(r), greedy) for r, _, greedy in controlled]))


def repetition_penalty(logp: np.ndarray, normalizer: np.ndarray | None, rows: np.ndarray, penalty: np.ndarray,
                       on_logits: np.ndarray, history: TokenHistory) -> None:
    """transformers' RepetitionPenaltyLogitsProcessor on these rows, in place: each token already in a row's
    history gets score * p if negative else score / p. Rows on logits are penalized as logits (logp + c)
    and normalized again; the others as log-probs (always negative: * p)."""
    hist, _ = history.padded(rows)
    c = np.zeros(len(rows), np.float64) if normalizer is None else normalizer[rows].astype(np.float64)
    c = np.where(on_logits, c, 0.0)
    old = logp[rows[:, None], hist].astype(np.float64)  # (R, L) log-probs of history tokens
    score = old + c[:, None]
    p = penalty[:, None]
    new = np.where(score < 0, score * p, score / p) - c[:, None]
    logp[rows[:, None], hist] = new.astype(np.float32)
    if not on_logits.any():
        return
    order = np.argsort(hist, axis=1)  # each distinct token once: the row's mass moves by exp(new) - exp(old)
    ranked = np.take_along_axis(hist, order, axis=1)
    first = np.ones_like(hist, bool)
    first[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
    with np.errstate(under="ignore"):
        change = np.exp(np.take_along_axis(new, order, axis=1))
        change -= np.exp(np.take_along_axis(old, order, axis=1))
    total = np.maximum(1.0 + np.where(first, change, 0.0).sum(axis=1), np.finfo(np.float64).tiny)
    for row, shift in zip(rows[on_logits].tolist(), np.log(total[on_logits]).tolist(), strict=True):
        logp[row] -= np.float32(shift)  # in place, a row at a time: no copy of the rows' log-probs


def no_repeat_ngrams(logp: np.ndarray, rows: np.ndarray, sizes: np.ndarray, history: TokenHistory) -> None:
    """transformers' NoRepeatNGramLogitsProcessor, in place: a token that would complete an n-gram already
    in the row's history gets -inf."""
    for n in np.unique(sizes):
        group = rows[sizes == n]
        hist, length = history.padded(group)
        if hist.shape[1] < n:
            continue
        if n == 1:  # every token seen is banned
            logp[group[:, None], hist] = -np.inf
            continue
        windows = sliding_window_view(hist, int(n), axis=1)  # (R, L - n + 1, n)
        tail_at = np.maximum(length - (n - 1), 0)[:, None] + np.arange(n - 1)[None, :]
        tail = np.take_along_axis(hist, np.minimum(tail_at, hist.shape[1] - 1), axis=1)  # last n - 1 tokens
        complete = np.arange(windows.shape[1])[None, :] + n <= length[:, None]  # windows inside the history
        match = (windows[:, :, :-1] == tail[:, None, :]).all(axis=-1) & complete
        match &= (length >= n)[:, None]
        r, w = np.nonzero(match)
        logp[group[r], windows[r, w, -1]] = -np.inf


def suppress_sequences(logp: np.ndarray, rows: np.ndarray, sequences: Sequence[tuple[tuple[int, ...], ...]],
                       history: TokenHistory) -> None:
    """transformers' NoBadWordsLogitsProcessor, in place: a sequence's last token gets -inf where the row's
    history ends with the rest of it (always, for a single token)."""
    for row, banned in zip(rows.tolist(), sequences, strict=True):
        n = int(history.length[row])
        seen = history.tokens[row, :n]
        for seq in banned:
            if len(seq) == 1 or (len(seq) - 1 <= n and tuple(seen[n - len(seq) + 1 :]) == seq[:-1]):
                logp[row, seq[-1]] = -np.inf


def apply(logp: np.ndarray, normalizer: np.ndarray | None, group: RowGroup, history: TokenHistory,
          eos: int, unk: int) -> None:
    """Every control of the group's rows on this step's log-probs, in place, in transformers' order
    (the bundle's rules come after: rules.py)."""
    rows, g = group.rows, group
    if len(g.penalized):
        hit = g.penalized
        repetition_penalty(logp, normalizer, rows[hit], g.penalty[hit], g.logits[hit], history)
    if len(g.ngram):
        no_repeat_ngrams(logp, rows[g.ngram], g.sizes[g.ngram], history)
    if g.suppressing:
        hit = g.suppressing
        suppress_sequences(logp, rows[hit], [g.options[i].suppress_sequences for i in hit], history)
    short = rows[history.length[rows] - 1 < g.min_output_tokens]
    if len(short):  # MinLengthLogitsProcessor
        logp[short, eos] = -np.inf
    if len(g.no_unk):
        logp[g.no_unk, unk] = -np.inf


def suppress_at_begin(logp: np.ndarray, rows: np.ndarray, ids: Sequence[int]) -> None:
    """transformers' SuppressTokensAtBeginLogitsProcessor on rows at their first free position, in place."""
    logp[np.asarray(rows)[:, None], np.asarray(ids)[None, :]] = -np.inf


def process(logp: np.ndarray, normalizer: np.ndarray | None, controlled: RowGroup | None,
            forcing: Sequence[tuple[np.ndarray, ResolvedOptions]], history: TokenHistory, eos: int,
            unk: int, rules: StepRules, at_limit: Sequence[np.ndarray]) -> None:
    """One step's log-probs made what the searches must see, in place: the controls of the `controlled`
    rows, then the bundle's rules with the forced tokens of
    `forcing` requests (rows, options: a target language, a prefix) and the begin-suppressed ids at
    their first free position, and eos at `at_limit` rows. Requests in neither list pay nothing here."""
    if controlled is not None:
        apply(logp, normalizer, controlled, history, eos, unk)
    forced, first = [], []
    for rows, options in forcing:
        n, prefix = history.generated(int(rows[0])), options.forced
        if n < len(prefix):
            forced.append((rows, prefix[n]))
        elif n == len(prefix) and rules.begin_suppress:
            first.append(rows)
    if first:
        suppress_at_begin(logp, np.concatenate(first), rules.begin_suppress)
    if forced or at_limit or rules.every_step:
        rules.apply(logp, eos, forced, at_limit)
