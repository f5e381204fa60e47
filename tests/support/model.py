"""A small random PyTorch model, and the operators of an exported graph."""

from __future__ import annotations

from pathlib import Path

import torch

from model.config import ModelConfig
from model.transformer import Transformer

# T5's switches (export/hf/t5.py) on the tiny shape: relative position bias (8 buckets up to distance 6, so
# that the tests' sequences pass it), RMSNorm, gated gelu_tanh FFN, heads of 3 (4 x 3 != d_model 16),
# unscaled embeddings
T5_SWITCHES = dict(norm_first=True, position_table="relative", relative_buckets=8, relative_max_distance=6,
                   rms_norm=True, gated_ffn=True, activation="gelu_tanh", head_dim=3, scale_embedding=False)
LAYOUTS = {"post-LN": {}, "pre-LN": {"norm_first": True}, "T5": T5_SWITCHES}  # tiny()'s keyword arguments


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
