"""transformers' activation names (its ACT2FN keys, as configs state them) -> model/'s activations
(model/config.py ACTIVATIONS): one table for every family."""

from __future__ import annotations

from export.hf.errors import UnsupportedModel

HF_ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",  # erf form
    "gelu_python": "gelu",
    "gelu_new": "gelu_tanh",  # the tanh approximation: T5 v1.1, Flan-T5, mT5
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "silu": "silu",
    "swish": "silu",  # Marian / OPUS-MT
}


def our_activation(name: str, key: str) -> str:
    """model/'s activation for transformers' `name`, read from the config's `key`; UnsupportedModel naming
    both otherwise."""
    if name not in HF_ACTIVATIONS:
        raise UnsupportedModel(f"{key} {name!r} is not supported (known: {', '.join(HF_ACTIVATIONS)})")
    return HF_ACTIVATIONS[name]
