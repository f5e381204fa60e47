"""The bundle manifest: tokenizer copy, bundle.json with hashes, versions, I/O names and metrics.

See docs/bundle-format.md for the keys.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from interface import names
from model.checkpoint import file_sha256
from model.config import ModelConfig

# execution provider -> the variant (key of "variants") made for it; providers not listed use the base files
PROVIDER_VARIANTS = {"CUDAExecutionProvider": "fp16"}


def library_versions() -> dict[str, str]:
    """Versions of the libraries that produced the bundle."""
    import onnx
    import onnxruntime
    import onnxscript
    import torch

    return {"torch": torch.__version__, "onnx": onnx.__version__, "onnxscript": onnxscript.__version__,
            "onnxruntime": onnxruntime.__version__}


def copy_tokenizer(src: Path, bundle_dir: Path) -> Path:
    """Copy the checkpoint's tokenizer.json into the bundle."""
    if not src.is_file():
        raise FileNotFoundError(f"tokenizer file not found: {src}")
    return Path(shutil.copyfile(src, bundle_dir / names.TOKENIZER_FILE))


def file_entries(bundle_dir: Path) -> dict[str, dict[str, Any]]:
    """name -> {sha256, bytes} of every file of the bundle except bundle.json."""
    return {
        p.name: {"sha256": file_sha256(p), "bytes": p.stat().st_size}
        for p in sorted(bundle_dir.iterdir())
        if p.is_file() and p.name != names.BUNDLE_FILE
    }


def io_spec(n_layers: int, kv_cache: str = "concat") -> dict[str, Any]:
    """Input/output names and dynamic axes of the graphs, as declared in interface/names.py."""
    return {
        "encoder": {"inputs": names.encoder_inputs(), "outputs": names.encoder_outputs(n_layers)},
        "decoder": {"inputs": names.decoder_inputs(n_layers, kv_cache),
                    "outputs": names.decoder_outputs(n_layers)},
        "dynamic_axes": names.dynamic_axes(n_layers, kv_cache),
    }


def build_manifest(
    bundle_dir: Path,
    cfg: ModelConfig,
    checkpoint_sha256: str,
    step: int,
    onnx_info: dict[str, Any],
    metrics: dict[str, Any],
    variants: dict[str, dict[str, str]] | None = None,
    verification: dict[str, Any] | None = None,
    host_nodes: dict[str, list[str]] | None = None,
    format_version: int = names.BUNDLE_FORMAT_VERSION,
    extra: dict[str, Any] | None = None,
    weights: dict[str, list[str]] | None = None,
    provider_variants: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The bundle.json content; hashes every file currently in bundle_dir.

    `extra`: the keys a format-2 bundle adds (interface/generation.py: tokenizer, generation,
    languages; and `pretrained`, where it came from), written after special_tokens. `provider_variants`:
    more provider -> variant entries (the CPU provider's, when the export makes a variant its default).
    """
    now = datetime.now(UTC)
    manifest: dict[str, Any] = {
        "format_version": format_version,
        "name": names.MODEL_NAME,
        "version": f"{now:%Y%m%d}-{checkpoint_sha256[:8]}",
        "created": now.isoformat(timespec="seconds"),
        "model": cfg.to_dict(),
        "special_tokens": {"pad": cfg.pad_id, "bos": cfg.bos_id, "eos": cfg.eos_id, "unk": cfg.unk_id},
        **(extra or {}),
        "files": file_entries(bundle_dir),
        "io": io_spec(cfg.n_decoder_layers, onnx_info.get("kv_cache", "concat")),
        "onnx": {**onnx_info, "versions": library_versions()},
        "checkpoint": {"sha256": checkpoint_sha256, "step": step},
        "metrics": metrics,
    }
    if variants:
        manifest["variants"] = variants
        for_providers = {p: v for p, v in PROVIDER_VARIANTS.items() if v in variants}
        for_providers |= {p: v for p, v in (provider_variants or {}).items() if v in variants}
        if for_providers:
            manifest["provider_variants"] = for_providers
    if weights:
        manifest["weights"] = weights  # data file -> the graph files reading their weights from it
    if host_nodes:
        manifest["host_nodes"] = host_nodes  # file -> its integer-only nodes (may run on the host)
    if verification:
        manifest["verification"] = verification  # extra key: max diffs and greedy agreement
    return manifest


def write_manifest(bundle_dir: Path, manifest: dict[str, Any]) -> Path:
    """Write bundle.json (pretty, stable key order)."""
    path = bundle_dir / names.BUNDLE_FILE
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return path
