"""mBART-50 (`mbart`) imported end to end: a tiny MBartForConditionalGeneration with an MBart50Tokenizer
built here, its bundle stating the 52 language codes (source: language id + pieces + eos; the decoder from
eos, the first token forced to the target language), tokenizer files giving the transformers tokenizer's
ids, and greedy / beam outputs of the graphs and of the runtime equal to generate's."""

from __future__ import annotations

import json

import pytest
import sentencepiece

from export.build import BuildOptions
from export.pretrained import import_pretrained
from interface import names
from tests.support.bundle_search import hf_search, onnx_search
from tests.support.hf_generate import hf_generate
from tests.support.hf_models import Shape, mbart50_dir, parallel

MAX_NEW = 20
SOURCE, TARGET = "en_XX", "de_DE"


@pytest.fixture(scope="module")
def mbart(tmp_path_factory):
    """(model dir, bundle dir, transformers model, tokenizer) of a tiny mBART-50 checkpoint."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    root = tmp_path_factory.mktemp("mbart")
    model_dir = mbart50_dir(root / "hf", Shape(d_model=32, heads=4, d_ff=64, activation="gelu"), seed=3,
                            steps=200)
    bundle = import_pretrained(model_dir, root / "bundle", BuildOptions()).bundle_dir
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    return model_dir, bundle, model, AutoTokenizer.from_pretrained(model_dir)


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


@pytest.mark.parametrize("beam", [1, 4])
def test_greedy_and_beam_are_token_identical_to_generate(mbart, beam):
    _, bundle, model, tok = mbart
    sources = [tok(s)["input_ids"] for s, _ in parallel(12, 7)]
    forced = tok.convert_tokens_to_ids(TARGET)
    theirs = hf_search(model, sources, beam, MAX_NEW, forced)
    ours = [onnx_search(bundle, s, beam, MAX_NEW, forced) for s in sources]
    assert ours == theirs and all(t[0] == forced for t in ours)


def test_the_runtime_serves_generates_tokens_and_text(mbart):
    from service.domain.types import DecodeOptions
    from service.runtime.runner import Runner

    _, bundle, model, tok = mbart
    texts = [s for s, _ in parallel(12, 7)]
    runner = Runner(bundle, providers=["CPUExecutionProvider"])
    sources = [tok(t)["input_ids"] for t in texts]
    forced = tok.convert_tokens_to_ids(TARGET)
    for beam in (1, 4):
        served = runner.translate(texts, DecodeOptions(beam_size=beam, max_output_tokens=MAX_NEW,
                                                       source_language=SOURCE, target_language=TARGET))
        theirs = [g[0] for g in hf_generate(model, sources, beam, MAX_NEW, forced_bos_token_id=forced)]
        assert [h[0].tokens for h in served] == [g.tokens for g in theirs]
        assert [h[0].text for h in served] == [tok.decode(g.tokens, skip_special_tokens=True) for g in theirs]


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
