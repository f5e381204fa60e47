"""The IO-binding backend's count of bytes between host and device (on the CPU device)."""

from __future__ import annotations

import numpy as np

from service.domain.types import DecodeOptions
from service.runtime.runner import Runner


def test_each_step_counts_its_host_inputs_and_the_outputs_read_back(tiny_bundle, texts):
    bound = Runner(tiny_bundle, providers=["CPUExecutionProvider"], io_binding=True)
    counted = bound.backend.transfers
    assert counted.decoder_steps == 0 and counted.per_step() == {"to_device": 0.0, "to_host": 0.0}
    ids = bound.encode_texts(texts[:3])
    hyps = bound.translate(ids, DecodeOptions(max_output_tokens=6), max_rows=3)
    assert counted.encoder_runs >= 1 and counted.encoder_to_device > 0 and counted.encoder_to_host == 0
    steps = counted.decoder_steps
    assert steps >= max(len(h[0].tokens) for h in hyps)
    vocab, itemsize = bound.config["vocab_size"], np.dtype(bound.sessions.cache_dtype).itemsize
    # every step reads back at least one row's log-probs over the vocabulary, at most three rows' (+ a bit)
    assert vocab * itemsize <= counted.step_to_host / steps
    assert counted.step_to_host / steps < 3 * (vocab + 64) * itemsize + 3 * 64 * 4 * 2
    # and sends ids, positions and lengths: a few int32/int64 per row, never the cache
    assert 0 < counted.per_step()["to_device"] < 3 * 64
