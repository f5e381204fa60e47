"""ONNX Runtime sessions of a bundle: which providers, with which options, placed where.

Providers are planned before any session is opened (`plan_providers`): the CUDA provider is asked for only
when its libraries load and a device is there (service/runtime/model/cuda.py), otherwise the plan is the CPU
alone and one log line says why. Session options then follow the provider that really runs the graphs
(`session.get_providers()`), not the requested list: if ONNX Runtime still falls back while creating a
session, the sessions are made again with the options of the provider in use. The options per provider:

- CPU: ORT's process-wide intra-op pool shared by both sessions (two pools spinning on the same
  cores starve each other, docs/performance.md), created once with
  `onnxruntime.set_global_thread_pool_sizes`; the SkipLayerNormalization fusion off (ORT's CPU
  kernel is several times slower than Add + LayerNormalization beyond a few rows); ORT's CPU arena
  unless `cpu_arena` is False (a memory budget: what a run frees then goes back to malloc, and from
  there to the system, instead of staying in the arena); int8 products that cannot saturate on a CPU
  without VNNI (interface/sessions.py, as the exporter verifies them).
- CUDA: per-session pools that do not spin (the CPU only runs shape computations; ORT's global
  pool once the process has one, since ORT then refuses per-session pools), one device arena per
  device shared by every session of every model (registered once with ORT's environment,
  `session.use_env_allocators`; each session's own arena where ORT refuses), every fusion on, and
  the placement of each node recorded, so that `misplaced_nodes` can list compute nodes that ONNX
  Runtime put on another provider (a missing CUDA kernel for an op or dtype means Memcpy nodes and
  PCIe traffic around it), in the encoder and the decoder. A placement that cannot be read is
  `PlacementUnknown`, never an empty table: `--require-provider` fails on it, and without it a
  warning says what was not checked.

ORT's Python sessions can re-create themselves on the CPU after a provider error at run time:
`disable_fallback()` is called on every session, so a failure is reported instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from interface.names import SEQLENS_K, past_name
from interface.sessions import cpu_flags, cpu_session_config
from service.domain.errors import ProviderUnavailable
from service.ops.hugepages import huge_pages_for
from service.ops.mapped import drop_file_pages
from service.runtime.model.cuda import CUDA, cuda_unavailable

log = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"
CROSS_KEY = past_name(0, "encoder", "key")  # its shape gives the decoder's source length S
# ONNX Runtime's CPU SkipLayerNormalization is several times slower than Add + LayerNormalization
# once there are more than a few rows (docs/performance.md): on the CPU, keep them unfused.
CPU_DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)
DEFAULT_PROVIDERS = (CUDA, CPU)
ORT_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
RECORD_PLACEMENT = "session.record_ep_graph_assignment_info"
# Nodes that are never compute: ORT's own copies between devices, and shape reads.
NOT_COMPUTE_OPS = frozenset({"MemcpyFromHost", "MemcpyToHost", "Shape", "Size"})

USE_ENV_ALLOCATORS = "session.use_env_allocators"  # take device memory from the process's shared allocator

_pool_lock = threading.Lock()
_pool_threads: int | None = None  # size we asked for; -1 when someone else created the pool
_cuda_allocators: dict[int, bool] = {}  # device id -> whether ORT's environment holds our shared arena


def ensure_shared_cuda_allocator(device_id: int, options: Mapping[str, str]) -> bool:
    """Register one CUDA arena allocator per device with ONNX Runtime's environment, once per process,
    so that the sessions of every model on that device take their memory from it
    (`session.use_env_allocators`); False where ORT refuses (each session then keeps its own arena)."""
    with _pool_lock:
        if device_id not in _cuda_allocators:
            try:
                info = ort.OrtMemoryInfo("Cuda", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, device_id,
                                         ort.OrtMemType.DEFAULT)
                defaults = ort.OrtArenaCfg(0, -1, -1, -1)  # ORT's arena defaults
                ort.create_and_register_allocator_v2(CUDA, info, dict(options), defaults)
                _cuda_allocators[device_id] = True
            except Exception as exc:  # noqa: BLE001 - ORT raises its own Fail / RuntimeError types
                log.warning("cannot share one CUDA allocator between sessions (%s); each keeps its own", exc)
                _cuda_allocators[device_id] = False
        return _cuda_allocators[device_id]


def ensure_global_thread_pool(threads: int) -> bool:
    """Create ORT's global intra-op pool once per process; False if sessions cannot share one."""
    global _pool_threads
    with _pool_lock:
        if _pool_threads is None:
            try:
                ort.set_global_thread_pool_sizes(threads, 1)
                _pool_threads = threads
            except Exception as e:  # noqa: BLE001 - ORT raises its own Fail type
                if "already been created" not in str(e):
                    log.warning("cannot create the global ORT thread pool (%s); using per-session pools", e)
                    return False
                _pool_threads = -1
        if _pool_threads not in (threads, -1):
            log.warning("global ORT thread pool already has %d threads; %d requested", _pool_threads, threads)
        return True


def plan_providers(requested: Sequence[str] | None, device_id: int = 0) -> tuple[list[str], str | None]:
    """Providers to ask ONNX Runtime for (requested ones this build offers and this machine can run,
    CPU last), and why CUDA was left out (None if it was not)."""
    available = ort.get_available_providers()
    wanted = list(requested or DEFAULT_PROVIDERS)
    missing = [p for p in wanted if p not in available]
    if missing:
        log.warning("execution providers not available in this onnxruntime build: %s", ", ".join(missing))
    chosen = [p for p in wanted if p in available and p != CPU]
    why_not_cuda = cuda_unavailable(device_id) if CUDA in chosen else None
    if why_not_cuda:
        log.warning("not using %s: %s", CUDA, why_not_cuda)
        chosen.remove(CUDA)
    return [*chosen, CPU], why_not_cuda


def session_options(provider: str, intra_op_threads: int, shared_pool: bool,
                    profile_prefix: str | None = None, spinning: bool = True, cpu_arena: bool = True
                    ) -> ort.SessionOptions:
    """Options of one session whose graph runs on `provider` (see the module docstring); ORT's
    profiler writes `<profile_prefix>_<date>.json` when a prefix is given (bench/engines/profile.py)."""
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_cpu_mem_arena = cpu_arena
    if profile_prefix:
        so.enable_profiling, so.profile_file_prefix = True, profile_prefix
    if shared_pool:
        so.use_per_session_threads = False
    else:
        so.intra_op_num_threads, so.inter_op_num_threads = intra_op_threads, 1
    if provider != CPU or not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if provider != CPU:
        so.add_session_config_entry(RECORD_PLACEMENT, "1")
    else:  # int8 products that cannot saturate on CPUs without VNNI (interface/sessions.py)
        for key, value in cpu_session_config(cpu_flags()).items():
            so.add_session_config_entry(key, value)
    return so


def disabled_optimizers(provider: str) -> list[str]:
    """Graph rewrites to leave out for a graph that runs on `provider`."""
    return list(CPU_DISABLED_OPTIMIZERS) if provider == CPU else []


@dataclass
class Sessions:
    """Encoder and decoder sessions and the providers ORT actually uses."""

    encoder: ort.InferenceSession
    decoder: ort.InferenceSession
    providers: list[str]
    shared_pool: bool
    why_not_cuda: str | None = None  # why CUDA was not asked for, when it was requested
    options: dict[str, dict[str, str]] = field(default_factory=dict)  # provider options passed to ORT
    files: dict[str, Path] = field(default_factory=dict)  # {"encoder": path, "decoder": path} opened
    huge_page_bytes: int = 0  # packed weights backed by huge pages (service/ops/hugepages.py)

    @property
    def provider(self) -> str:
        """The first provider of the decoder session: the one doing the work."""
        return self.providers[0]

    @property
    def kv_cache(self) -> str:
        """Self-attention cache layout of the decoder: "inplace" if it takes seqlens_k, else "concat"."""
        return "inplace" if SEQLENS_K in {i.name for i in self.decoder.get_inputs()} else "concat"

    @property
    def cache_dtype(self) -> type:
        """Element type of the KV cache inputs (float32, or float16 for an fp16 variant)."""
        by_name = {i.name: i.type for i in self.decoder.get_inputs()}
        return ORT_DTYPES[by_name[past_name(0, "encoder", "key")]]


def _open(path: Path, providers: list[str], options: dict[str, dict[str, str]], intra_op_threads: int,
          shared: bool, profile_prefix: str | None, spinning: bool = True, cpu_arena: bool = True
          ) -> ort.InferenceSession:
    """One session on `providers` with the options of the first; no run-time fallback."""
    so = session_options(providers[0], intra_op_threads, shared, profile_prefix, spinning, cpu_arena)
    if providers[0] == CUDA:  # every model's sessions on a device share one arena
        cuda = options.get(CUDA, {})
        if ensure_shared_cuda_allocator(int(cuda.get("device_id", 0)), cuda):
            so.add_session_config_entry(USE_ENV_ALLOCATORS, "1")
    with_opts = [(p, options.get(p, {})) for p in providers]
    session = ort.InferenceSession(str(path), so, providers=with_opts,
                                   disabled_optimizers=disabled_optimizers(providers[0]))
    session.disable_fallback()
    return session


def _use_global_pool(provider: str, shared_pool: bool, threads: int) -> bool:
    """Whether sessions on `provider` use ORT's global pool: on the CPU when shared_pool asks for it,
    and on any provider once the process has one (ORT then refuses per-session pools)."""
    if provider == CPU and shared_pool:
        return ensure_global_thread_pool(threads)
    with _pool_lock:
        return _pool_threads is not None


GraphFiles = Callable[[str], Mapping[str, Path]]  # provider -> {"encoder": path, "decoder": path}


def open_sessions(
    graph_files: GraphFiles,
    providers: Sequence[str] | None = None,
    provider_options: dict[str, dict[str, Any]] | None = None,
    intra_op_threads: int = 0,
    shared_pool: bool = True,
    profile_prefix: str | None = None,
    why_not_cuda: str | None = None,
    cpu_arena: bool = True,
) -> Sessions:
    """Create both sessions on `providers` (already planned by plan_providers; CPU added last if
    missing), each from the files `graph_files` gives for the provider really in use and with
    that provider's options; then the pages that creating the sessions read through the bundle's
    mappings are dropped (`drop_file_pages`). On the CPU, the weights the kernels packed are backed by
    huge pages (`huge_pages_for`); `cpu_arena` False opens them without ORT's CPU arena."""
    planned = [p for p in (providers or [CPU]) if p != CPU] + [CPU]
    options = {p: {str(k): str(v) for k, v in (provider_options or {}).get(p, {}).items()} for p in planned}
    prefix = {g: profile_prefix and f"{profile_prefix}_{g}" for g in ("encoder", "decoder")}

    def encoder_on(providers_: list[str]) -> tuple[ort.InferenceSession, bool]:
        """The encoder session on providers_, and whether it uses ORT's global pool."""
        shared_ = _use_global_pool(providers_[0], shared_pool, intra_op_threads)
        # without the shared pool, an idle spinning encoder pool would starve the decoder
        return _open(graph_files(providers_[0])["encoder"], providers_, options, intra_op_threads, shared_,
                     prefix["encoder"], spinning=shared_ or not shared_pool, cpu_arena=cpu_arena), shared_

    with huge_pages_for(planned[0] == CPU) as collapsed:  # the packed weights (service/ops/hugepages.py)
        enc, shared = encoder_on(planned)
        in_use = list(enc.get_providers())
        if in_use[0] != planned[0]:  # ORT fell back while creating it: the files and options of that one
            log.warning("asked ONNX Runtime for %s but it uses %s", planned[0], in_use[0])
            planned = in_use
            enc, shared = encoder_on(planned)
        files = dict(graph_files(planned[0]))
        dec = _open(files["decoder"], planned, options, intra_op_threads, shared, prefix["decoder"],
                    cpu_arena=cpu_arena)
        in_use = list(dec.get_providers())
        # what prepacking read stays mapped where a gather reads it (service/ops/mapped.py)
        folders = {Path(f).parent for f in files.values()}
        dropped = drop_file_pages(p for d in folders for p in d.iterdir() if p.is_file())
        log.debug("dropped %.1f MiB of mapped weights pages", dropped / 2**20)
    log.info("ONNX Runtime providers in use: %s (shared thread pool: %s; packed weights in huge pages: "
             "%.0f MiB)", in_use, shared, sum(collapsed) / 2**20)
    return Sessions(enc, dec, in_use, shared, why_not_cuda, {p: options.get(p, {}) for p in in_use},
                    files, sum(collapsed))


class PlacementUnknown(RuntimeError):
    """ONNX Runtime could not say where a session's nodes run (not recorded, or nothing recorded)."""


def placement(session: ort.InferenceSession) -> dict[str, list[tuple[str, str]]]:
    """{provider: [(op_type, node name)]} as ONNX Runtime assigned the session's nodes; PlacementUnknown
    when the session did not record it (only sessions on a provider other than the CPU do) or recorded
    no node: an empty table would pass any check."""
    try:
        subgraphs = session.get_provider_graph_assignment_info()
    except Exception as exc:  # noqa: BLE001 - ORT raises its own Fail type
        raise PlacementUnknown(f"ONNX Runtime did not record where the nodes run: {exc}") from exc
    placed: dict[str, list[tuple[str, str]]] = {}
    for subgraph in subgraphs:
        placed.setdefault(subgraph.ep_name, []).extend((n.op_type, n.name) for n in subgraph.get_nodes())
    if not any(placed.values()):
        raise PlacementUnknown("ONNX Runtime recorded the placement of no node")
    return placed


def misplaced_nodes(session: ort.InferenceSession, provider: str, host_nodes: Collection[str] = ()
                    ) -> list[str]:
    """"op_type name (provider)" of every compute node not on `provider`: all but ORT's copies,
    shape reads, and `host_nodes` (the bundle's integer-only nodes, which ORT may keep on the host)."""
    return [f"{op} {name} ({ep})" for ep, nodes in sorted(placement(session).items()) if ep != provider
            for op, name in nodes if op not in NOT_COMPUTE_OPS and name not in host_nodes]


def check_provider(sessions: Sessions, required: str | None, host_nodes: dict[str, Collection[str]]) -> None:
    """Warn about compute nodes off the provider in use; with `required`, raise ProviderUnavailable
    unless it is the provider in use with every compute node on it."""
    if required and sessions.provider != required:
        why = f": {sessions.why_not_cuda}" if required == CUDA and sessions.why_not_cuda else ""
        raise ProviderUnavailable(
            f"{required} is required (--require-provider) but ONNX Runtime uses {sessions.provider}{why}")
    if sessions.provider == CPU:
        return
    opened = {"encoder": sessions.encoder, "decoder": sessions.decoder}
    for graph, session in opened.items():
        try:
            misplaced = misplaced_nodes(session, sessions.provider, host_nodes.get(graph, ()))
        except PlacementUnknown as exc:
            text = f"the placement of the {graph}'s nodes on {sessions.provider} cannot be checked: {exc}"
            if required:
                raise ProviderUnavailable(f"{text} (--require-provider {required})") from exc
            log.warning("%s", text)
            continue
        if not misplaced:
            continue
        text = (f"{len(misplaced)} compute nodes of the {graph} are not on {sessions.provider}: "
                f"{', '.join(misplaced)}")
        if required:
            raise ProviderUnavailable(f"{text} (--require-provider {required})")
        log.warning("%s; they run elsewhere with copies around them", text)
