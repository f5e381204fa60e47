"""How the server builds what it serves from its configuration: a model version's runner, scheduler
and warm-up (the repository's loader), and the model repository of the flags, whose limits are the
ceilings of every model's settings and whose models share the server's one sentence cache."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from interface.names import MODEL_NAME
from service.config import ServerConfig
from service.domain.errors import BundleError, ProviderUnavailable, error_id
from service.domain.types import DecodeOptions
from service.models.footprint import charge_at_limits
from service.models.layout import Ceilings, ModelSettings, RepositoryLayout
from service.models.repository import ControlMode, ModelRepository
from service.models.served import Loader, ServedModel
from service.ops.malloc import release_freed_memory
from service.ops.memory import resident_bytes
from service.ops.model_metrics import ModelMetrics
from service.runtime.runner import Runner
from service.scheduling.cache import SentenceCache
from service.scheduling.policies import SchedulerSettings, make_policy
from service.scheduling.scheduler import Scheduler

log = logging.getLogger("service.server")

WARMUP_TEXT = "Send 4,217 apples."


def build_runner(config: ServerConfig) -> Runner:
    """Load and verify the bundle and open its sessions (raises BundleError for a bad bundle)."""
    try:
        runner = Runner(config.bundle, providers=config.providers, intra_op_threads=config.intra_op_threads,
                        provider_options=config.provider_options or None, max_beam=config.max_beam,
                        variant=config.variant or None, require_provider=config.require_provider or None,
                        cpu_arena=not config.memory_budget)  # under a budget, what a run frees goes back
    except (BundleError, ProviderUnavailable):
        raise
    except Exception as exc:  # ONNX Runtime or the tokenizer refused a file whose hash matched
        eid = error_id()  # its text (paths, internals) goes to the log only: clients read this message
        log.error("cannot load the model of bundle %s (error id %s): %s: %s", config.bundle, eid,
                  type(exc).__name__, exc)  # one line, no traceback: the file, not our code, is at fault
        raise BundleError(f"cannot load the model of bundle {config.bundle}: {type(exc).__name__} (error id "
                          f"{eid}; details in the server log)") from exc
    log.info("model %s %s loaded from %s; execution providers in use: %s (primary: %s), variant %s",
             runner.bundle.name, runner.bundle.version, config.bundle, ", ".join(runner.providers),
             runner.provider, runner.variant_name)
    return runner


def sentence_cache(config: ServerConfig) -> SentenceCache | None:
    """The server's one sentence cache (--sentence-cache-bytes), shared by every model; None for 0."""
    return SentenceCache(config.sentence_cache_bytes) if config.sentence_cache_bytes else None


def build_scheduler(config: ServerConfig, runner: Runner, model: ModelSettings | None = None,
                    recorder: ModelMetrics | None = None, cache: SentenceCache | None = None) -> Scheduler:
    """The scheduler of the batching mode, with its settings, policy and request limits: the server's
    flags, overridden by a model's own settings where it has them; answering from `cache` when given."""
    model = model or ModelSettings()

    def pick(name: str) -> Any:
        """The model's setting `name`, else the server's flag."""
        value = getattr(model, name)
        return getattr(config, name) if value is None else value

    settings = SchedulerSettings(
        max_batch_size=pick("max_batch_size"), max_batch_tokens=pick("max_batch_tokens"),
        max_queue_delay_ms=pick("max_queue_delay_ms"), queue_size=pick("queue_size"),
        watchdog_s=config.watchdog_s)
    limits = runner.limits(max_beam=config.max_beam, max_source_tokens=config.max_source_tokens,
                           max_output_tokens=config.max_output_tokens)
    if model.glossary is not None:
        limits = replace(limits, glossary=model.glossary)
    if model.task is not None:  # InvalidInput naming the bundle's tasks for one it lacks: the load fails
        limits = replace(limits, tasks=limits.tasks.with_default(model.task))
    return Scheduler(runner, make_policy(pick("batching"), settings), settings, limits, recorder, cache)


def model_loader(config: ServerConfig, shared: Runner | None = None,
                 cache: SentenceCache | None = None) -> Loader:
    """How the repository loads a model version: runner, scheduler (answering from `cache`), warm-up, and
    its charge: the memory its load added, or under a memory budget what it holds serving at its limits.
    `shared` (tests) serves as the runner of --bundle."""

    async def load(name: str, version: int, path: Path, settings: ModelSettings,
                   known: int | None = None) -> ServedModel:
        """Open the bundle at `path`, start its scheduler, translate a warm-up text; under a budget charge it
        `known` (an earlier load's charge of the same files and settings) or measure it at the limits."""
        if config.memory_budget:  # what earlier runs freed goes back first: the load is measured alone
            await asyncio.to_thread(release_freed_memory)
        before = resident_bytes()
        if shared is not None and Path(path) == Path(config.bundle):
            runner = shared
        else:
            model_config = replace(config, bundle=Path(path), variant=settings.variant or config.variant)
            runner = await asyncio.to_thread(build_runner, model_config)
        recorder = ModelMetrics(name, str(version))
        try:
            scheduler = build_scheduler(config, runner, settings, recorder, cache)
            await scheduler.start()
            try:
                source, target = runner.languages.example()  # a many-to-many model needs a pair
                warmup = DecodeOptions(max_output_tokens=min(8, runner.max_len - 1), source_language=source,
                                       target_language=target)
                await scheduler.submit([WARMUP_TEXT], warmup)  # a real translation before it serves
                charge = max(0, resident_bytes() - before)
                if config.memory_budget:  # what it holds serving at its limits (service/models/footprint.py)
                    charge = known or await charge_at_limits(runner, scheduler, before, warmup)
            except BaseException:
                await scheduler.drain(0.0)
                raise
        except BaseException:
            recorder.remove()  # a failed load leaves no series behind
            raise
        info = {"provider": runner.provider, "batching": scheduler.mode.value, "variant": runner.variant_name}
        return ServedModel(name, version, runner, scheduler, charge, info=info)

    return load


def build_repository(config: ServerConfig, shared: Runner | None = None) -> ModelRepository:
    """The model repository of the configuration: --model-repository, else --bundle as `translator`; its
    models share one sentence cache (`sentence_cache`)."""
    if config.model_repository is not None:
        if not config.model_repository.is_dir():
            raise BundleError(f"model repository {config.model_repository} is not a directory")
        layout = RepositoryLayout(root=config.model_repository)
    else:
        layout = RepositoryLayout(bundle=config.bundle, bundle_name=MODEL_NAME)
    loader = model_loader(config, shared, sentence_cache(config))
    return ModelRepository(layout, loader, ControlMode(config.model_control_mode),
                           config.memory_budget or None, ceilings=ceilings(config))


def ceilings(config: ServerConfig) -> Ceilings:
    """The limits a model's settings may lower, never raise: the flags (--max-batch-tokens 0: none)."""
    return Ceilings(max_batch_size=config.max_batch_size, max_batch_tokens=config.max_batch_tokens or None,
                    queue_size=config.queue_size, max_queue_delay_ms=config.max_queue_delay_ms)
