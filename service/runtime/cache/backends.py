"""Backends: how a DecodeBatch runs the encoder and decoder graphs and where its KV cache lives.

Each backend has a `memory` (service/runtime/cache/devicemem.py) that holds the cache tensors and copies their
rows; the KV caches (service/runtime/cache/kvcache.py) restructure themselves through it only.

`HostBackend` (CPU provider): the cache is numpy arrays in host memory (`HostArrays`); an in-place decoder
(export/lowering/inplace.py) runs through a `DecoderBinding` that binds each cache array as its own past input
and present output, so ONNX Runtime writes the new column into it and nothing is copied.

`IoBindingBackend` (CUDA provider): the cache is device OrtValues (`DeviceMemory`) and never goes through host
memory. The encoder's cross-attention K/V are bound as device outputs and copied into the cache on the device;
each decoder step binds the small inputs (ids, positions, lengths, masks) from host memory and the cache
tensors (views of the first n_rows rows of buffers with spare rows) as device OrtValues. With an in-place
decoder each self-attention cache view is bound as its own `present.*` output too, so the decoder writes the
new column into it; otherwise every `present.*` output is bound to the device and the OrtValues ORT allocates
become the next past. Rows joining or leaving, compaction and beam reordering are device-to-device row copies;
only log-probs, cross-attention weights and the log-normalizer come back to the host. The Runner selects it
only when the CUDA provider is really active (or when asked to, which the tests do on the CPU device to
exercise the binding and device-memory logic).

`IoBindingBackend.transfers` counts what crosses between host and device (`Transfers`): the bytes each
encoder run and each decoder step binds from host memory and reads back into it, so a profile can state
the bytes copied per step (bench/gpu). Device-to-device row copies and the cache are not counted: they
never cross.

Every run first calls the backend's `fault_hook` (tests inject failures and stalls through it).

`decode` returns (log-probs, cross-attention, presents, log-normalizer): the last is the logsumexp of the
step's logits, float32 (n_rows, new_len), so that logits = log-probs + normalizer[..., None]
(`interface/names.py` `LOG_NORMALIZER`), or None where the bundle's decoder was exported before that output
existed (`has_normalizer` False); such a bundle runs exactly as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import onnxruntime as ort

from interface.names import (
    CROSS_ATTENTIONS,
    INPUT_IDS,
    LOG_NORMALIZER,
    LOGPROBS,
    decoder_outputs,
    self_cache_io,
)
from service.runtime.cache.devicemem import CacheTensor, DeviceMemory, HostArrays, Memory
from service.runtime.model.sessions import CROSS_KEY, ORT_DTYPES, Sessions

FaultHook = Callable[[str], None]  # called with "encoder" or "decoder" before each run
# one decoder run: log-probs (B, T, V), cross-attention (B, T, S), presents, log-normalizer (B, T) or None
Decoded = tuple[np.ndarray, np.ndarray, list[CacheTensor], np.ndarray | None]


def has_log_normalizer(session: ort.InferenceSession) -> bool:
    """Whether a decoder session outputs `log_normalizer` (decoders exported before it do not)."""
    return LOG_NORMALIZER in {o.name for o in session.get_outputs()}


class Backend(Protocol):
    """What a DecodeBatch needs to run the graphs, and the memory its cache tensors live in."""

    memory: Memory  # where cache tensors live and how their rows are copied
    fault_hook: FaultHook | None
    has_normalizer: bool  # the decoder outputs log_normalizer (decode's 4th value is not None)

    def encode(self, feeds: dict[str, np.ndarray]) -> list[CacheTensor]:
        """Cross-attention K/V of every decoder layer, each (B, H, S, Dh), in the backend's memory."""
        ...

    def decode(self, feeds: dict[str, np.ndarray], past: dict[str, CacheTensor], inplace: bool = False
               ) -> Decoded:
        """One decoder run: log-probs (B, T, V), cross-attention (B, T, S), presents (none if inplace),
        log-normalizer float32 (B, T) on the host (None when `has_normalizer` is False)."""
        ...

    def to_host(self, x: CacheTensor) -> np.ndarray:
        """A cache tensor as a numpy array (tests and diagnostics; never on the decode path)."""
        ...


def _float32(x: np.ndarray) -> np.ndarray:
    """x as float32 (no copy when it already is: the exported graphs output float32)."""
    return x.astype(np.float32, copy=False)


class DecoderBinding:
    """A decoder IO binding that rebinds only what changed since the last run.

    Arrays are bound through OrtValues over their own memory, so the caller may edit them in
    place between runs (next tokens, lengths, cache rows) and the next run sees the edits; an
    array is rebound only when a different object comes under its name. The bound arrays are
    kept alive, so an identity check is enough. Self-attention caches of an in-place decoder
    are bound as their present outputs too; log-probs, cross-attention and the log-normalizer (where
    the decoder has it) go to output buffers reused while their shapes stay the same.
    """

    def __init__(self, session: ort.InferenceSession, in_place: dict[str, str]) -> None:
        self.session, self.in_place = session, in_place
        self.io = session.io_binding()
        outputs = {o.name: o for o in session.get_outputs()}
        self._out_dtypes = (ORT_DTYPES[outputs[LOGPROBS].type], ORT_DTYPES[outputs[CROSS_ATTENTIONS].type])
        self._lse_dtype = ORT_DTYPES[outputs[LOG_NORMALIZER].type] if LOG_NORMALIZER in outputs else None
        self._vocab = int(outputs[LOGPROBS].shape[-1])
        self._bound: dict[str, np.ndarray | None] = {}
        self._out: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None

    def bind(self, name: str, arr: np.ndarray) -> None:
        """Bind arr under name unless it is already the bound object."""
        if self._bound.get(name) is arr:
            return
        if not arr.flags.c_contiguous:  # bound as a copy: rebound at every run
            self.io.bind_cpu_input(name, np.ascontiguousarray(arr))
            self._bound[name] = None
            return
        value = ort.OrtValue.ortvalue_from_numpy(arr)  # shares arr's memory
        self.io.bind_ortvalue_input(name, value)
        if name in self.in_place:
            self.io.bind_ortvalue_output(self.in_place[name], value)
        self._bound[name] = arr

    def outputs(self, rows: int, steps: int, src: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Output buffers (rows, steps, V), (rows, steps, S) and (rows, steps) (None without a
        log-normalizer), bound; reused while shapes match."""
        if self._out is None or self._out[1].shape != (rows, steps, src):
            logp = np.empty((rows, steps, self._vocab), self._out_dtypes[0])
            attn = np.empty((rows, steps, src), self._out_dtypes[1])
            self.io.bind_ortvalue_output(LOGPROBS, ort.OrtValue.ortvalue_from_numpy(logp))
            self.io.bind_ortvalue_output(CROSS_ATTENTIONS, ort.OrtValue.ortvalue_from_numpy(attn))
            lse = None
            if self._lse_dtype is not None:
                lse = np.empty((rows, steps), self._lse_dtype)
                self.io.bind_ortvalue_output(LOG_NORMALIZER, ort.OrtValue.ortvalue_from_numpy(lse))
            self._out = (logp, attn, lse)
        return self._out

    def run(self, feeds: dict[str, np.ndarray], past: dict[str, np.ndarray]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """One run; log-probs, cross-attention and log-normalizer are views of buffers the next run
        overwrites."""
        for name, arr in feeds.items():
            self.bind(name, arr)
        for name, arr in past.items():
            self.bind(name, arr)
        rows, steps = feeds[INPUT_IDS].shape
        out = self.outputs(rows, steps, past[CROSS_KEY].shape[2])  # (rows, H, S, Dh)
        self.session.run_with_iobinding(self.io)
        return out


class _SessionBackend:
    """What both backends share: the sessions, the fault hook, and reading cache tensors."""

    memory: Memory

    def __init__(self, sessions: Sessions, n_layers: int) -> None:
        self.sessions = sessions
        self.fault_hook: FaultHook | None = None
        self.in_place = self_cache_io(n_layers)  # past name -> present name of the self-attention cache
        self.has_normalizer = has_log_normalizer(sessions.decoder)

    def _before(self, stage: str) -> None:
        """Call the fault hook, if any, before a run of "encoder" or "decoder"."""
        if self.fault_hook is not None:
            self.fault_hook(stage)

    def to_host(self, x: CacheTensor) -> np.ndarray:
        """A cache tensor as a numpy array (tests and diagnostics; never on the decode path)."""
        return self.memory.to_host(x)


class HostBackend(_SessionBackend):
    """Runs both graphs on numpy arrays: the KV cache lives in host memory (CPU provider).

    A decoder with an in-place cache (export/lowering/inplace.py) runs through a `DecoderBinding` per
    thread: each self-attention cache array is bound as its past input and its present output
    (one OrtValue over the same memory), so ONNX Runtime writes the new column into it and
    copies nothing; inputs that did not change object since the last run are not rebound.
    """

    device = "cpu"

    def __init__(self, sessions: Sessions, n_layers: int) -> None:
        super().__init__(sessions, n_layers)
        self.memory = HostArrays()
        self.outputs = decoder_outputs(n_layers, self.has_normalizer)
        self._presents = slice(1, 1 + 2 * n_layers)
        assert self.outputs[0] == LOGPROBS and self.outputs[1 + 2 * n_layers] == CROSS_ATTENTIONS
        self._local = threading.local()  # the thread's DecoderBinding (a binding is not thread-safe)

    def encode(self, feeds: dict[str, np.ndarray]) -> list[CacheTensor]:
        """Cross-attention K/V of every decoder layer, each (B, H, S, Dh), as host arrays."""
        self._before("encoder")
        return self.sessions.encoder.run(None, feeds)

    def decode(
        self, feeds: dict[str, np.ndarray], past: dict[str, CacheTensor], inplace: bool = False
    ) -> Decoded:
        """One decoder run: log-probs (B, T, V), cross-attention (B, T, S), presents (B, H, P+T, Dh),
        log-normalizer float32 (B, T) or None (a decoder without that output).

        inplace: the self-attention arrays of `past` are updated in place; no presents returned,
        and the log-probs / cross-attention / log-normalizer are buffers that this thread's next run
        overwrites.
        """
        self._before("decoder")
        if not inplace:
            out = self.sessions.decoder.run(self.outputs, {**feeds, **past})
            lse = _float32(out[-1]) if self.has_normalizer else None
            return out[0], out[self._presents.stop], out[self._presents], lse
        binding = getattr(self._local, "binding", None)
        if binding is None:
            binding = self._local.binding = DecoderBinding(self.sessions.decoder, self.in_place)
        logp, attn, lse = binding.run(feeds, past)
        return logp, attn, [], None if lse is None else _float32(lse)


@dataclass
class Transfers:
    """Bytes between host and device, counted by the IO-binding backend since its start (or a reset)."""

    encoder_runs: int = 0
    decoder_steps: int = 0
    encoder_to_device: int = 0  # the encoder's host inputs
    encoder_to_host: int = 0  # nothing while its outputs stay on the device
    step_to_device: int = 0  # each decoder step's host inputs: ids, positions, lengths
    step_to_host: int = 0  # each decoder step's host outputs: log-probs, cross-attention, normalizer

    def per_step(self) -> dict[str, float]:
        """Mean bytes per decoder step each way (0 before any step)."""
        steps = max(self.decoder_steps, 1)
        return {"to_device": self.step_to_device / steps, "to_host": self.step_to_host / steps}


class IoBindingBackend(_SessionBackend):
    """Runs both graphs through IO binding; the KV cache is device OrtValues that stay on the device."""

    def __init__(self, sessions: Sessions, n_layers: int, device: str = "cuda", device_id: int = 0) -> None:
        super().__init__(sessions, n_layers)
        self.transfers = Transfers()
        self.device, self.device_id = device, device_id
        self.memory = DeviceMemory(device, device_id)
        self.presents = list(self.in_place.values())  # present.{i}.decoder.key/value, in the graph's order
        self._encoder_outputs = [o.name for o in sessions.encoder.get_outputs()]

    def encode(self, feeds: dict[str, np.ndarray]) -> list[CacheTensor]:
        """Cross-attention K/V of every decoder layer, each (B, H, S, Dh), as device OrtValues."""
        self._before("encoder")
        binding = self.sessions.encoder.io_binding()
        for name, arr in feeds.items():
            binding.bind_cpu_input(name, arr)
        for name in self._encoder_outputs:
            binding.bind_output(name, self.device, self.device_id)
        self.sessions.encoder.run_with_iobinding(binding)
        self.transfers.encoder_runs += 1
        self.transfers.encoder_to_device += sum(a.nbytes for a in feeds.values())
        return binding.get_outputs()

    def decode(
        self, feeds: dict[str, np.ndarray], past: dict[str, CacheTensor], inplace: bool = False
    ) -> Decoded:
        """One decoder run; presents stay on the device as OrtValues, log-probs, cross-attention and
        the log-normalizer (float32 (B, T), None for a decoder without it) come back to the host.

        inplace (export/lowering/inplace.py): each self-attention cache OrtValue is bound as its own
        present too, so the decoder writes the new column into it; no presents returned.
        """
        self._before("decoder")
        binding = self.sessions.decoder.io_binding()
        host = [LOGPROBS, CROSS_ATTENTIONS, *([LOG_NORMALIZER] if self.has_normalizer else [])]
        for name in host:  # outputs come back in binding order
            binding.bind_output(name, "cpu")
        for name, arr in feeds.items():
            binding.bind_cpu_input(name, arr)
        for name, value in past.items():
            binding.bind_ortvalue_input(name, value)
            if inplace and name in self.in_place:
                binding.bind_ortvalue_output(self.in_place[name], value)
        if not inplace:
            for name in self.presents:
                binding.bind_output(name, self.device, self.device_id)
        self.sessions.decoder.run_with_iobinding(binding)
        out = binding.get_outputs()
        # copies: on the CPU device numpy() is a view of memory that dies with the OrtValue
        logp, attn = (np.array(x.numpy(), copy=True) for x in out[:2])
        lse = np.array(out[2].numpy(), np.float32, copy=True) if self.has_normalizer else None
        counted = self.transfers
        counted.decoder_steps += 1
        counted.step_to_device += sum(np.asarray(a).nbytes for a in feeds.values())
        counted.step_to_host += logp.nbytes + attn.nbytes + (0 if lse is None else lse.nbytes)
        return logp, attn, [] if inplace else list(out[len(host):]), lse
