"""The repository travels: its tracked tree and one part of the GPU kit fit one 64 MiB transfer to a
GPU host (docs/testing.md), and the default bundle keeps every variant it ships."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpukit.build import DEFAULT_PART_MIB
from tests.support import REPO_ROOT

MIB = 1 << 20
TRANSFER_MIB = 64  # what one command to a GPU host carries
TREE_MIB = 40  # the tracked tree's budget: a checkout plus one kit part fit a transfer


def tracked_sizes() -> dict[str, int]:
    """Path -> bytes of every file git tracks in this checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True,
                             timeout=60).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"the tracked tree cannot be listed (not a git checkout?): {exc}")
    names = [n for n in out.decode().split("\0") if n]
    return {n: (REPO_ROOT / n).stat().st_size for n in names if (REPO_ROOT / n).is_file()}


def test_the_tracked_tree_and_one_kit_part_fit_one_transfer():
    sizes = tracked_sizes()
    assert len(sizes) > 100 and "pyproject.toml" in sizes  # the listing saw the whole tree
    total = sum(sizes.values())
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:5]
    assert total <= TREE_MIB * MIB, (f"the tracked tree is {total / MIB:.1f} MiB (budget {TREE_MIB} MiB); "
                                     f"largest files: {largest}")
    assert TREE_MIB + DEFAULT_PART_MIB <= TRANSFER_MIB


def test_the_default_bundle_keeps_every_variant_it_ships():
    bundle = REPO_ROOT / "artifacts" / "default" / "bundle"
    manifest = json.loads((bundle / "bundle.json").read_text(encoding="utf-8"))
    files = manifest["files"]
    graphs = {"encoder.onnx", "decoder.onnx", "encoder.fp16.onnx", "decoder.fp16.onnx"}
    assert graphs <= set(files)
    assert manifest["variants"]["fp16"] == {"encoder": "encoder.fp16.onnx", "decoder": "decoder.fp16.onnx"}
    tracked = tracked_sizes()
    for name, entry in files.items():
        assert tracked.get(f"artifacts/default/bundle/{name}") == entry["bytes"], name
