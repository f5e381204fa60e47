"""The bundle loader (service/runtime/model/bundle.py): the manifest (format 1, and format 2 of imported
pretrained models), and every damage named clearly."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from interface.generation import GenerationSpec, LanguageSpec, TokenizerSpec
from service.domain.errors import BundleError, InvalidInput
from service.domain.types import DecodeOptions
from service.runtime.model.bundle import file_sha256, load_bundle
from service.runtime.runner import Runner
from tests.support.pretrained import M2M_CODES


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


def _unlist(bundle, name):
    """Drop a file's entry from bundle.json's `files` (the file stays)."""
    manifest = json.loads((bundle / "bundle.json").read_text())
    del manifest["files"][name]
    (bundle / "bundle.json").write_text(json.dumps(manifest))


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
        (lambda d: (d / "weights.data").unlink(), r"bundle file weights\.data is missing"),
        (lambda d: _corrupt_byte(d / "weights.fp16.data"), r"weights\.fp16\.data is corrupt: sha256"),
        (lambda d: (d / "weights.data").write_bytes((d / "weights.data").read_bytes()[:4096]),
         r"weights\.data is truncated: 4096 bytes"),
        (lambda d: _unlist(d, "weights.data"),
         r"weights file weights\.data: weights\.data is not listed in bundle\.json"),
    ],
    ids=["missing-dir", "missing-manifest", "bad-json", "missing-file", "truncated", "corrupt",
         "missing-weights", "corrupt-weights", "truncated-weights", "unlisted-weights"],
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


# ----- format 2: bundles of imported pretrained models ----------------------------------------------
@pytest.fixture
def marian_copy(marian_bundle, tmp_path):
    """A writable copy of the Marian-like format-2 bundle."""
    return shutil.copytree(marian_bundle, tmp_path / "marian")


def _edit(bundle, **changes):
    """Set (or, with None, remove) keys of a bundle's bundle.json."""
    manifest = json.loads((bundle / "bundle.json").read_text())
    for key, value in changes.items():
        if value is None:
            manifest.pop(key, None)
        else:
            manifest[key] = value
    (bundle / "bundle.json").write_text(json.dumps(manifest))


def _rewrite(bundle, name, data: bytes):
    """Replace a bundle file and record its new size and hash, as an exporter would."""
    (bundle / name).write_bytes(data)
    manifest = json.loads((bundle / "bundle.json").read_text())
    manifest["files"][name] = {"sha256": file_sha256(bundle / name), "bytes": len(data)}
    (bundle / "bundle.json").write_text(json.dumps(manifest))


def test_format_2_states_tokenizer_generation_and_languages(marian_bundle, m2m_bundles):
    b = load_bundle(marian_bundle)
    assert b.format_version == 2
    assert b.tokenizer.kind == "sentencepiece"
    assert b.tokenizer.files() == ["source.spm", "target.spm", "vocab.json"]
    assert b.generation == GenerationSpec(decoder_start_id=b.special.pad, source_suffix=(0,))
    assert b.languages == LanguageSpec() and b.tokenizer_path == marian_bundle / "vocab.json"
    assert not (marian_bundle / "tokenizer.json").exists()  # not required of a SentencePiece bundle
    m2m = load_bundle(m2m_bundles["inplace"])
    assert m2m.languages.source_prefix and m2m.languages.forced_target
    assert sorted(m2m.languages.codes) == sorted(M2M_CODES) and m2m.generation.decoder_start_id == 2


def test_format_1_ignores_the_format_2_objects(bundle_copy):
    rules = {"suppress_ids": [5], "forced_eos_at_limit": True, "renormalize": True}
    _edit(bundle_copy, generation={"decoder_start_id": 5, **rules}, tokenizer={"kind": "sentencepiece"},
          languages=7)
    b = load_bundle(bundle_copy)
    assert (b.tokenizer, b.generation, b.languages) == (TokenizerSpec(), GenerationSpec(), LanguageSpec())


@pytest.mark.parametrize(("changes", "message"), [
    ({"tokenizer": {"kind": "wordpiece"}}, "'tokenizer' must be an object whose kind is one of tokenizers, "),
    ({"tokenizer": {"kind": "sentencepiece", "source_model": "source.spm", "target_model": "target.spm"}},
     "'tokenizer' of kind sentencepiece lacks vocab"),
    ({"tokenizer": {"kind": "tokenizers", "file": "tokenizer.json"}},
     "does not list required file tokenizer.json"),
    ({"generation": {"decoder_start_id": "pad"}}, "'generation.decoder_start_id' must be a token id"),
    ({"generation": {"decoder_start_id": 300}},
     "'generation.decoder_start_id' holds id 300, outside the model's vocabulary of 300"),
    ({"generation": {"source_suffix": [0, -1]}}, "'generation.source_suffix' holds id -1"),
    ({"generation": {"suppress_ids": 5}}, "'generation.suppress_ids' must be a list of token ids"),
    ({"generation": {"suppress_ids": [300]}},
     "'generation.suppress_ids' holds id 300, outside the model's vocabulary of 300"),
    ({"generation": {"suppress_ids": [7, 0]}}, "'generation.suppress_ids' holds the eos id"),
    ({"generation": {"forced_eos_at_limit": "yes"}}, "'generation.forced_eos_at_limit' must be true or "),
    ({"generation": {"renormalize": 1}}, "'generation.renormalize' must be true or false"),
    ({"languages": {"codes": ["en"]}}, "'languages.codes' must map language codes to token ids"),
    ({"generation": {"tasks": ["summarize"]}}, "'generation.tasks' must be an object of task name -> token"),
    ({"generation": {"tasks": {"none": [5]}}}, "'generation.tasks' may not name a task 'none'"),
    ({"generation": {"tasks": {" ": [5]}}}, "'generation.tasks' may not name a task ' '"),
    ({"generation": {"tasks": {"s": []}}}, "'generation.tasks.s' must be a non-empty list of token ids"),
    ({"generation": {"tasks": {"s": [5, "x"]}}}, "'generation.tasks.s' must be a non-empty list of token"),
    ({"generation": {"tasks": {"s": [5, 300]}}}, "'generation.tasks.s' holds id 300, outside the model's"),
    ({"generation": {"tasks": {"s": [5]}, "task": "t"}}, "'generation.task' must be one of 'generation"),
    ({"languages": {"codes": {"en": 1000}, "forced_target": True}}, "'languages.codes' holds id 1000"),
])
def test_format_2_errors_name_the_problem(marian_copy, changes, message):
    _edit(marian_copy, **changes)
    with pytest.raises(BundleError, match=re.escape(message)):
        load_bundle(marian_copy)


def test_format_2_tokenizer_files_are_listed_and_verified(marian_copy):
    _corrupt_byte(marian_copy / "target.spm")
    with pytest.raises(BundleError, match=r"target\.spm is corrupt: sha256 mismatch"):
        load_bundle(marian_copy)
    manifest = json.loads((marian_copy / "bundle.json").read_text())
    del manifest["files"]["vocab.json"]
    (marian_copy / "bundle.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"does not list required file vocab\.json"):
        load_bundle(marian_copy)


@pytest.mark.parametrize(("vocab", "message"), [
    ({"</s>": 0, "<unk>": 1, "big": 300}, "gives ids up to 300, outside the model's vocabulary of 300"),
    (["</s>", "<unk>"], r"must be a JSON object of piece -> id"),
])
def test_a_vocabulary_that_does_not_fit_the_model_is_refused(marian_copy, vocab, message):
    _rewrite(marian_copy, "vocab.json", json.dumps(vocab).encode())
    with pytest.raises(BundleError, match=message):
        Runner(marian_copy, providers=["CPUExecutionProvider"])


def test_a_separate_source_vocabulary_bounds_sources_and_their_ids(m2m_bundles, tmp_path):
    bundle = shutil.copytree(m2m_bundles["concat"], tmp_path / "m2m")
    manifest = json.loads((bundle / "bundle.json").read_text())
    first = min(manifest["languages"]["codes"].values())  # the language ids come after the pieces
    manifest["model"]["source_vocab_size"] = first
    (bundle / "bundle.json").write_text(json.dumps(manifest))
    message = f"'languages.codes' holds id {first}, outside the model's vocabulary of {first}"
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle)
    manifest["model"]["source_vocab_size"] = 200
    (bundle / "bundle.json").write_text(json.dumps(manifest))
    runner = Runner(bundle, providers=["CPUExecutionProvider"])
    assert runner.spec.vocab_size == 200 and runner.vocab_size == 300
    with pytest.raises(InvalidInput, match=r"integers in \[0, 200\), got 250"):
        runner.make_request([5, 250, 2], DecodeOptions(source_language="en", target_language="de"))


def test_source_language_is_optional_in_either_format(bundle_copy, marian_copy):
    assert load_bundle(bundle_copy).source_language is None is load_bundle(marian_copy).source_language
    _edit(bundle_copy, source_language="en")  # format 1: additive
    _edit(marian_copy, source_language="de")
    assert load_bundle(bundle_copy).source_language == "en"
    assert Runner(marian_copy, providers=["CPUExecutionProvider"]).source_language == "de"


@pytest.mark.parametrize("value", ["", "  ", " en", 7, ["en"], {"code": "en"}])
def test_a_bad_source_language_is_refused(bundle_copy, marian_copy, value):
    for bundle in (bundle_copy, marian_copy):
        _edit(bundle, source_language=value)
        with pytest.raises(BundleError, match=r"'source_language' must be a non-empty language code"):
            load_bundle(bundle)
