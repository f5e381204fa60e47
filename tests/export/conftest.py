"""Tiny Hugging Face checkpoints of each supported family (tests/support/hf_models.py), built once per
session, and their bundles written by `python -m export.pretrained`'s code in every lowering."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.hf_models import HF_MODELS


@pytest.fixture(scope="session")
def hf_dirs(tmp_path_factory) -> dict[str, Path]:
    """name -> a tiny Hugging Face model directory (model, tokenizer, configs) of HF_MODELS."""
    import torch

    from tests.support.hf_models import bart_dir, m2m100_dir, marian_dir, mbart50_dir, pegasus_dir, t5_dir

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
        elif family.startswith("t5-"):
            dirs[name] = t5_dir(root / name, shape, family.removeprefix("t5-"), seed)
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
