"""ONNX Runtime sessions of a bundle: providers, one shared CPU thread pool.

Two sessions that each own an intra-op pool spin on the same cores and starve each other
(docs/performance.md): by default both sessions use ORT's process-wide pool, created once
with `onnxruntime.set_global_thread_pool_sizes` (public API) before the first such session.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from interface.names import (
    SEQLENS_K,
    past_name,
)

log = logging.getLogger(__name__)

CPU, CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"
CROSS_KEY = past_name(0, "encoder", "key")  # its shape gives the decoder's source length S
# ONNX Runtime's CPU SkipLayerNormalization is several times slower than Add + LayerNormalization
# once there are more than a few rows (docs/performance.md): on the CPU, keep them unfused.
CPU_DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)
DEFAULT_PROVIDERS = (CUDA, CPU)
ORT_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}

_pool_lock = threading.Lock()
_pool_threads: int | None = None  # size we asked for; -1 when someone else created the pool


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


def select_providers(requested: list[str] | tuple[str, ...] | None) -> list[str]:
    """Requested providers (default CUDA, CPU) that this onnxruntime build offers, CPU last."""
    available = ort.get_available_providers()
    wanted = list(requested or DEFAULT_PROVIDERS)
    missing = [p for p in wanted if p not in available]
    if missing:
        log.warning("execution providers not available in this build: %s", ", ".join(missing))
    chosen = [p for p in wanted if p in available and p != CPU]
    return [*chosen, CPU]


def session_options(intra_op_threads: int, shared_pool: bool, profile_prefix: str | None = None
                    ) -> ort.SessionOptions:
    """Options of one session: the global pool if shared, else its own pool of intra_op_threads;
    ORT's profiler writes `<profile_prefix>_<date>.json` when a prefix is given (bench/profile.py)."""
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if profile_prefix:
        so.enable_profiling, so.profile_file_prefix = True, profile_prefix
    if shared_pool:
        so.use_per_session_threads = False
    else:
        so.intra_op_num_threads, so.inter_op_num_threads = intra_op_threads, 1
    return so


@dataclass
class Sessions:
    """Encoder and decoder sessions and the providers ORT actually uses."""

    encoder: ort.InferenceSession
    decoder: ort.InferenceSession
    providers: list[str]
    shared_pool: bool

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


def open_sessions(
    encoder_path: Path,
    decoder_path: Path,
    providers: list[str] | tuple[str, ...] | None = None,
    provider_options: dict[str, dict[str, Any]] | None = None,
    intra_op_threads: int = 0,
    shared_pool: bool = True,
    profile_prefix: str | None = None,
) -> Sessions:
    """Create both sessions; report the providers in use (CUDA silently falls back to CPU)."""
    chosen = select_providers(providers)
    options = provider_options or {}
    shared = shared_pool and ensure_global_thread_pool(intra_op_threads)
    with_opts = [(p, {str(k): str(v) for k, v in options.get(p, {}).items()}) for p in chosen]
    so = session_options(intra_op_threads, shared, profile_prefix and f"{profile_prefix}_decoder")
    enc_so = session_options(intra_op_threads, shared, profile_prefix and f"{profile_prefix}_encoder")
    if shared_pool and not shared:  # fallback: an idle spinning encoder pool would starve the decoder
        enc_so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    disabled = list(CPU_DISABLED_OPTIMIZERS) if chosen == [CPU] else []
    enc = ort.InferenceSession(str(encoder_path), enc_so, providers=with_opts, disabled_optimizers=disabled)
    working = [(p, o) for p, o in with_opts if p in enc.get_providers()]  # don't retry a failed provider
    dec = ort.InferenceSession(str(decoder_path), so, providers=working, disabled_optimizers=disabled)
    in_use = dec.get_providers()
    if chosen[0] not in in_use:
        log.warning("requested %s but ONNX Runtime uses %s (missing libraries?)", chosen[0], in_use)
    log.info("ONNX Runtime providers in use: %s (shared thread pool: %s)", in_use, shared)
    return Sessions(enc, dec, list(in_use), shared)
