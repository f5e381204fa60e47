"""The bundle loader (service/runtime/bundle.py): the manifest, and every damage named clearly."""

from __future__ import annotations

import json
import shutil

import pytest

from service.domain.errors import BundleError
from service.runtime.bundle import load_bundle


@pytest.fixture
def bundle_copy(tiny_bundle, tmp_path):
    """A writable copy of the tiny bundle."""
    return shutil.copytree(tiny_bundle, tmp_path / "bundle")


def test_bundle_loads_manifest(tiny_bundle):
    b = load_bundle(tiny_bundle)
    assert b.format_version == 1 and b.version and b.name
    assert (b.special.pad, b.special.bos, b.special.eos, b.special.unk) == (0, 1, 2, 3)
    assert b.encoder_path.is_file() and b.decoder_path.is_file() and b.tokenizer_path.is_file()
    assert b.max_len == b.config["max_len"]


def _corrupt_byte(path):
    """Flip one byte in the middle of a file, keeping its size."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: shutil.rmtree(d), r"bundle directory not found"),
        (lambda d: (d / "bundle.json").unlink(), r"bundle\.json not found"),
        (lambda d: (d / "bundle.json").write_text("{not json"), r"not valid JSON"),
        (lambda d: (d / "decoder.onnx").unlink(), r"decoder\.onnx is missing"),
        (lambda d: (d / "encoder.onnx").write_bytes((d / "encoder.onnx").read_bytes()[:100]),
         r"encoder\.onnx is truncated: 100 bytes"),
        (lambda d: _corrupt_byte(d / "tokenizer.json"), r"tokenizer\.json is corrupt: sha256 mismatch"),
    ],
    ids=["missing-dir", "missing-manifest", "bad-json", "missing-file", "truncated", "corrupt"],
)
def test_bundle_errors_name_the_problem(bundle_copy, damage, message):
    damage(bundle_copy)
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle_copy)


def test_unknown_format_version_names_found_and_supported(bundle_copy):
    manifest = json.loads((bundle_copy / "bundle.json").read_text())
    manifest["format_version"] = 99
    (bundle_copy / "bundle.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"format_version 99; this runtime supports format_version 1, 2"):
        load_bundle(bundle_copy)
