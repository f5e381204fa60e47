"""The shipped default bundle: intact, torch-free, and exactly as accurate as the README and docs say."""

from __future__ import annotations

import pytest

from service.runtime.model.bundle import load_bundle
from service.runtime.runner import Runner
from tests.support import REPO_ROOT
from tests.support.docs import documented_sample_exact_match, readme_example

DEFAULT = REPO_ROOT / "artifacts" / "default"


@pytest.fixture(scope="module")
def bundle():
    return load_bundle(DEFAULT / "bundle")  # checks every file's sha256


def read_sample() -> list[tuple[str, str]]:
    lines = (DEFAULT / "test_sample.tsv").read_text(encoding="utf-8").splitlines()
    return [tuple(line.split("\t")) for line in lines if line]


def test_manifest_describes_the_model(bundle):
    m = bundle.manifest
    assert m["format_version"] == 1 and m["name"] == "translator"
    assert m["metrics"]["split"] == "test_sample" and m["metrics"]["n"] == len(read_sample())
    assert 0 < m["metrics"]["exact_match"] <= 100
    assert {"encoder.onnx", "decoder.onnx", "tokenizer.json"} <= set(m["files"])
    total = sum(f.stat().st_size for f in (DEFAULT / "bundle").iterdir())
    assert total <= 40 * 2**20


def test_translates_held_out_sample_at_the_documented_exact_match(bundle):
    """The figure README.md / docs/model.md state for the 500-pair sample, exactly: as the manifest
    records it, and as the torch-free runner measures it now."""
    documented = documented_sample_exact_match()
    assert round(bundle.manifest["metrics"]["exact_match"], 1) == documented
    pairs = read_sample()
    runner = Runner(bundle, providers=["CPUExecutionProvider"])
    hyps = runner.translate([s for s, _ in pairs])
    em = 100.0 * sum(h[0].text == t for h, (_, t) in zip(hyps, pairs, strict=True)) / len(pairs)
    assert round(em, 1) == documented


def test_translates_the_readme_example(bundle):
    written, spoken = readme_example()
    runner = Runner(bundle, providers=["CPUExecutionProvider"])
    assert runner.translate([written])[0][0].text == spoken
