"""Verification helpers for the in-place decoder interface (kv_cache "inplace", export/lowering/inplace.py).

Used by export/verify/base.py: which shape a case is run with, the rows' past lengths, past buffers
with garbage in every column a row does not own, the PyTorch reference of each row (its own
`model.decode` over its own concatenated cache) and a decoder run with the cache buffers bound as
past and present (IO binding), which is how the service runs such a decoder.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnxruntime as ort
import torch

from export.lowering.logits import decode_with_normalizer
from export.verify.cases import Case
from interface import names
from model.transformer import Transformer

GARBAGE_SCALE = 10.0  # stale cache columns: far from real keys/values, so reading one shows


def run_shape(case: Case, kv_cache: str) -> Case:
    """The case actually run: GroupQueryAttention takes several new tokens after a cache (and the
    cross-attention's encoder K/V count as one) only for batch 1."""
    if kv_cache == "inplace" and case.new_len > 1:
        return replace(case, batch=1)
    return case


def row_past_lens(case: Case, kv_cache: str) -> list[int]:
    """Cached length of each row: in-place one-token steps give rows past_len, past_len-1, ... (>= 0)."""
    if kv_cache == "inplace" and case.new_len == 1:
        return [max(case.past_len - i, 0) for i in range(case.batch)]
    return [case.past_len] * case.batch


def garbage_cache(n: int, shape: tuple[int, ...], rng: np.random.Generator) -> list[np.ndarray]:
    """n float32 buffers of random garbage (rows' real columns are written over by the caller)."""
    return [(rng.standard_normal(shape) * GARBAGE_SCALE).astype(np.float32) for _ in range(n)]


def row_references(
    model: Transformer, tokens: np.ndarray, lens: list[int], src_mask: torch.Tensor,
    cross_t: list[tuple[torch.Tensor, torch.Tensor]], past: list[np.ndarray], rng: np.random.Generator,
) -> list[tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor, torch.Tensor]]:
    """Per row r: a random prefix of lens[r] tokens decoded into past[*][r, :, :lens[r]], then
    `model.decode` of tokens[r] at positions lens[r].. over that cache -> (logprobs, presents, weights,
    log-normalizer of the logits)."""
    cfg, new_len = model.cfg, tokens.shape[1]
    refs = []
    for r, p in enumerate(lens):
        cross_r, mask_r = [(k[r : r + 1], v[r : r + 1]) for k, v in cross_t], src_mask[r : r + 1]
        past_r = None
        if p:
            prefix = torch.from_numpy(rng.integers(4, cfg.vocab_size, (1, p)))
            _, past_r, _ = model.decode(prefix, cross_r, mask_r)
            for buf, t in zip(past, [t for kv in past_r for t in kv], strict=True):
                buf[r, :, :p] = t[0].numpy()
        positions = torch.arange(p, p + new_len)[None]
        new = torch.from_numpy(tokens[r : r + 1])
        refs.append(decode_with_normalizer(model, new, cross_r, mask_r, past_r, positions))
    return refs


class BoundCache:
    """Decoder runs with numpy cache buffers bound as both past and present (updated in place)."""

    def __init__(self, dec: ort.InferenceSession, buffers: list[np.ndarray]) -> None:
        """buffers: flat [k0, v0, k1, v1, ...] self-attention caches (B, H, M, Dh), C-contiguous."""
        self.dec, self.buffers = dec, buffers
        n = len(buffers) // 2
        self.values = {  # OrtValues over the numpy memory (no copy on CPU)
            (names.past_name(i, "decoder", kv), names.present_name(i, "decoder", kv)):
                ort.OrtValue.ortvalue_from_numpy(buffers[2 * i + j])
            for i in range(n) for j, kv in enumerate(("key", "value"))
        }

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """One step; the feeds' decoder past entries are ignored (the bound buffers are used); -> logprobs."""
        binding = self.dec.io_binding()
        bound = {past for past, _ in self.values}
        for name, value in feeds.items():
            if name not in bound:
                binding.bind_cpu_input(name, value)
        binding.bind_output(names.LOGPROBS)  # output 0; cross_attentions and log_normalizer are not computed
        for (past, present), value in self.values.items():
            binding.bind_ortvalue_input(past, value)
            binding.bind_ortvalue_output(present, value)
        self.dec.run_with_iobinding(binding)
        return binding.get_outputs()[0].numpy()
