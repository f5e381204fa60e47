"""Bundles of imported checkpoints (`python -m export.pretrained`): the format-2 manifest that
interface/generation.py declares, tokenizer files that give the transformers tokenizer's ids, greedy
and beam outputs of the ONNX graphs token-identical to transformers' generate (searching as our frozen
beams do: tests/support/bundle_search.py), and the runtime serving what generate gives (its own beam
search: the bundles state transformers')."""

from __future__ import annotations

import json
import shutil

import pytest
import sentencepiece

from export.build import BuildOptions
from export.pretrained import import_pretrained, pretrained_source
from export.pretrained import main as cli_main
from interface import names
from interface.generation import FORMAT_WITH_GENERATION, parse_generation, parse_languages, parse_tokenizer
from model.checkpoint import file_sha256
from model.config import ModelConfig
from tests.support.bundle_search import hf_search, onnx_search
from tests.support.hf_generate import hf_generate
from tests.support.hf_models import HF_MODELS, M2M_CODES, NLLB_CODES, language_id, parallel

MAX_NEW = 20
NAMES = list(HF_MODELS)
TARGET = {"m2m100": "de", "nllb": "deu_Latn", "mbart": "de_DE"}  # forced first token of many-to-many models
NO_RULES = {"suppress_ids": [], "forced_eos_at_limit": False, "renormalize": False}  # none in their configs
SEARCH = {"beam_search": "transformers", "early_stopping": False, "begin_suppress_ids": [], "defaults": {}}


def manifest(bundle) -> dict:
    """bundle.json."""
    return json.loads((bundle / names.BUNDLE_FILE).read_text(encoding="utf-8"))


def hf(hf_dirs, name):
    """(model, tokenizer) of a tiny checkpoint, as transformers loads them."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model_dir = hf_dirs[name]
    return AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)


@pytest.mark.parametrize("name", ["marian", "marian-separate"])
def test_marian_manifest_states_tokenizer_and_generation(hf_bundles, hf_dirs, name):
    m, bundle = manifest(hf_bundles[name]), hf_bundles[name]
    _, tok = hf(hf_dirs, name)
    assert m["format_version"] == FORMAT_WITH_GENERATION and "languages" not in m
    assert m["tokenizer"] == {"kind": "sentencepiece", "source_model": "source.spm",
                              "target_model": "target.spm", "vocab": "vocab.json"}
    assert parse_tokenizer(m["tokenizer"]).files() == ["source.spm", "target.spm", "vocab.json"]
    for f in ("source.spm", "target.spm"):  # copied as they are
        assert (bundle / f).read_bytes() == (hf_dirs[name] / f).read_bytes()
    assert json.loads((bundle / "vocab.json").read_text(encoding="utf-8")) == tok.get_vocab()
    pad, eos = tok.pad_token_id, tok.eos_token_id
    assert m["generation"] == {"decoder_start_id": pad, "source_suffix": [eos], **NO_RULES, **SEARCH}  # pad
    gen = parse_generation(m["generation"])
    assert (gen.decoder_start_id, gen.source_suffix, gen.suppress_ids) == (pad, (eos,), ())
    assert m["special_tokens"] == {"pad": pad, "bos": pad, "eos": eos, "unk": tok.unk_token_id}  # bos: start
    assert m["model"]["decoder_start_id"] == pad and m["pretrained"]["family"] == "marian"
    fp16 = {"encoder.fp16.onnx", "decoder.fp16.onnx", "weights.fp16.data"}
    base = {"encoder.onnx", "decoder.onnx", "weights.data", "source.spm", "target.spm", "vocab.json"}
    assert set(m["files"]) == base | (fp16 if "fp16" in m.get("variants", {}) else set())
    assert all(file_sha256(bundle / f) == e["sha256"] for f, e in m["files"].items())


@pytest.mark.parametrize("name", ["m2m100", "nllb"])
def test_many_to_many_manifest_states_languages(hf_bundles, hf_dirs, name):
    m, bundle = manifest(hf_bundles[name]), hf_bundles[name]
    _, tok = hf(hf_dirs, name)
    assert m["tokenizer"] == {"kind": "sentencepiece", "source_model": "sentencepiece.bpe.model",
                              "target_model": "sentencepiece.bpe.model", "vocab": "vocab.json"}
    spm = "sentencepiece.bpe.model"
    assert (bundle / spm).read_bytes() == (hf_dirs[name] / spm).read_bytes()
    codes = M2M_CODES if name == "m2m100" else NLLB_CODES
    languages = parse_languages(m["languages"])
    assert languages.codes == {c: language_id(tok, c) for c in codes}
    assert languages.source_prefix and languages.forced_target
    vocab = json.loads((bundle / "vocab.json").read_text(encoding="utf-8"))
    assert tok.get_vocab().items() <= vocab.items()
    assert all(tok.convert_ids_to_tokens(i) in vocab for i in languages.codes.values())  # language tokens
    assert m["generation"] == {"decoder_start_id": tok.eos_token_id, "source_suffix": [tok.eos_token_id],
                               **NO_RULES, **SEARCH}
    assert m["special_tokens"] == {"pad": 1, "bos": 0, "eos": 2, "unk": 3}  # fairseq's
    assert m["model"]["position_offset"] == 2 and m["model"]["position_table"] == "fairseq"


def test_bart_manifest_states_its_byte_level_tokenizer_and_bos_prefix(hf_bundles, hf_dirs):
    """BART: the tokenizers file (no padding), the source as <s> + pieces + </s>, the decoder from eos,
    learned positions from row 2 with their LayerNorm."""
    from tokenizers import Tokenizer

    m, bundle = manifest(hf_bundles["bart"]), hf_bundles["bart"]
    _, tok = hf(hf_dirs, "bart")
    assert m["tokenizer"] == {"kind": "tokenizers", "file": "tokenizer.json"} and "languages" not in m
    bos, eos = tok.bos_token_id, tok.eos_token_id
    assert m["generation"] == {"decoder_start_id": eos, "source_suffix": [eos], "source_prefix": [bos],
                               **NO_RULES, **SEARCH}
    assert parse_generation(m["generation"]).source_prefix == (bos,)
    assert m["special_tokens"] == {"pad": 1, "bos": 0, "eos": 2, "unk": 3}
    assert (m["model"]["position_table"], m["model"]["position_offset"], m["model"]["embedding_norm"]) == \
        ("learned", 2, True)
    assert m["pretrained"]["family"] == "bart" and "vocab.json" not in m["files"]
    file = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    assert file.padding is None and file.truncation is None
    texts = [s for s, _ in parallel(30, 11)] + ["zebra quickly", "the  cat", "Anna", "héllo 日本!"]
    for text in texts:
        ids = file.encode(text, add_special_tokens=False).ids
        assert [bos, *ids, eos] == tok(text)["input_ids"], text


def test_a_special_token_beyond_the_models_rows_is_read_as_plain_text(hf_bundles, hf_dirs):
    """BART's <mask> is the tokenizer's last id, one past the model's rows (as in bart-large-cnn): the bundle
    leaves it out, so a text holding "<mask>" is translated from its plain pieces, never from that id."""
    from service.domain.types import DecodeOptions
    from service.runtime.runner import Runner

    model, tok = hf(hf_dirs, "bart")
    assert tok.mask_token_id == model.config.vocab_size  # the fixture is built as the real checkpoint
    runner = Runner(hf_bundles["bart"], providers=["CPUExecutionProvider"])
    (source,) = runner.encode_texts(["the <mask> cat"])
    assert max(source) < model.config.vocab_size and tok.mask_token_id not in source
    (hypotheses,) = runner.translate(["the <mask> cat"], DecodeOptions(max_output_tokens=8))
    assert hypotheses[0].tokens


@pytest.mark.parametrize("name", ["marian", "marian-separate", "m2m100", "nllb", "mbart"])
def test_bundle_tokenizer_files_give_the_transformers_ids(hf_bundles, hf_dirs, name):
    """What the runtime does with the files (pieces of the source model, looked up in vocab.json, unk
    otherwise; then the language prefix and source_suffix) gives the transformers tokenizer's ids."""
    m, bundle = manifest(hf_bundles[name]), hf_bundles[name]
    _, tok = hf(hf_dirs, name)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(bundle / m["tokenizer"]["source_model"]))
    vocab = json.loads((bundle / "vocab.json").read_text(encoding="utf-8"))
    prefix = [m["languages"]["codes"][tok.src_lang]] if "languages" in m else []
    texts = [s for s, _ in parallel(30, 11)] + ["zebra quickly", "the  cat", "Anna"]
    for text in texts:
        ids = [vocab.get(p, m["special_tokens"]["unk"]) for p in sp.encode(text, out_type=str)]
        assert prefix + ids + m["generation"]["source_suffix"] == tok(text)["input_ids"], text


@pytest.mark.parametrize("beam", [1, 2, 4])
@pytest.mark.parametrize("name", NAMES)
def test_greedy_and_beam_are_token_identical_to_generate(hf_bundles, hf_dirs, name, beam):
    model, tok = hf(hf_dirs, name)
    sources = [tok(s)["input_ids"] for s, _ in parallel(12, 7)]
    forced = language_id(tok, TARGET[name]) if name in TARGET else None
    suppress = (tok.pad_token_id,) if name.startswith("marian") else ()  # OPUS-MT's bad_words_ids
    theirs = hf_search(model, sources, beam, MAX_NEW, forced, suppress)
    ours = [onnx_search(hf_bundles[name], s, beam, MAX_NEW, forced, suppress) for s in sources]
    assert ours == theirs
    assert sum(len(t) < MAX_NEW for t in ours) >= 6  # most end at eos: stopping is exercised
    if forced is not None:
        assert all(t[0] == forced for t in ours)
    if beam > 1:  # the search is not greedy in disguise
        greedy = [onnx_search(hf_bundles[name], s, 1, MAX_NEW, forced, suppress) for s in sources]
        if all(a == b for a, b in zip(ours, greedy, strict=True)):
            # a tiny model trained on other CPU kernels may pick greedy's tokens at this beam for all 12: take
            # sources from a further pool where generate's beam search parts from its greedy search
            pool = [tok(s)["input_ids"] for s, _ in parallel(36, 8)]
            beams, greedy = (hf_search(model, pool, b, MAX_NEW, forced, suppress) for b in (beam, 1))
            parted = [(s, b) for s, b, g in zip(pool, beams, greedy, strict=True) if b != g][:3]
            assert parted, f"on none of {len(sources) + len(pool)} sources does beam {beam} part from greedy"
            assert [onnx_search(hf_bundles[name], s, beam, MAX_NEW, forced, suppress) for s, _ in parted] == \
                [b for _, b in parted]


@pytest.mark.parametrize("name", NAMES)
def test_the_runtime_serves_generates_tokens_and_text(hf_bundles, hf_dirs, name):
    """End to end: the torch-free runner on the bundle, from text to text, against generate + decode (its own
    greedy and beam search: tokens, and sequences_scores as the beam hypothesis's score)."""
    from service.domain.types import DecodeOptions
    from service.runtime.runner import Runner

    model, tok = hf(hf_dirs, name)
    texts = [s for s, _ in parallel(12, 7)]
    languages = {"source_language": tok.src_lang, "target_language": TARGET[name]} if name in TARGET else {}
    forced = {"forced_bos_token_id": language_id(tok, TARGET[name])} if name in TARGET else {}
    runner = Runner(hf_bundles[name], providers=["CPUExecutionProvider"])
    sources = [tok(t)["input_ids"] for t in texts]
    for beam in (1, 4):
        served = runner.translate(texts, DecodeOptions(beam_size=beam, max_output_tokens=MAX_NEW,
                                                       **languages))
        theirs = [g[0] for g in hf_generate(model, sources, beam, MAX_NEW, **forced)]
        assert [h[0].tokens for h in served] == [g.tokens for g in theirs]
        assert [h[0].text for h in served] == [tok.decode(g.tokens, skip_special_tokens=True) for g in theirs]
        assert [h[0].score for h in served] == pytest.approx([g.score for g in theirs], abs=1e-4)


def test_imported_bundles_are_verified_in_every_lowering(hf_bundles):
    m = {name: manifest(b) for name, b in hf_bundles.items()}
    assert {v["onnx"]["attention"] for v in m.values()} == {"inplace", "fused", "plain"}
    for v in m.values():
        check = v["verification"]
        assert check["greedy_identical"] == check["greedy_sources"] == 8
        assert max(check[f"{k}_max_diff"] for k in ("encoder", "logprobs", "present")) < 1e-4
    for name in ("marian", "m2m100", "bart", "mbart", "pegasus", "t5"):  # the CUDA provider's fp16 variant
        assert m[name]["provider_variants"] == {"CUDAExecutionProvider": "fp16"}
        assert m[name]["verification"]["fp16"]["greedy_sources"] == 8


def test_cli_writes_and_refuses_to_overwrite(hf_dirs, tmp_path, capsys):
    out = tmp_path / "bundle"
    args = ["--model", str(hf_dirs["m2m100"]), "--out", str(out), "--attention", "fused"]
    assert cli_main(args) == 0
    printed = capsys.readouterr().out  # after ORT's "EP Error" notice if a runner made a global pool
    summary = json.loads(printed[printed.index('{\n "bundle"'):])
    assert summary["family"] == "m2m_100" and summary["verification"]["greedy_identical"] == 8
    assert manifest(out)["onnx"]["kv_cache"] == "concat"
    assert cli_main(args) == 2 and "--force" in capsys.readouterr().err
    assert cli_main([*args, "--force"]) == 0


def test_a_marian_import_records_the_tokenizers_source_language(hf_dirs, tmp_path):
    model_dir = shutil.copytree(hf_dirs["marian"], tmp_path / "opus-mt-en-de")
    config = model_dir / "tokenizer_config.json"  # as OPUS-MT's: {"source_lang": "en", "target_lang": "de"}
    config.write_text(json.dumps(json.loads(config.read_text()) | {"source_lang": "en", "target_lang": "de"}))
    bundle = import_pretrained(model_dir, tmp_path / "bundle", BuildOptions(attention="plain")).bundle_dir
    assert manifest(bundle)["source_language"] == "en" and "languages" not in manifest(bundle)
    from service.runtime.runner import Runner

    assert Runner(bundle, providers=["CPUExecutionProvider"]).source_language == "en"


@pytest.mark.parametrize("name", ["marian", "m2m100", "nllb"])
def test_no_source_language_without_a_marian_source_lang(hf_dirs, name):
    # the tiny Marian's tokenizer_config.json has "source_lang": null; M2M100 ("en") and NLLB ("eng_Latn")
    # tokenizers have a src_lang, but their requests name the source language
    source, _ = pretrained_source(hf_dirs[name], BuildOptions())
    assert "source_language" not in source.manifest


def test_our_own_bundles_keep_format_1(tiny_bundle):
    m = manifest(tiny_bundle)
    assert m["format_version"] == names.BUNDLE_FORMAT_VERSION == 1
    assert not {"tokenizer", "generation", "languages", "pretrained"} & set(m)
    assert not {"activation", "position_table", "decoder_start_id"} & set(m["model"])



def test_bart_generation_config_wins_over_config_json_and_forces_bos(hf_dirs, tmp_path):
    """generation_config.json, when there, is what generate reads (config.json's settings are then
    ignored, as transformers does); its forced_bos_token_id becomes generation.forced_bos_id, which the
    runtime forces as generate does."""
    from export.hf.generation import forced_bos, generation_rules, generation_settings
    from service.domain.types import DecodeOptions
    from service.runtime.runner import Runner

    model_dir = shutil.copytree(hf_dirs["bart"], tmp_path / "bart")
    model, tok = hf(hf_dirs, "bart")
    first = tok("die")["input_ids"][1]  # an ordinary token, which the model does not start with
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "forced_bos_token_id": 0,
                                                       "forced_eos_token_id": 2}))
    generation = json.loads((model_dir / "generation_config.json").read_text())
    (model_dir / "generation_config.json").write_text(json.dumps({**generation, "forced_bos_token_id": first,
                                                                  "forced_eos_token_id": None}))
    out = import_pretrained(model_dir, tmp_path / "bundle", BuildOptions()).bundle_dir
    m = manifest(out)
    assert m["generation"]["forced_bos_id"] == first and m["generation"]["forced_eos_at_limit"] is False
    assert parse_generation(m["generation"]).forced_bos_id == first
    runner = Runner(out, providers=["CPUExecutionProvider"])
    texts = [s for s, _ in parallel(8, 7)]
    sources = [tok(t)["input_ids"] for t in texts]
    for beam in (1, 4):
        served = runner.translate(texts, DecodeOptions(beam_size=beam, max_output_tokens=MAX_NEW))
        theirs = [g[0] for g in hf_generate(model, sources, beam, MAX_NEW, forced_bos_token_id=first)]
        assert [h[0].tokens for h in served] == [g.tokens for g in theirs]
        assert all(h[0].tokens[0] == first for h in served)
    (model_dir / "generation_config.json").unlink()  # config.json's settings, the fallback
    settings = generation_settings(model_dir, json.loads((model_dir / "config.json").read_text()))
    cfg = ModelConfig(vocab_size=len(tok), pad_id=1, bos_id=0, eos_id=2)
    assert forced_bos(settings, cfg, many_to_many=False) == {"forced_bos_id": 0}
    assert forced_bos(settings, cfg, many_to_many=True) == {}  # the request's target language instead
    assert generation_rules(settings, cfg)["forced_eos_at_limit"] is True
