"""mBART-50 (`mbart`) imported end to end: the tiny MBartForConditionalGeneration of HF_MODELS (with its
MBart50Tokenizer built there), its bundle stating the 52 language codes (source: language id + pieces + eos;
the decoder from eos, the first token forced to the target language), tokenizer files giving the transformers
tokenizer's ids, and a bare sentencepiece.bpe.model importing as tokenizer.json does. Greedy / beam outputs of
the graphs and of the runtime equal to generate's: the shared tests of test_pretrained_bundle.py."""

from __future__ import annotations

import json

import pytest
import sentencepiece

from export.build import BuildOptions
from export.pretrained import import_pretrained
from interface import names
from tests.support.hf_models import parallel

SOURCE, TARGET = "en_XX", "de_DE"


@pytest.fixture(scope="module")
def mbart(hf_dirs, hf_bundles):
    """(model dir, bundle dir, transformers model, tokenizer) of the tiny mBART-50 checkpoint of HF_MODELS."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model_dir = hf_dirs["mbart"]
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    return model_dir, hf_bundles["mbart"], model, AutoTokenizer.from_pretrained(model_dir)


def test_the_manifest_states_the_language_codes(mbart):
    model_dir, bundle, _, tok = mbart
    m = json.loads((bundle / names.BUNDLE_FILE).read_text(encoding="utf-8"))
    assert m["pretrained"]["family"] == "mbart"
    assert m["tokenizer"] == {"kind": "sentencepiece", "source_model": "sentencepiece.bpe.model",
                              "target_model": "sentencepiece.bpe.model", "vocab": "vocab.json"}
    languages = m["languages"]
    assert len(languages["codes"]) == 52 and languages["codes"][TARGET] == tok.convert_tokens_to_ids(TARGET)
    assert languages["source_prefix"] and languages["forced_target"]
    assert m["generation"]["decoder_start_id"] == 2 and m["generation"]["source_suffix"] == [2]
    assert "source_prefix" not in m["generation"] and "forced_bos_id" not in m["generation"]
    model = m["model"]
    assert (model["position_table"], model["position_offset"], model["embedding_norm"], model["norm_first"]) \
        == ("learned", 2, True, True)
    assert m["verification"]["greedy_identical"] == 8


def test_the_tokenizer_files_give_the_transformers_ids(mbart):
    _, bundle, _, tok = mbart
    vocab = json.loads((bundle / "vocab.json").read_text(encoding="utf-8"))
    sp = sentencepiece.SentencePieceProcessor(model_file=str(bundle / "sentencepiece.bpe.model"))
    code = vocab[SOURCE]
    for text in [s for s, _ in parallel(30, 11)] + ["zebra quickly", "the  cat", "Anna"]:
        ids = [vocab.get(p, 3) for p in sp.encode(text, out_type=str)]
        assert [code, *ids, 2] == tok(text)["input_ids"], text


def test_a_bare_sentencepiece_model_imports_as_its_tokenizer_json_does(mbart, tmp_path):
    """Without tokenizer.json, transformers cannot read sentencepiece.bpe.model here (its converter needs
    sentencepiece's protobuf module or tiktoken); the import builds the MBart50Tokenizer from what the
    directory holds (pieces, scores, charsmap, tokenizer_config.json) and writes the same bundle objects."""
    import shutil

    from export.hf.tokenizer import load_hf_tokenizer

    model_dir, bundle, _, tok = mbart
    bare = shutil.copytree(model_dir, tmp_path / "bare")
    (bare / "tokenizer.json").unlink()
    rebuilt = load_hf_tokenizer(bare, "mbart")
    texts = [s for s, _ in parallel(30, 11)] + ["zebra quickly", "the  cat", "Anna", "héllo 日本!"]
    assert [rebuilt(t)["input_ids"] for t in texts] == [tok(t)["input_ids"] for t in texts]
    assert rebuilt.get_vocab() == tok.get_vocab()
    out = import_pretrained(bare, tmp_path / "bundle", BuildOptions()).bundle_dir
    ours, theirs = (json.loads((b / names.BUNDLE_FILE).read_text(encoding="utf-8")) for b in (out, bundle))
    assert all(ours[k] == theirs[k] for k in ("tokenizer", "generation", "languages", "special_tokens"))
    assert (out / "vocab.json").read_bytes() == (bundle / "vocab.json").read_bytes()
    with pytest.raises(FileNotFoundError, match="tokenizer"):
        load_hf_tokenizer(bare, "m2m_100")  # only mBART-50 is rebuilt
