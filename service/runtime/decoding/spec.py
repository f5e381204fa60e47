"""What a decode batch needs to know of the model it runs: sizes, special ids, the decoder's start id, the
per-step rules of its bundle, its beam search, cache layout, limits.

Built once by the Runner from the bundle and its open sessions, and handed down to every `DecodeBatch`, which
reads nothing else of the Runner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from interface.names import ATTENTION_MASK, INPUT_IDS
from service.domain.constraints import ConstraintSet
from service.domain.errors import InvalidInput
from service.domain.types import Request, ResolvedOptions
from service.runtime.decoding.constrained_beam import ConstrainedBeamSearch
from service.runtime.decoding.plain_first import PlainFirstSearch
from service.runtime.decoding.pooled_beam import PooledBeamSearch
from service.runtime.decoding.rules import StepRules
from service.runtime.decoding.search import BeamSearch, GreedySearch
from service.runtime.model.bundle import SpecialIds


@dataclass(frozen=True)
class ModelSpec:
    """Shape and vocabulary of a served model, and the layout and dtype of its decoder's KV cache."""

    vocab_size: int  # ids a source may hold: the encoder's vocabulary (the model's source_vocab_size)
    max_len: int  # longest source (incl. eos); at most max_len - 1 generated tokens
    n_decoder_layers: int
    n_heads: int
    d_head: int
    special: SpecialIds
    kv_cache: str  # "concat" or "inplace" (interface/names.py KV_CACHES)
    cache_dtype: type  # numpy float32, or float16 for an fp16 variant
    decoder_start: int  # the decoder's first input: bos, or the bundle's generation.decoder_start_id
    rules: StepRules = StepRules()  # the bundle's suppressed ids, eos at the limit, renormalization
    beam_search: str = "gnmt"  # beam_size > 1: "gnmt" (search.py) or "transformers" (pooled_beam.py)
    early_stopping: bool | str = False  # the "transformers" search's stopping rule

    @property
    def max_output_tokens(self) -> int:
        """The most tokens a translation generates: eos, a forced language and a target prefix counted."""
        return self.max_len - 1

    def new_search(self, options: ResolvedOptions, src_len: int
                   ) -> GreedySearch | BeamSearch | PlainFirstSearch:
        """The search of a request's rows: the constrained beam search beside the plain one when phrases
        are required, else greedy for beam_size 1, else the bundle's beam search; the
        forced tokens are the "transformers" search's prompt when a target prefix is among them
        (transformers gets them as decoder_input_ids, the target language included), else a forced
        target language is generated."""
        eos, pad, limit = self.special.eos, self.special.pad, self.rules.eos_at_limit
        if options.required_phrases:  # any beam_size, 1 included (constrained_beam.py)
            constrained = ConstrainedBeamSearch(options, src_len, eos, pad, limit,
                                                transformers_penalty=self.beam_search == "transformers")
            bare = dataclasses.replace(options, required_phrases=ConstraintSet())
            plain = BeamSearch(bare, src_len, eos, pad, limit) if options.beam_size == 1 else \
                self.new_search(bare, src_len)  # beam 1: greedy, as rows of a beam search
            return PlainFirstSearch(plain, constrained)  # the plain search beside it (plain_first.py)
        if options.beam_size == 1:
            return GreedySearch(options, src_len, eos, limit)
        if self.beam_search == "transformers":
            prompt = len(options.forced) if options.target_prefix else 0
            return PooledBeamSearch(options, src_len, eos, pad, limit, prompt=prompt,
                                    early_stopping=self.early_stopping)
        return BeamSearch(options, src_len, eos, pad, limit)

    def encoder_feeds(self, sources: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
        """The encoder's inputs for these sources: ids right-padded with pad, and the attention mask."""
        s = max(len(x) for x in sources)
        ids = np.full((len(sources), s), self.special.pad, np.int64)
        mask = np.zeros((len(sources), s), np.int64)
        for i, x in enumerate(sources):
            ids[i, : len(x)], mask[i, : len(x)] = x, 1
        return {INPUT_IDS: ids, ATTENTION_MASK: mask}

    def check_source(self, ids: Sequence[int]) -> None:
        """InvalidInput unless ids is a non-empty list of in-vocabulary ids no longer than max_len."""
        if len(ids) == 0:
            raise InvalidInput("source is empty")
        if len(ids) > self.max_len:
            raise InvalidInput(f"source is {len(ids)} tokens long; the model accepts at most {self.max_len}")
        v = self.vocab_size
        if set(map(type, ids)) == {int} and min(ids) >= 0 and max(ids) < v:
            return  # the common case, checked in C
        bad = [t for t in ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < v]
        if bad:
            raise InvalidInput(f"source token ids must be integers in [0, {v}), got {bad[0]!r}")

    def check_request(self, request: Request) -> ResolvedOptions:
        """A request's resolved options after checking its source; InvalidInput for unresolved options
        (resolve them once: RequestLimits.resolve or Runner.make_request)."""
        self.check_source(request.source)
        if not isinstance(request.options, ResolvedOptions):
            raise InvalidInput(f"request {request.id}: options must be resolved (ResolvedOptions), "
                               f"got {type(request.options).__name__}")
        if request.options.max_output_tokens > self.max_output_tokens:
            raise InvalidInput(f"request {request.id}: max_output_tokens {request.options.max_output_tokens} "
                               f"exceeds the model's limit of {self.max_output_tokens}")
        return request.options
