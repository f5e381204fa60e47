"""Checkpoints: one file with weights, config, tokenizer reference, step and metrics."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from model.config import ModelConfig
from model.transformer import Transformer


def save_checkpoint(path: Path, model: Transformer, step: int, tokenizer: str, **extra: Any) -> None:
    """Write atomically (tmp file + rename) so an interrupted save never leaves a broken file."""
    state = {
        "model": model.state_dict(),
        "config": model.cfg.to_dict(),
        "tokenizer": tokenizer,  # file name of tokenizer.json, relative to the checkpoint
        "step": step,
        **extra,
    }
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def load_checkpoint(path: str | Path, device: str = "cpu") -> tuple[Transformer, dict[str, Any]]:
    """Load a checkpoint with weights_only=True; return the model (eval mode) and the raw dict."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    state = torch.load(path, map_location=device, weights_only=True)
    model = Transformer(ModelConfig.from_dict(state["config"])).to(device)
    model.load_state_dict(state["model"])
    model.eval()
    return model, state


def tokenizer_path(checkpoint: str | Path, state: dict[str, Any]) -> Path:
    """Where the checkpoint's tokenizer.json lives."""
    return Path(checkpoint).parent / state["tokenizer"]


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
