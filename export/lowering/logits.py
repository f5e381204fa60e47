"""The decoder's logits and their log-normalizer, read from the model as it is.

model/transformer.py's `Generator` returns log_softmax(x W + b); the logits x W + b are the output of
its `proj`. `captured_logits` records that output with a forward hook, so the model runs unchanged (in
PyTorch, and while the exporter traces it), and the log-normalizer is their logsumexp over the
vocabulary (`log_normalizer`: read off the log-probs, no second exp): logits = logprobs +
log_normalizer[..., None]. The decoder graphs output it
(`interface/names.py` `LOG_NORMALIZER`, export/export.py) and verification compares it with
`decode_with_normalizer` (export/verify/base.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn

from model.transformer import KV, Transformer


@contextmanager
def captured_logits(model: Transformer) -> Iterator[list[Tensor]]:
    """A list that receives the logits (B, T, V) of every run of model's generator while inside."""
    seen: list[Tensor] = []

    def record(_module: nn.Module, _inputs: Any, output: Tensor) -> None:
        seen.append(output)

    handle = model.generator.proj.register_forward_hook(record)
    try:
        yield seen
    finally:
        handle.remove()


def log_normalizer(logits: Tensor, logprobs: Tensor) -> Tensor:
    """logsumexp of the logits over the vocabulary, (..., V) -> (...), read off the log-probs computed from
    them: logprobs = logits - lse, so lse = max(logits) - max(logprobs). Two max passes and no exp (a
    second logsumexp in the graph cost the tiny default model's decoder step about a tenth); the
    rounding is that of the largest log-prob, near 0."""
    return logits.amax(dim=-1) - logprobs.amax(dim=-1)


def decode_with_normalizer(model: Transformer, *args: Any, **kwargs: Any
                           ) -> tuple[Tensor, list[KV], Tensor, Tensor]:
    """model.decode(*args, **kwargs) -> log-probs, presents, cross-attention weights, and the
    log-normalizer (B, T) of the logits the log-probs came from."""
    with captured_logits(model) as seen:
        logp, presents, weights = model.decode(*args, **kwargs)
    (logits,) = seen
    return logp, presents, weights, log_normalizer(logits, logp)
