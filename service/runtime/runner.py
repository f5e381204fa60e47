"""Torch-free runner of a model bundle: sessions, tokenizer, backend, and in-process translation.

`Runner` owns the ONNX Runtime sessions, the tokenizer (service/runtime/model/tokenization.py) and the backend
(host numpy cache on the CPU provider, device-resident cache through IO binding on CUDA:
service/runtime/cache/backends.py), and describes the model to its batches with a `ModelSpec`. A source is the
language prefix + the tokenizer's ids + the bundle's source suffix (eos unless its `generation` says
otherwise); the decoder starts from `generation.decoder_start_id` (bos unless said otherwise), and its rules
(suppressed ids, eos at the limit, renormalization: service/runtime/decoding/rules.py) apply to every step.
`DecodeBatch` (service/runtime/decoding/batch.py) is the step-wise engine that the scheduler drives;
`Runner.translate` is the simplest driver of it (add what fits, step until done)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnxruntime as ort

from interface.generation import GenerationDefaults
from interface.names import decoder_inputs
from service.domain.errors import BundleError, InvalidInput
from service.domain.languages import Languages
from service.domain.limits import RequestLimits
from service.domain.tasks import Tasks
from service.domain.types import (
    DEFAULT_MAX_BEAM,
    DecodeOptions,
    FinishedEvent,
    Hypothesis,
    ModelDefaults,
    Request,
    ResolvedOptions,
    ScoreOptions,
    ScoreRequest,
    ScoreResult,
)
from service.runtime.cache.backends import Backend, FaultHook, HostBackend, IoBindingBackend
from service.runtime.decoding.batch import DecodeBatch
from service.runtime.decoding.rules import StepRules
from service.runtime.decoding.scoring import RUN_TOKENS, Scorer, score_requests
from service.runtime.decoding.spec import ModelSpec
from service.runtime.model.bundle import Bundle, load_bundle
from service.runtime.model.sessions import CUDA, check_provider, open_sessions, plan_providers
from service.runtime.model.tokenization import TextTokenizer, load_tokenizer

log = logging.getLogger(__name__)

BASE_VARIANT = "base"  # how the base files (encoder.onnx, decoder.onnx) are reported


class Runner:
    """Encoder/decoder sessions of one bundle plus its tokenizer; decodes text or ids.

    providers: ORT providers to try (default CUDA then CPU, filtered by the build); the ones
    really in use are `providers` / `provider`. intra_op_threads: size of the CPU pool (0 = ORT
    default); with shared_thread_pool the pool is process-wide and only the first Runner of
    the process sets its size. provider_options: {provider name: {option: value}}, e.g.
    {"CUDAExecutionProvider": {"device_id": 1}}. io_binding: None = only when CUDA is active.
    variant: a bundle variant such as "fp16", or "base" (default: the one bundle.json names for the
    provider in use, else the base files). require_provider: raise ProviderUnavailable unless that
    provider runs the model with every compute node placed on it. cpu_arena: False opens the sessions
    without ONNX Runtime's CPU arena (memory a run frees goes back). profile_prefix: ORT's profiler
    (files `<prefix>_encoder_*.json`, `<prefix>_decoder_*.json`; bench/engines/profile.py). Thread-safe for
    concurrent `translate` calls (each thread reuses its own DecodeBatch, so a call finds the
    buffers of the previous one allocated and bound); `fault_hook` is for tests (called with
    "encoder" or "decoder" before each run of the backend).
    """

    def __init__(
        self,
        bundle: Bundle | str | Path,
        providers: Sequence[str] | None = None,
        intra_op_threads: int = 0,
        provider_options: dict[str, dict[str, Any]] | None = None,
        shared_thread_pool: bool = True,
        max_beam: int = DEFAULT_MAX_BEAM,
        io_binding: bool | None = None,
        variant: str | None = None,
        profile_prefix: str | None = None,
        require_provider: str | None = None,
        cpu_arena: bool = True,
    ) -> None:
        self.bundle = bundle if isinstance(bundle, Bundle) else load_bundle(bundle)
        self.config = self.bundle.config
        self.special = self.bundle.special
        self.max_len = self.bundle.max_len
        self.vocab_size = int(self.config["vocab_size"])  # what the decoder generates
        self.source_vocab_size = int(self.config.get("source_vocab_size") or self.vocab_size)  # encoder's
        self.max_beam = max_beam
        self._text_setup()
        device_id = int((provider_options or {}).get(CUDA, {}).get("device_id", 0))
        planned, why_not_cuda = plan_providers(providers, device_id)
        chosen = None if variant == BASE_VARIANT else variant

        def variant_of(provider: str) -> str | None:
            """The variant to run on `provider`: the one asked for, else the bundle's for it."""
            return chosen if variant is not None else self.bundle.variant_for(provider)

        self.sessions = open_sessions(lambda provider: self.bundle.files(variant_of(provider)), planned,
                                      provider_options, intra_op_threads, shared_thread_pool, profile_prefix,
                                      why_not_cuda, cpu_arena)
        self.variant = variant_of(self.provider)
        files = self.sessions.files
        host_nodes = {graph: self.bundle.host_nodes.get(path.name, ()) for graph, path in files.items()}
        check_provider(self.sessions, require_provider, host_nodes)
        decoder = files["decoder"]
        self.kv_cache = self.sessions.kv_cache  # "concat" or "inplace" (service/runtime/cache/kvcache.py)
        self._local = threading.local()  # the thread's DecodeBatch for translate()
        n_layers = self.bundle.n_decoder_layers
        check_decoder_inputs(self.sessions.decoder, n_layers, self.kv_cache, decoder)
        heads = int(self.config["n_heads"])
        d_head = int(self.config.get("head_dim") or int(self.config["d_model"]) // heads)  # T5's d_kv if set
        start = self.bundle.generation.decoder_start_id
        self.spec = ModelSpec(self.source_vocab_size, self.max_len, n_layers, heads, d_head, self.special,
                              self.kv_cache, self.sessions.cache_dtype,
                              self.special.bos if start is None else start,
                              StepRules.of(self.bundle.generation), self.bundle.generation.beam_search,
                              self.bundle.generation.early_stopping)
        if io_binding or (io_binding is None and self.provider == CUDA):
            device = "cuda" if self.provider == CUDA else "cpu"
            device_id = device_id if device == "cuda" else 0
            self.backend: Backend = IoBindingBackend(self.sessions, n_layers, device, device_id)
        else:
            self.backend = HostBackend(self.sessions, n_layers)
        log.info("runner for %s %s on %s, variant %s (%s)", self.bundle.name, self.bundle.version,
                 self.provider, self.variant_name, type(self.backend).__name__)

    def _text_setup(self) -> None:
        """The tokenizer, source affixes, languages and tasks of the bundle; BundleError when its ids do not
        fit the model's vocabulary."""
        b = self.bundle
        suffix = b.generation.source_suffix
        self.source_suffix: list[int] = [self.special.eos] if suffix is None else list(suffix)
        self.source_prefix: list[int] = list(b.generation.source_prefix)  # after the language id
        spec = b.languages
        self.languages = Languages(dict(spec.codes), spec.source_prefix, spec.forced_target,
                                   b.generation.forced_bos_id)
        self.tasks = Tasks(dict(b.generation.tasks), b.generation.task)
        self.defaults = model_defaults(b.generation.defaults)  # what a request leaves unset decodes with
        try:
            DecodeOptions().resolved(self.max_len, DEFAULT_MAX_BEAM, defaults=self.defaults)
        except InvalidInput as e:
            raise BundleError(f"the generation defaults of bundle {b.path} are not valid options: {e}"
                              ) from None
        special = (self.special.pad, self.special.bos, self.special.eos, self.special.unk)
        self.tokenizer: TextTokenizer = load_tokenizer(b.tokenizer, b.path, self.special.unk, special,
                                                       list(spec.codes.values()))
        top, vocab = self.tokenizer.vocab_size - 1, max(self.vocab_size, self.source_vocab_size)
        if top >= vocab:
            raise BundleError(f"the tokenizer of bundle {b.path} gives ids up to {top}, outside the model's "
                              f"vocabulary of {vocab}")

    @property
    def source_language(self) -> str | None:
        """The language the model reads, as bundle.json's `source_language` states it (None: not stated)."""
        return self.bundle.source_language

    @property
    def provider(self) -> str:
        """Execution provider actually doing the work (e.g. "CPUExecutionProvider")."""
        return self.sessions.provider

    @property
    def variant_name(self) -> str:
        """The bundle variant in use: its name in bundle.json, or "base" for encoder.onnx / decoder.onnx."""
        return self.variant or BASE_VARIANT

    @property
    def providers(self) -> list[str]:
        """All providers of the decoder session, in priority order."""
        return list(self.sessions.providers)

    @property
    def fault_hook(self) -> FaultHook | None:
        """Tests: called with "encoder" or "decoder" before each run (raise to fail it, block to stall it)."""
        return self.backend.fault_hook

    @fault_hook.setter
    def fault_hook(self, hook: FaultHook | None) -> None:
        self.backend.fault_hook = hook

    @property
    def longest_token(self) -> int:
        """Characters of the longest vocabulary entry (a text of C characters has >= C / this tokens)."""
        return self.tokenizer.longest_token

    # ----- tokenization and validation ----------------------------------------------------
    def encode_texts(self, texts: Sequence[str], prefix: Sequence[int] = (), task: Sequence[int] = ()
                     ) -> list[list[int]]:
        """Source ids (prefix, e.g. a language's id, + the bundle's source prefix + task, a task prefix's ids,
        + tokenizer ids + the source suffix, usually eos) of each text; InvalidInput if empty or too long."""
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InvalidInput(f"text {i} must be a string, got {type(t).__name__}")
            if not t.strip():
                raise InvalidInput(f"text {i} is empty")
        fixed, suffix = [*self.source_prefix, *task], self.source_suffix
        out = [[*prefix, *fixed, *ids, *suffix] for ids in self.tokenizer.encode(texts)]
        for i, ids in enumerate(out):
            if len(ids) > self.max_len:
                raise InvalidInput(f"text {i} is {len(ids)} tokens long (incl. eos); "
                                   f"the model accepts at most {self.max_len}")
        return out

    def encode_target(self, texts: Sequence[str]) -> list[list[int]]:
        """Target-side ids of texts (no eos): a target prefix, a suppressed word, a translation to score."""
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InvalidInput(f"target text {i} must be a string, got {type(t).__name__}")
        return self.tokenizer.encode_target(texts)

    def limits(self, **lowered: Any) -> RequestLimits:
        """The request limits of this model (max_len, languages, defaults, vocabulary), lowered by
        RequestLimits.of's keyword arguments (max_beam, max_source_tokens, max_output_tokens)."""
        max_beam = lowered.pop("max_beam", self.max_beam)
        return RequestLimits.of(self.max_len, self.longest_token, max_beam, **lowered,
                                languages=self.languages, defaults=self.bounded_defaults(max_beam),
                                vocab_size=self.vocab_size, eos=self.special.eos, tasks=self.tasks)

    def bounded_defaults(self, max_beam: int) -> ModelDefaults:
        """The model's defaults with the beam no wider than max_beam (a server's --max-beam bounds them)."""
        return dataclasses.replace(self.defaults, beam_size=max(1, min(self.defaults.beam_size, max_beam)))

    def decode_tokens(self, ids: Sequence[int]) -> str:
        """Text of generated ids (special tokens skipped)."""
        return self.tokenizer.decode(ids)

    def resolve(self, options: DecodeOptions | None) -> ResolvedOptions:
        """Options resolved against the model's limits, max_beam and languages (RequestLimits.resolve, the
        one resolver)."""
        return self.limits().resolve(options or DecodeOptions(), self.encode_target)

    def make_request(self, source: str | Sequence[int], options: DecodeOptions | None = None,
                     tag: Any = None) -> Request:
        """A validated Request from a text (with the language and task prefixes its options ask for), or from
        source ids used as is (prefix and suffix included); its options resolved by `resolve`."""
        resolved = self.resolve(options)
        if isinstance(source, str):
            ids = self.encode_texts([source], resolved.source_prefix, resolved.task_prefix)[0]
        else:
            ids = [int(t) for t in source]
        self.spec.check_source(ids)
        return Request(ids, resolved, tag)

    # ----- decoding -----------------------------------------------------------------------
    def new_batch(self, max_rows: int = 64) -> DecodeBatch:
        """An empty DecodeBatch with room for max_rows rows (a beam-k request takes k)."""
        return DecodeBatch(self.spec, self.backend, self.tokenizer, max_rows)

    def translate(
        self,
        inputs: Sequence[str] | Sequence[Sequence[int]],
        options: DecodeOptions | Sequence[DecodeOptions] | None = None,
        max_rows: int = 64,
    ) -> list[list[Hypothesis]]:
        """Decode every input (text, or source ids incl. eos); n-best hypotheses per input, in order."""
        opts = list(options) if isinstance(options, Sequence) else [options or DecodeOptions()] * len(inputs)
        if len(opts) != len(inputs):
            raise InvalidInput(f"{len(inputs)} inputs but {len(opts)} options")
        resolved = [self.resolve(o) for o in opts]
        texts = [i for i, x in enumerate(inputs) if isinstance(x, str)]
        encoded = dict(zip(texts, self.encode_texts([inputs[i] for i in texts]), strict=True))
        n = len(self.source_prefix)  # the language's ids go first, the task's after the bundle's prefix
        requests = [self.make_request([*o.source_prefix, *encoded[i][:n], *o.task_prefix, *encoded[i][n:]]
                                      if i in encoded else x, o)
                    for i, (x, o) in enumerate(zip(inputs, resolved, strict=True))]
        too_big = [r.options.rows for r in requests if r.options.rows > max_rows]
        if too_big:
            raise InvalidInput(f"{too_big[0]} rows (beam_size, or n_best alternatives) exceed the batch size "
                               f"{max_rows}")
        batch = self._thread_batch(max_rows)
        try:
            return self._drive(batch, requests)
        except BaseException:
            self._local.batch = None  # a failed call leaves its batch to the garbage collector
            raise

    # ----- scoring (service/runtime/decoding/scoring.py) ---------------------------------------------
    def score_requests(self, sources: Sequence[str], targets: Sequence[str],
                       options: ScoreOptions | None = None, tasks: Tasks | None = None) -> list[ScoreRequest]:
        """Validated ScoreRequests of (source, target) text pairs, a task read by `tasks` (default: the
        bundle's); InvalidInput saying what is wrong."""
        return score_requests(sources, targets, options or ScoreOptions(), self.spec, self.languages,
                              tasks or self.tasks, self.encode_texts, self.encode_target, self.vocab_size)

    def new_scorer(self, max_rows: int = 64, mode: str = "auto", run_tokens: int = RUN_TOKENS) -> Scorer:
        """A Scorer of max_rows pairs per chunk, by a mode of service/runtime/decoding/scoring.py (default:
        several positions per decoder run where the graphs allow)."""
        return Scorer(self.spec, self.backend, max_rows, mode, run_tokens)

    def score(self, sources: Sequence[str], targets: Sequence[str], options: ScoreOptions | None = None,
              max_rows: int = 64) -> list[ScoreResult]:
        """Each target's per-token log-probs given its source (forced decoding), in order."""
        return self.new_scorer(max_rows).score(self.score_requests(sources, targets, options))

    def _thread_batch(self, max_rows: int) -> DecodeBatch:
        """The calling thread's empty DecodeBatch of max_rows rows (kept between calls: one per thread)."""
        batch = getattr(self._local, "batch", None)
        if batch is None or batch.max_rows != max_rows:  # a call leaves it empty or drops it
            batch = self._local.batch = self.new_batch(max_rows)
        return batch

    def _drive(self, batch: DecodeBatch, requests: list[Request]) -> list[list[Hypothesis]]:
        """Add what fits, step until every request finished; n-best hypotheses in request order."""
        pending, results = deque(requests), {}
        budget = sum(r.options.max_output_tokens or 0 for r in requests) + 1
        for _ in range(budget):
            if pending:
                fitting, free = [], batch.free_rows
                while pending and pending[0].options.rows <= free:
                    free -= pending[0].options.rows
                    fitting.append(pending.popleft())
                batch.add(fitting)
            for event in batch.step():
                if isinstance(event, FinishedEvent):
                    results[event.request.id] = event.hypotheses
            if not pending and not len(batch):
                break
        else:
            raise RuntimeError("decoding did not finish within its step budget")
        return [results[r.id] for r in requests]


def model_defaults(given: GenerationDefaults) -> ModelDefaults:
    """What a request leaves unset decodes with: a bundle's generation defaults (a checkpoint's generation
    config, in transformers' terms: max_length and min_length count the decoder start) in ours."""
    d = ModelDefaults()
    penalty = given.repetition_penalty
    return ModelDefaults(
        beam_size=d.beam_size if given.num_beams is None else given.num_beams,
        max_output_tokens=given.max_new_tokens, length_penalty=given.length_penalty,
        min_output_tokens=d.min_output_tokens if given.min_new_tokens is None else given.min_new_tokens,
        no_repeat_ngram_size=given.no_repeat_ngram_size or d.no_repeat_ngram_size,
        repetition_penalty=d.repetition_penalty if penalty is None else penalty)


def check_decoder_inputs(decoder: ort.InferenceSession, n_layers: int, kv_cache: str, path: Path) -> None:
    """BundleError unless the decoder takes exactly the inputs of its interface in interface/names.py
    (e.g. an in-place decoder exported before it took per-row source lengths)."""
    got, want = {i.name for i in decoder.get_inputs()}, set(decoder_inputs(n_layers, kv_cache))
    if got != want:
        raise BundleError(
            f"{path} does not have the inputs of a {kv_cache!r} decoder of this runtime "
            f"(missing: {sorted(want - got) or 'none'}; unexpected: {sorted(got - want) or 'none'}); "
            "export the checkpoint again with this version")
