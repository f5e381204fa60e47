"""The error of a Hugging Face checkpoint that model/'s Transformer cannot carry (export/hf/)."""

from __future__ import annotations


class UnsupportedModel(ValueError):
    """The checkpoint's family or one of its settings has no counterpart in model/'s Transformer."""
