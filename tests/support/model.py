"""A small random PyTorch model, and the operators of an exported graph."""

from __future__ import annotations

from pathlib import Path

import torch

from model.config import ModelConfig
from model.transformer import Transformer


def tiny(norm_first: bool = False, **kw) -> Transformer:
    """A small random model in eval mode."""
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=40, d_model=16, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
                      d_ff=32, dropout=0.0, max_len=64, norm_first=norm_first, **kw)
    return Transformer(cfg).eval()


def graph_ops(path: Path) -> list[tuple[str, str]]:
    """(domain, op_type) of every node of an ONNX graph file."""
    import onnx

    return [(n.domain, n.op_type) for n in onnx.load(str(path)).graph.node]
