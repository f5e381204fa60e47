"""IO-binding backend: the decoder's KV cache stays in device memory between steps (CUDA provider).

Each step binds the small inputs (ids, positions, masks) from host memory, the self-attention
cache and the cross-attention K/V as device OrtValues, and binds every `present.*` output to the
device so ORT allocates it there; those OrtValues are fed back as `past_key_values.*` next step.
Only log-probs and cross-attention weights come back to the host. Restructuring the cache (rows
joining or leaving, beam reordering, dropping columns) goes through host memory via
`to_host`/`to_device`: free for greedy steady state, one round trip per step with beams.
With an in-place decoder (export/inplace.py) each self-attention cache OrtValue is bound as its
own `present.*` output as well, so steps write into it and nothing is reallocated
(service/kvcache.py, InplaceCache in device mode). Selected by the Runner only when the CUDA
provider is really active (or when asked to, which
the tests do on the CPU device to exercise the binding logic).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort

from export.names import CROSS_ATTENTIONS, LOGPROBS, decoder_outputs, self_cache_io
from service.sessions import Sessions


class IoBindingBackend:
    """Runs the decoder through IO binding with device-resident cache OrtValues."""

    def __init__(self, sessions: Sessions, n_layers: int, device: str = "cuda", device_id: int = 0) -> None:
        self.sessions, self.device, self.device_id = sessions, device, device_id
        self.presents = decoder_outputs(n_layers)[1:-1]
        self.in_place = self_cache_io(n_layers)

    def encode(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Cross-attention K/V as host arrays (the batch places them, then uploads)."""
        return self.sessions.encoder.run(None, feeds)

    def decode(
        self, feeds: dict[str, np.ndarray], past: dict[str, Any], inplace: bool = False
    ) -> tuple[np.ndarray, np.ndarray, list[Any]]:
        """One decoder run; presents stay on the device as OrtValues.

        inplace (export/inplace.py): each self-attention cache OrtValue is bound as its own
        present too, so the decoder writes the new column into it; no presents returned.
        """
        binding = self.sessions.decoder.io_binding()
        binding.bind_output(LOGPROBS, "cpu")  # outputs come back in binding order
        binding.bind_output(CROSS_ATTENTIONS, "cpu")
        for name, arr in feeds.items():
            binding.bind_cpu_input(name, arr)
        for name, value in past.items():
            if isinstance(value, ort.OrtValue):
                binding.bind_ortvalue_input(name, value)
                if inplace and name in self.in_place:
                    binding.bind_ortvalue_output(self.in_place[name], value)
            else:  # empty cache at the first step: nothing worth uploading
                binding.bind_cpu_input(name, np.ascontiguousarray(value))
        if not inplace:
            for name in self.presents:
                binding.bind_output(name, self.device, self.device_id)
        self.sessions.decoder.run_with_iobinding(binding)
        out = binding.get_outputs()
        return self.to_host(out[0]), self.to_host(out[1]), [] if inplace else list(out[2:])

    def to_host(self, x: Any) -> np.ndarray:
        """Device cache tensor -> numpy array that owns its memory."""
        # copy=True: on the CPU device numpy() may be a view of memory that dies with the OrtValue
        return np.array(x.numpy(), copy=True) if isinstance(x, ort.OrtValue) else x

    def to_device(self, a: np.ndarray) -> Any:
        """Numpy -> device OrtValue (empty arrays stay on the host)."""
        if a.size == 0:
            return np.ascontiguousarray(a)
        return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a), self.device, self.device_id)
