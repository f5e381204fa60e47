"""Iteration-level decode engine: a DecodeBatch of requests that share one decoder run per step.

Synchronous and transport-agnostic: `add()` runs the encoder for new requests, `step()` runs the decoder once
for every active row and returns events, `cancel()` drops a request. The none/dynamic/continuous schedulers
differ only in when they call these.

Rows. The batch has `n_rows <= max_rows` rows and every decoder run covers all of them. A request holds
`options.rows` rows (any rows, not necessarily adjacent); one with required phrases gives back half of them
when one of its two searches ends (plain_first.py). When a request leaves, its rows become holes: still
computed (masked, output ignored) until a new request reuses them. Holes at the end are trimmed (a view, no
copy); when holes are at least half of the rows, the live rows are compacted with one gather. Other rows'
caches are never copied when one leaves.

Caches (service/runtime/cache/kvcache.py), in the layout of the bundle's decoder: the self-attention cache,
reordered in place for beam search (a beam keeps its parent's row; only a parent's later children are
copied: rows.py `inherit`), and the cross-attention K/V `CrossCache`, in the first columns of a source
axis S >= the longest source present, written once when a request joins and repeated over its beam rows. A
concat decoder masks the source (S grows with a longer source and shrinks, one copy, when it would drop by >=
1/4); an in-place decoder takes each row's source length and computes nothing beyond it, so S is a power of
two >= 64 that only grows. Masked entries are always finite and column 0 of every row's source is valid, so no
NaN leaks through a mask. Requests added together are encoded in groups of similar length
(service/runtime/decoding/encode_groups.py).

Controls. Between the decoder and the searches, each step's log-probs get the requests' forced tokens,
controls and the bundle's rules (service/runtime/decoding/controls.py, rules.py), on the rows that ask for
them; a sampling row draws its token (sampling.py)."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from interface.names import INPUT_IDS, past_name, self_cache_io
from service.domain.errors import BatchFull, InvalidInput
from service.domain.types import Event, FinishedEvent, Hypothesis, Request, TokenEvent
from service.runtime.cache.backends import Backend
from service.runtime.cache.devicemem import CacheTensor
from service.runtime.cache.kvcache import ConcatCache, CrossCache, InplaceCache
from service.runtime.decoding import controls, sampling
from service.runtime.decoding.active import ActiveRequest, StepGroups
from service.runtime.decoding.encode_groups import BY_LENGTH, EncodeGrouping, rows_by_group
from service.runtime.decoding.rows import RowState, inherit
from service.runtime.decoding.search import AlternativesSearch
from service.runtime.decoding.spec import ModelSpec
from service.runtime.model.tokenization import TextTokenizer


class DecodeBatch:
    """Active requests in rows of a shared KV cache, advanced one decoder step at a time.

    Not thread-safe: one scheduler thread calls add / step / cancel. Different DecodeOptions
    per request are fine; a request takes beam_size of the max_rows rows.
    """

    def __init__(self, spec: ModelSpec, backend: Backend, tokenizer: TextTokenizer,
                 max_rows: int = 64, grouping: EncodeGrouping = BY_LENGTH) -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        self.spec, self.max_rows, self._be, self._tokenizer = spec, max_rows, backend, tokenizer
        self.grouping = grouping  # which new requests share an encoder run (encode_groups.py)
        n = spec.n_decoder_layers
        self._heads, self._d_head, self._dtype = spec.n_heads, spec.d_head, spec.cache_dtype
        self._self_names = list(self_cache_io(n))
        self._source_lengths = spec.kv_cache == "inplace"  # else a source mask (interface/names.py)
        shape = (self._be, len(self._self_names), self._heads, self._d_head, self._dtype)
        self._cache: ConcatCache | InplaceCache = (
            InplaceCache(*shape, spec.max_len, max_rows) if self._source_lengths
            else ConcatCache(*shape, spec.max_len)
        )
        self._cross_names = [past_name(i, "encoder", kv) for i in range(n) for kv in ("key", "value")]
        self._cross = CrossCache(self._be, len(self._cross_names), self._heads, self._d_head, self._dtype,
                                 max_rows, self._source_lengths, spec.max_len)
        self._active: dict[Request, ActiveRequest] = {}
        self._rows = RowState(spec.special.pad, spec.max_len)  # host-side state of each row (rows.py)
        self._reset()

    # ----- public state -------------------------------------------------------------------
    @property
    def requests(self) -> list[Request]:
        """Requests currently decoding, in arrival order."""
        return list(self._active)

    def __len__(self) -> int:
        """Number of active requests."""
        return len(self._active)

    @property
    def used_rows(self) -> int:
        """Rows held by active requests (the live rows)."""
        return int(np.count_nonzero(self._rows.live))

    @property
    def tokens(self) -> int:
        """Tokens the active rows hold: source plus decoded so far, summed over rows (beams included)."""
        live = self._rows.live
        return int(self._rows.src[live].sum() + self._cache.filled()[live].sum())

    @property
    def free_rows(self) -> int:
        """Rows still available for new requests."""
        return self.max_rows - self.used_rows

    @property
    def shape(self) -> tuple[int, int, int]:
        """(rows incl. holes, self-attention cache length L, padded source length S)."""
        return len(self._rows.live), self._cache.length, self._cross.src

    def rows_of(self, request: Request) -> list[int]:
        """Row indices held by a request (empty if not active)."""
        a = self._active.get(request)
        return [] if a is None else a.rows.tolist()

    # ----- requests in and out ------------------------------------------------------------
    def add(self, requests: Request | Sequence[Request]) -> None:
        """Encode new requests (all at once) and give each beam_size free rows; all or nothing."""
        reqs = [requests] if isinstance(requests, Request) else list(requests)
        if not reqs:
            return
        if len({id(r) for r in reqs}) != len(reqs) or any(r in self._active for r in reqs):
            raise ValueError("a request can be added to a batch only once")
        opts = [self.spec.check_request(r).limited_to(len(r.source)) for r in reqs]
        for r, o in zip(reqs, opts, strict=True):
            if o.rows > self.max_rows:
                raise InvalidInput(f"request {r.id}: {o.rows} rows (beam_size, or n_best alternatives) "
                                   f"exceed the batch size {self.max_rows}")
        need = sum(o.rows for o in opts)
        if need > self.free_rows:
            raise BatchFull(f"{need} rows needed, {self.free_rows} free of {self.max_rows}")
        encoded = self.grouping.encode(lambda src: self._be.encode(self.spec.encoder_feeds(src)),
                                       [r.source for r in reqs])  # may raise: nothing changed
        rows = self._allocate([o.rows for o in opts])
        self._fit_src(self._cross.axis_for(max(len(r.source) for r in reqs)))
        owner = np.repeat(np.arange(len(reqs)), [len(rr) for rr in rows])  # request of each new row
        new = np.concatenate(rows)
        lengths = np.array([len(r.source) for r in reqs], np.int64)[owner]
        for rows_of_group, enc, local_owner in rows_by_group(encoded, new, owner):
            self._cross.write(rows_of_group, enc, local_owner)  # a request's K/V repeated over its beam rows
        self._cache.start(new)
        self._rows.start(new, lengths, self.spec.decoder_start)
        eos, pad, limit = self.spec.special.eos, self.spec.special.pad, self.spec.rules.eos_at_limit
        for r, o, rr in zip(reqs, opts, rows, strict=True):
            n = len(r.source)
            search = self.spec.new_search(o, n)  # greedy, or the bundle's beam search (spec.py)
            if o.return_alternatives:
                search = AlternativesSearch(o, n, eos, pad, limit)
            self._active[r] = ActiveRequest(r, o, rr, search, self._tokenizer.stream() if o.stream else None,
                                      sampling.generator(o) if o.sampling else None)
        self._rows_changed()

    def cancel(self, request: Request) -> bool:
        """Drop a request and free its rows; False if it was not in the batch."""
        act = self._active.pop(request, None)
        if act is None:
            return False
        self._free(act.rows)
        self._tidy()
        return True

    def clear(self) -> list[Request]:
        """Drop every request (e.g. after a failed step); returns them."""
        dropped = list(self._active)
        self._active.clear()
        self._reset()
        return dropped

    # ----- one decoder run ----------------------------------------------------------------
    def step(self) -> list[Event]:
        """One decoder step for all rows: token events, then finished results. If the run raises (the
        backend's fault hook included), the batch is left unchanged."""
        if not self._active:
            return []
        feeds, past = self._run_inputs()
        events: list[Event] = []
        logp, attn, present, norm = self._be.decode(feeds, past, self._cache.inplace)
        logp, attn = logp[:, -1].astype(np.float32, copy=False), attn[:, -1]  # (n_rows, V), (n_rows, S)
        norm = None if norm is None else norm[:, -1]  # (n_rows,): logits - logp (None: an older bundle)
        self._process(logp, norm)
        self._cache.advance(present, self._rows.live)
        groups = self._searches()
        greedy, beams = groups.greedy, groups.beams
        done = self._advance_greedy(greedy, groups.greedy_rows, logp, attn, events) if greedy else []
        done += self._advance_beams(beams, logp, attn) if beams else []
        released = self._release(groups.halves) if groups.halves else False
        events += [self._finish(a) for a in done]
        if done or released:  # holes, droppable columns and a shorter source axis only appear when rows leave
            self._tidy()
        return events

    def _run_inputs(self) -> tuple[dict[str, np.ndarray], dict[str, CacheTensor]]:
        """The next run's feeds and past by input name: built again when rows or S change or a cache
        replaces an array, else the same two dicts as the last run's (the arrays are rewritten in place)."""
        parts = (self._cache.feeds(), self._cache.past(), self._cross.tensors())
        if self._inputs is None or any(map(operator.is_not, parts, self._inputs_of)):
            lengths, past, cross = parts
            source = self._cross.feeds(self._rows.live, self._rows.src)  # source mask, or lengths - 1 and S
            named = dict(zip(self._self_names, past, strict=True))
            named.update(zip(self._cross_names, cross, strict=True))
            feeds = {INPUT_IDS: self._rows.next[:, None], **lengths, **source}
            self._inputs, self._inputs_of = (feeds, named), parts
        return self._inputs

    def _process(self, logp: np.ndarray, normalizer: np.ndarray | None) -> None:
        """This step's log-probs made what the searches must see, in place (they are this step's own: a new
        array, or the buffer the next run overwrites): requests' controls, forced tokens and the bundle's
        rules (service/runtime/decoding/controls.py, rules.py)."""
        rules, groups = self.spec.rules, self._searches()
        last = [a.rows for a in self._active.values() if a.search.at_limit] if rules.eos_at_limit else []
        if groups.controlled is not None or groups.forcing or last or rules.every_step:
            special = self.spec.special
            controls.process(logp, normalizer, groups.controlled, groups.forcing, self._rows.history,
                             special.eos, special.unk, rules, last)

    def _rows_changed(self) -> None:
        """Requests, rows or S changed: drop what is derived from them (rebuilt when next needed)."""
        self._groups = self._inputs = None

    def _searches(self) -> StepGroups:
        """The active requests grouped by what a step does with them; cached until requests or rows change."""
        if self._groups is None:
            self._groups = StepGroups.of(list(self._active.values()), len(self._rows.live),
                                         bool(self.spec.rules.begin_suppress))
        return self._groups

    def _advance_greedy(
        self, greedy: list[ActiveRequest], rows: np.ndarray | slice, logp: np.ndarray, attn: np.ndarray,
        events: list[Event]
    ) -> list[ActiveRequest]:
        """Argmax and float32 log-prob sums of all greedy rows at once, then each request's tokens;
        returns the finished."""
        picked = logp[rows]  # (G, V); a view when rows is a slice
        tokens = picked.argmax(axis=-1)
        for i in self._searches().sampling:
            a = greedy[i]
            tokens[i] = sampling.draw(*sampling.candidates(picked[i], a.options), a.rng)
        return self._consume(greedy, rows, tokens, picked[np.arange(len(tokens)), tokens], attn, events)

    def _consume(self, greedy: list[ActiveRequest], rows: np.ndarray | slice, tokens: np.ndarray,
                 chosen: np.ndarray, attn: np.ndarray, events: list[Event]) -> list[ActiveRequest]:
        """Each greedy request's chosen token, its log-prob summed in float32; returns the finished."""
        self._rows.score[rows] += chosen
        self._rows.next[rows] = tokens
        if self._searches().history:
            self._rows.history.append(rows, tokens)
        eos, done = self.spec.special.eos, []
        for a, t in zip(greedy, tokens.tolist(), strict=True):
            search = a.search
            if search.advance(t, None if search.attn is None else attn[a.rows[0]]):
                search.log_prob = self._rows.score[a.rows[0]]
                done.append(a)
            if a.stream is not None and t != eos:
                events.append(TokenEvent(a.request, t, a.stream(t)))
        return done

    def _advance_beams(self, beams: list[ActiveRequest], logp: np.ndarray, attn: np.ndarray
                       ) -> list[ActiveRequest]:
        """Top-k step of each beam request (or alternatives): each beam moves into its parent's row, or
        (a parent's second child on) is copied into a row no beam follows (rows.py `inherit`), all copies in
        one in-place gather; returns the finished."""
        dst, src, words = [], [], []
        for a in beams:
            align = attn[a.rows] if a.options.return_alignment else None
            parent, word = a.search.advance(logp[a.rows], align)
            a.rows, into, out_of = inherit(a.rows, parent)  # the same rows in the next beams' order
            self._rows.next[a.rows] = word
            words.append(word)
            if len(into):
                dst.append(into)
                src.append(out_of)
        if dst:
            dst, src = np.concatenate(dst), np.concatenate(src)
            self._cache.reorder(dst, src)
            self._rows.history.reorder(dst, src)
        if self._searches().history:
            self._rows.history.append(np.concatenate([a.rows for a in beams]), np.concatenate(words))
        return [a for a in beams if a.search.done]

    def _release(self, requests: list[ActiveRequest]) -> bool:
        """Free the rows that these requests' searches gave back this step (a half that ended:
        plain_first.py), the others keeping their order; a finished request's all go in _finish. Whether
        any rows were freed."""
        freed = False
        for a in requests:
            gone = a.search.released
            if len(gone) and not a.search.done:
                self._free(a.rows[gone])
                a.rows = np.delete(a.rows, gone)
                freed = True
        return freed

    def _finish(self, act: ActiveRequest) -> FinishedEvent:
        """Remove a finished request and build its hypotheses."""
        del self._active[act.request]
        self._free(act.rows)
        detok = self._tokenizer.decode
        return FinishedEvent(act.request, [
            Hypothesis(h.tokens, detok(h.tokens), h.log_prob, h.score, h.finish_reason,
                       None if h.alignment is None else h.alignment.tolist(), h.unmet)
            for h in act.search.results()])

    # ----- cache bookkeeping --------------------------------------------------------------
    def _reset(self) -> None:
        """Empty cache: no rows, L = 0, S = 0."""
        self._rows.reset()
        self._cache.reset()
        self._cross.reset(keep_src=self._source_lengths)
        self._groups: StepGroups | None = None
        self._inputs: tuple[dict[str, np.ndarray], dict[str, CacheTensor]] | None = None  # _run_inputs
        self._inputs_of: tuple = ()  # the cache's arrays and dicts the inputs were built from

    def _allocate(self, sizes: list[int]) -> list[np.ndarray]:
        """Rows for each request: holes first, then new rows at the end."""
        holes = np.flatnonzero(~self._rows.live).tolist()
        total = sum(sizes)
        extra = max(0, total - len(holes))
        first_new = len(self._rows.live)
        if extra:
            self._grow(extra)
        pool = iter(holes[:total] + list(range(first_new, first_new + extra)))
        return [np.array([next(pool) for _ in range(k)], np.int64) for k in sizes]

    def _grow(self, k: int) -> None:
        """Append k empty rows to every row-indexed tensor (the caches copy only when full)."""
        self._cache.grow(k)
        self._cross.grow(k)
        self._rows.grow(k)
        self._rows_changed()

    def _fit_src(self, s: int) -> None:
        """Zero-pad (s > S) or cut (s < S) the source axis of the cross K/V and its mask."""
        if s == self._cross.src:
            return
        self._cross.fit_src(s)
        self._rows_changed()

    def _free(self, rows: np.ndarray) -> None:
        """Turn rows a request gave up into holes (their old columns are masked for any next owner)."""
        self._rows.free(rows)
        self._rows_changed()
        self._cache.free(rows)

    def _tidy(self) -> None:
        """Trim trailing holes, compact rows / columns / source axis when enough is wasted."""
        if not self._active:
            self._reset()
            return
        live = np.flatnonzero(self._rows.live)
        n = int(live[-1]) + 1  # rows after the last live one are trailing holes
        if 2 * (n - len(live)) >= n:
            self._keep_rows(live)
        elif n < len(self._rows.live):
            self._keep_rows(slice(0, n))
        self._cache.tidy(self._rows.live)
        longest = int(self._rows.src[self._rows.live].max())
        if not self._source_lengths and 4 * (self._cross.src - longest) >= self._cross.src:
            self._fit_src(longest)

    def _keep_rows(self, keep: np.ndarray | slice) -> None:
        """Keep only the given rows (a prefix slice is a view; an index array gathers)."""
        before = len(self._rows.live)
        old = np.arange(before)[keep]
        self._cache.keep(keep, self._rows.live)
        self._cross.keep(keep)
        self._rows.keep(keep)
        new_index = np.full(before, -1, np.int64)
        new_index[old] = np.arange(len(old))
        for a in self._active.values():
            a.rows = new_index[a.rows]
        self._rows_changed()

