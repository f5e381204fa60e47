"""Tiny Hugging Face checkpoints of each supported family (tests/support/hf_models.py), built once per
session, and their bundles written by `python -m export.pretrained`'s code in every lowering."""

from __future__ import annotations

from pathlib import Path

import pytest

from export.verify.int8 import Int8Limits
from tests.support.hf_models import Shape

# the int8 variant, its greedy-agreement gate waived: the export checks it on random ids, where a tiny model's
# greedy picks are near-ties that int8 flips (test_pretrained_variants.py checks it on the texts instead)
INT8 = {"quantize": "int8", "int8_limits": Int8Limits(agreement=0.0)}
# name: (family, shape, bundle options); together: d_model 16 / 32, 1-2 layers, 2 / 4 heads, swish and
# relu, gelu, shared and separate embeddings, scaled and unscaled embeddings, sinusoid and learned positions,
# each lowering, fp16 on five, int8 on three
HF_MODELS = {
    "marian": ("marian", Shape(), {"fp16": True}),
    "marian-separate": ("marian", Shape(d_model=32, layers=(2, 2), heads=4, d_ff=64, activation="relu",
                                        shared=False, scale_embedding=False), {"attention": "fused"}),
    "m2m100": ("m2m100", Shape(activation="relu"), {"fp16": True}),
    "nllb": ("nllb", Shape(d_model=32, layers=(2, 1), heads=4, d_ff=64, activation="relu"),
             {"attention": "plain"}),
    "bart": ("bart", Shape(d_model=32, layers=(1, 2), heads=4, d_ff=64, activation="gelu",
                           scale_embedding=False), {"fp16": True, **INT8}),
    "mbart": ("mbart", Shape(d_model=32, heads=4, d_ff=64, activation="gelu"), {"fp16": True, **INT8}),
    "pegasus": ("pegasus", Shape(d_model=32, layers=(2, 1), heads=4, d_ff=64, activation="relu"),
                {"fp16": True, **INT8}),
}


@pytest.fixture(scope="session")
def hf_dirs(tmp_path_factory) -> dict[str, Path]:
    """name -> a tiny Hugging Face model directory (model, tokenizer, configs) of HF_MODELS."""
    import torch

    from tests.support.hf_models import bart_dir, m2m100_dir, marian_dir, mbart50_dir, pegasus_dir

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("hf")
    dirs = {}
    for seed, (name, (family, shape, _)) in enumerate(HF_MODELS.items()):
        if family == "marian":
            dirs[name] = marian_dir(root / name, shape, seed)
        elif family == "bart":
            dirs[name] = bart_dir(root / name, shape, seed)
        elif family == "mbart":
            dirs[name] = mbart50_dir(root / name, shape, seed, steps=200)
        elif family == "pegasus":
            dirs[name] = pegasus_dir(root / name, shape, seed)
        else:
            dirs[name] = m2m100_dir(root / name, shape, seed, nllb=family == "nllb")
    return dirs


@pytest.fixture(scope="session")
def hf_bundles(tmp_path_factory, hf_dirs) -> dict[str, Path]:
    """name -> the bundle export.pretrained wrote of hf_dirs[name] (options of HF_MODELS)."""
    from export.build import BuildOptions
    from export.pretrained import import_pretrained

    root = tmp_path_factory.mktemp("hf-bundles")
    return {name: import_pretrained(hf_dirs[name], root / name, BuildOptions(**HF_MODELS[name][2])).bundle_dir
            for name in HF_MODELS}
