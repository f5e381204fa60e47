"""How to decode one request: the options as asked (`DecodeOptions`), a model's defaults for the unset ones
(`ModelDefaults`), and the validated result every lower layer reads (`ResolvedOptions`).

Plain dataclasses, no I/O. `DecodeOptions.resolved` is the one place options are checked: every bad value is
an `InvalidInput` naming the option, its allowed range and what was sent. None means "not set": the model's
default applies (a pretrained bundle's generation defaults, read by service/runtime/runner.py), else the
neutral value. Semantics follow transformers' `generate` where it and CTranslate2 agree; where they differ the
docstrings below say which one is followed (docs/api.md has the table).

Lengths count generated tokens, a target prefix included, eos excluded from `min_output_tokens` and included
in `max_output_tokens` (the token budget of the output, as before).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from service.domain.constraints import MAX_REQUIRED, ConstraintSet, Phrase, check_text, constraint, required
from service.domain.errors import InvalidInput
from service.domain.glossary import MAX_ALTERNATIVES, Glossary, Term
from service.domain.languages import Languages
from service.domain.text import shown

DEFAULT_MAX_BEAM = 8  # the widest beam a server or a Runner accepts unless told otherwise
MAX_SUPPRESSED = 256  # most suppress_sequences a request may list
MAX_NGRAM = 16  # largest no_repeat_ngram_size
MAX_SEED = 2**63 - 1

TargetEncoder = Callable[[Sequence[str]], list[list[int]]]  # target texts -> ids (no eos)


@dataclass(frozen=True)
class ModelDefaults:
    """What a model decodes with when a request leaves an option unset (a bundle's generation defaults)."""

    beam_size: int = 1
    max_output_tokens: int | None = None  # None: the model's limit
    length_penalty: float | None = None  # None: the search's neutral value (0 for ours, 1 for transformers')
    min_output_tokens: int = 0
    no_repeat_ngram_size: int = 0
    repetition_penalty: float = 1.0


@dataclass(frozen=True)
class DecodeOptions:
    """How to decode one request, as asked (None: the model's default); languages by code (many-to-many
    models only); a target prefix and suppressed sequences as text (tokenized by the model's target
    tokenizer) or token ids."""

    beam_size: int | None = None
    n_best: int = 1
    length_penalty: float | None = None  # its meaning is the search's (runtime/decoding/search.py)
    max_output_tokens: int | None = None
    return_alignment: bool = False
    stream: bool = False  # emit a TokenEvent per generated token (greedy only)
    source_language: str | None = None
    target_language: str | None = None
    min_language_confidence: float | None = None  # source_language "auto": the floor (None: the server's)
    task: str | None = None  # a task of the model's (domain/tasks.py): its prefix starts every source
    target_prefix: str | Sequence[int] | None = None  # the forced start of every hypothesis
    return_alternatives: bool = False  # n_best continuations at the first position after the prefix
    min_output_tokens: int | None = None  # eos is not generated before this many tokens
    max_length_ratio: float = 0.0  # > 0: at most ceil(ratio * source tokens) new tokens
    repetition_penalty: float | None = None  # CTRL / transformers: > 1 discourages repeats
    no_repeat_ngram_size: int | None = None  # no n-gram of this size appears twice
    suppress_sequences: Sequence[str | Sequence[int]] = ()  # never produced (transformers' bad_words_ids)
    # each must appear: a text, ids, or a list of forms any one of which will do (domain/constraints.py)
    required_phrases: Sequence[str | Sequence[int] | Sequence[str | Sequence[int]]] = ()
    # source term -> target term(s) (domain/glossary.py, or what Glossary.from_request takes): the terms a
    # text holds become its required phrases after these (RequestLimits.for_text), over the model's glossary
    glossary: Glossary | Any = Glossary()
    disable_unk: bool = False  # the unknown token is never produced
    temperature: float | None = None  # sampling: > 0 samples, 0 is greedy
    top_k: int = 0  # sampling among the k most likely tokens (0: all)
    top_p: float = 1.0  # sampling among the smallest set of tokens of this much probability
    seed: int | None = None  # a seeded request samples the same tokens whatever shares its batch

    @property
    def sampling(self) -> bool:
        """Whether tokens are drawn (a temperature > 0, a top_k or a top_p < 1 given), not argmax-ed; an
        explicit temperature 0 is greedy whatever top_k and top_p say."""
        if self.temperature is not None and _is_real(self.temperature) and self.temperature == 0:
            return False
        hot = self.temperature is not None and _is_real(self.temperature)
        return hot or (self.top_k not in (0, None)) or (self.top_p is not None and self.top_p != 1.0)

    def resolved(self, max_len: int, max_beam: int, languages: Languages | None = None,
                 defaults: ModelDefaults | None = None, vocab_size: int = 0,
                 encode_target: TargetEncoder | None = None) -> ResolvedOptions:
        """Validated copy with every unset option filled from `defaults`, the languages as ids, the prefix
        and suppressed sequences as ids (text through `encode_target`; ids checked against `vocab_size`
        when > 0); raises InvalidInput on bad values."""
        d = defaults or ModelDefaults()
        limit = max_len - 1
        beam = d.beam_size if self.beam_size is None else self.beam_size
        if self.beam_size is None and self.sampling:
            beam = 1  # a sampling request draws one sequence, whatever beam the model decodes with
        for name, value in (("beam_size", beam), ("n_best", self.n_best)):
            if not _is_int(value):
                raise InvalidInput(f"{name} must be an integer, got {shown(value)}")
        if not 1 <= beam <= max_beam:
            raise InvalidInput(f"beam_size must be between 1 and {max_beam}, got {shown(beam)}")
        alternatives = bool(self.return_alternatives)
        if alternatives and self.beam_size not in (None, 1):
            raise InvalidInput("return_alternatives continues each alternative greedily: beam_size must be "
                               f"1, got {shown(self.beam_size)}")
        beam = 1 if alternatives else beam
        widest = max_beam if alternatives else beam
        if not 1 <= self.n_best <= widest:
            bound = f"max_beam_size ({max_beam})" if alternatives else f"beam_size ({beam})"
            raise InvalidInput(f"n_best must be between 1 and {bound}, got {shown(self.n_best)}")
        penalty = d.length_penalty if self.length_penalty is None else self.length_penalty
        if penalty is not None and not _is_real(penalty, low=0.0):
            raise InvalidInput(f"length_penalty must be a finite number >= 0, got {shown(penalty)}")
        steps = (d.max_output_tokens or limit) if self.max_output_tokens is None else self.max_output_tokens
        if self.max_output_tokens is None:
            steps = min(steps, limit)
        if not _is_int(steps) or not 1 <= steps <= limit:
            raise InvalidInput(
                f"max_output_tokens must be between 1 and {limit}, got {shown(self.max_output_tokens)}")
        sampling = self.sampling
        if self.stream and (beam != 1 or alternatives):
            raise InvalidInput(f"streaming needs beam_size 1 and no alternatives, got beam_size {beam}")
        controls = self._controls(d, sampling, beam, alternatives)
        prefix, forced = (languages or Languages()).resolve(self.source_language, self.target_language)
        texts = _Texts(encode_target, vocab_size)
        given_prefix = self.target_prefix is not None
        target_prefix = texts.ids("target_prefix", self.target_prefix) if given_prefix else []
        if given_prefix and not target_prefix:
            raise InvalidInput("target_prefix is empty: leave it unset for none")
        budget = steps - (forced is not None)
        if len(target_prefix) >= budget:
            raise InvalidInput(f"target_prefix is {len(target_prefix)} tokens long; it must be shorter than "
                               f"max_output_tokens ({budget} after the target language) to leave a "
                               "token free")
        suppressed = self._suppressed(texts)
        constraints = required(self.required_phrases, texts.forms).without(suppressed)
        if constraints and (self.stream or alternatives or sampling):
            raise InvalidInput("required_phrases are placed by beam search: no streaming, sampling or "
                               "return_alternatives with them")
        glossary = self.glossary
        glossary = glossary if isinstance(glossary, Glossary) else Glossary.from_request(glossary)
        if glossary and (self.stream or alternatives or sampling):
            raise InvalidInput("glossary terms are placed by beam search: no streaming, sampling or "
                               "return_alternatives with a glossary")
        return ResolvedOptions(
            int(beam), int(self.n_best), None if penalty is None else float(penalty), int(steps),
            bool(self.return_alignment), bool(self.stream), self.source_language, self.target_language,
            target_prefix=tuple(target_prefix), return_alternatives=alternatives,
            suppress_sequences=suppressed, required_phrases=constraints, glossary=glossary,
            disable_unk=bool(self.disable_unk), **controls, task=self.task,
            source_prefix=prefix, forced_first=forced)

    def _controls(self, d: ModelDefaults, sampling: bool, beam: int, alternatives: bool) -> dict[str, Any]:
        """The numeric controls (lengths, penalties, sampling) checked, with defaults filled in."""
        min_length = d.min_output_tokens if self.min_output_tokens is None else self.min_output_tokens
        if not _is_int(min_length) or min_length < 0:
            raise InvalidInput(f"min_output_tokens must be an integer >= 0, got {shown(min_length)}")
        if not _is_real(self.max_length_ratio, low=0.0):
            raise InvalidInput(f"max_length_ratio must be a finite number >= 0 (0: no limit), "
                               f"got {shown(self.max_length_ratio)}")
        penalty = d.repetition_penalty if self.repetition_penalty is None else self.repetition_penalty
        if not _is_real(penalty) or penalty <= 0:
            raise InvalidInput(f"repetition_penalty must be a finite number > 0 (1: none), "
                               f"got {shown(penalty)}")
        ngram = d.no_repeat_ngram_size if self.no_repeat_ngram_size is None else self.no_repeat_ngram_size
        if not _is_int(ngram) or not 0 <= ngram <= MAX_NGRAM:
            raise InvalidInput(f"no_repeat_ngram_size must be between 0 (off) and {MAX_NGRAM}, "
                               f"got {shown(ngram)}")
        temperature = 1.0 if self.temperature is None else self.temperature
        if not _is_real(temperature, low=0.0):
            raise InvalidInput(f"temperature must be a finite number >= 0 (0: greedy), "
                               f"got {shown(temperature)}")
        if not _is_int(self.top_k) or self.top_k < 0:
            raise InvalidInput(f"top_k must be an integer >= 0 (0: no limit), got {shown(self.top_k)}")
        if not _is_real(self.top_p) or not 0 < self.top_p <= 1:
            raise InvalidInput(f"top_p must be in (0, 1], got {shown(self.top_p)}")
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed <= MAX_SEED):
            raise InvalidInput(f"seed must be an integer between 0 and {MAX_SEED}, got {shown(self.seed)}")
        if sampling and (beam != 1 or alternatives):
            raise InvalidInput("sampling (temperature, top_k, top_p) needs beam_size 1 and no alternatives")
        return {"min_output_tokens": int(min_length), "max_length_ratio": float(self.max_length_ratio),
                "repetition_penalty": float(penalty), "no_repeat_ngram_size": int(ngram),
                "temperature": float(temperature) if sampling else None, "top_k": int(self.top_k),
                "top_p": float(self.top_p), "seed": None if self.seed is None else int(self.seed)}

    def _suppressed(self, texts: _Texts) -> tuple[tuple[int, ...], ...]:
        """suppress_sequences as token-id tuples, each checked."""
        given = self.suppress_sequences
        if isinstance(given, str | bytes) or not isinstance(given, Sequence):
            raise InvalidInput("suppress_sequences must be a list of texts or token-id lists, "
                               f"got {shown(given)}")
        if len(given) > MAX_SUPPRESSED:
            raise InvalidInput(f"suppress_sequences lists {len(given)} sequences; at most {MAX_SUPPRESSED}")
        out: list[Phrase] = []
        for i, item in enumerate(given):
            forms = texts.forms(f"suppress_sequences[{i}]", item)
            if not forms or not all(forms):
                raise InvalidInput(f"suppress_sequences[{i}] is empty")
            out += forms
        return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class ResolvedOptions(DecodeOptions):
    """DecodeOptions validated against a model's limits and defaults: every value set, texts as ids, the
    languages as ids (the source's first ids and the first generated token)."""

    beam_size: int = 1
    length_penalty: float | None = None  # None: the search's neutral length penalty
    max_output_tokens: int = 1
    target_prefix: tuple[int, ...] = ()
    min_output_tokens: int = 0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    suppress_sequences: tuple[tuple[int, ...], ...] = ()
    required_phrases: ConstraintSet = ConstraintSet()  # placed by constrained beam search
    glossary: Glossary = Glossary()  # the request's over the model's, until a text's own options leave it out
    glossary_terms: tuple[str, ...] = ()  # one text's: the source terms it holds (with_terms)
    glossary_placed: int = 0  # of them, the first ones: the last required phrases
    temperature: float | None = None  # None: not sampling
    source_prefix: tuple[int, ...] = ()  # ids before a source's pieces (its language)
    task_prefix: tuple[int, ...] = ()  # ids of the task's prefix: after the model's own source prefix
    forced_first: int | None = None  # the first generated token (the target language), forced

    @property
    def sampling(self) -> bool:
        """Whether tokens are drawn."""
        return self.temperature is not None

    @property
    def search_rows(self) -> int:
        """Rows of one search: its beam, or one per alternative."""
        return self.n_best if self.return_alternatives else self.beam_size

    @property
    def rows(self) -> int:
        """Rows of a decode batch the request holds: its search's, twice that with required phrases (the
        plain search beside the constrained one: service/runtime/decoding/plain_first.py)."""
        return self.search_rows * (2 if self.required_phrases else 1)

    @property
    def forced(self) -> tuple[int, ...]:
        """The tokens every hypothesis starts with: the target language's, then the target prefix."""
        return ((self.forced_first,) if self.forced_first is not None else ()) + self.target_prefix

    @property
    def controlled(self) -> bool:
        """Whether a step needs host-side processing of this request's rows (prefix, lengths, penalties,
        suppression, sampling, alternatives)."""
        return bool(self.forced or self.return_alternatives or self.min_output_tokens or self.sampling
                    or self.repetition_penalty != 1.0 or self.no_repeat_ngram_size
                    or self.suppress_sequences or self.disable_unk)

    def resolved(self, max_len: int, max_beam: int, languages: Languages | None = None,
                 defaults: ModelDefaults | None = None, vocab_size: int = 0,
                 encode_target: TargetEncoder | None = None) -> ResolvedOptions:
        """Already resolved: itself."""
        return self

    def with_terms(self, terms: Sequence[Term], encode_target: TargetEncoder | None = None,
                   vocab_size: int = 0) -> ResolvedOptions:
        """Itself for one text holding glossary `terms` (the glossary itself left out): their sources in
        glossary_terms, and as many of them as MAX_REQUIRED leaves room for after the request's own
        phrases appended to required_phrases (none when it samples, streams or returns alternatives: beam
        search places them); InvalidInput naming a term whose targets cannot be placed."""
        placeable = not (self.sampling or self.stream or self.return_alternatives)
        room = max(MAX_REQUIRED - len(self.required_phrases), 0) if placeable else 0
        texts = _Texts(encode_target, vocab_size)
        placed = []
        for term in terms[:room]:
            name = f"glossary term {shown(term.source, 40)}"
            c = constraint(name, [(name, t) for t in term.targets], texts.forms, 2 * MAX_ALTERNATIVES)
            c = ConstraintSet((c,)).without(self.suppress_sequences, name)
            placed += c.constraints
        phrases = ConstraintSet(self.required_phrases.constraints + tuple(placed))
        return dataclasses.replace(self, glossary=Glossary(), required_phrases=phrases,
                                   glossary_terms=tuple(t.source for t in terms), glossary_placed=len(placed))

    def split_unmet(self, unmet: Sequence[int]) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """A hypothesis' unmet phrases (indexes into required_phrases) as the request's own ones it lacks
        and the glossary terms it lacks (by source; the terms not placed included)."""
        own = len(self.required_phrases) - self.glossary_placed
        terms = [self.glossary_terms[i - own] for i in unmet if i >= own]
        return tuple(i for i in unmet if i < own), (*terms, *self.glossary_terms[self.glossary_placed :])

    def limited_to(self, source_len: int) -> ResolvedOptions:
        """Itself with max_output_tokens lowered to ceil(max_length_ratio * source_len) (never below the
        forced tokens + 1) when a ratio is set."""
        if not self.max_length_ratio:
            return self
        cap = max(math.ceil(self.max_length_ratio * source_len), len(self.forced) + 1)
        if cap >= self.max_output_tokens:
            return self
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return ResolvedOptions(**{**values, "max_output_tokens": cap})


@dataclass(frozen=True)
class _Texts:
    """Turns an option given as text or token ids into checked ids."""

    encode: TargetEncoder | None
    vocab_size: int

    def ids(self, name: str, value: Any) -> list[int]:
        """Ids of a text (the target tokenizer's, no eos) or of a list of ids (each in the vocabulary)."""
        if isinstance(value, str):
            if self.encode is None:
                raise InvalidInput(f"{name}: this model takes token ids here, not text")
            return list(self.encode([value])[0]) if value.strip() else []
        if isinstance(value, bytes) or not isinstance(value, Sequence | np.ndarray):
            raise InvalidInput(f"{name} must be a text or a list of token ids, got {shown(value)}")
        bad = [t for t in value if not _is_int(t) or t < 0 or (self.vocab_size and t >= self.vocab_size)]
        if bad:
            bound = f"[0, {self.vocab_size})" if self.vocab_size else ">= 0"
            raise InvalidInput(f"{name}: token ids must be integers in {bound}, got {shown(bad[0])}")
        return [int(t) for t in value]

    def forms(self, name: str, value: Any) -> list[Phrase]:
        """The forms of a phrase: a text's ids standalone and after a space (both when they differ: a word
        first in a sentence and inside one), or the ids given; empty texts give [()]."""
        if not isinstance(value, str):
            return [tuple(self.ids(name, value))]
        check_text(name, value)
        if self.encode is None or not value.strip():
            return [tuple(self.ids(name, value))]
        return list(dict.fromkeys(tuple(ids) for ids in self.encode([value, " " + value])))


def _is_int(x: Any) -> bool:
    """True for ints (numpy included), False for bools and anything else."""
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _is_real(x: Any, low: float | None = None) -> bool:
    """True for a finite real number (numpy included) >= low when given; False for bools, ints too large
    for a float, and anything else."""
    if isinstance(x, bool) or not isinstance(x, int | float | np.integer | np.floating):
        return False
    try:
        return math.isfinite(x) and (low is None or x >= low)
    except OverflowError:
        return False
