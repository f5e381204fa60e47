"""The opus-mt skeleton at the quick shape: made with torch, materialized with numpy alone, identical every
time; the materialized bundle and CTranslate2's model hold the same weights (same greedy tokens)."""

from __future__ import annotations

import json
import shutil

import pytest

from gpukit.skeleton import SKELETON, SkeletonError, materialize
from gpukit.skeleton_build import build_skeleton

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def skeleton(tmp_path_factory):
    root = tmp_path_factory.mktemp("skeleton")
    return build_skeleton(root / "skeleton", root / "work", quick=True, log=lambda _: None)


def test_the_skeleton_is_small_and_its_holes_hold_the_weights(skeleton):
    manifest = json.loads((skeleton / SKELETON).read_text())
    kinds = [f["kind"] for f in manifest["fills"].values()]
    assert {"random", "fp16", "pieces"} <= set(kinds)
    carried = (skeleton / "carried.bin").stat().st_size
    assert carried < 0.5 * sum(f["bytes"] for f in manifest["files"])


def test_materializing_twice_gives_the_same_bytes_and_a_changed_seed_is_refused(skeleton, tmp_path):
    a, b = materialize(skeleton, tmp_path / "a"), materialize(skeleton, tmp_path / "b")
    for name in ("bundle/weights.data", "bundle/weights.fp16.data", "ct2/model.bin"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    changed = tmp_path / "changed"
    shutil.copytree(skeleton, changed)
    manifest = json.loads((changed / SKELETON).read_text())
    manifest["seed"] += 1
    (changed / SKELETON).write_text(json.dumps(manifest))
    with pytest.raises(SkeletonError, match="sha256"):
        materialize(changed, tmp_path / "c")


def test_ctranslate2_on_the_materialized_model_decodes_our_tokens(skeleton, tmp_path, capsys):
    from bench.gpu.__main__ import main

    assert main(["--device", "cpu", "--quick", "--model", "opus-mt", "--skeleton", str(skeleton),
                 "--work", str(tmp_path), "--parts", "engine"]) == 0
    engine = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["engine"]
    for agreed in engine["same_tokens"]["ct2_float32"].values():
        same, total = map(int, agreed.split("/"))
        assert same == total
