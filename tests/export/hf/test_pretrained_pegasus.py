"""Pegasus (`pegasus`) imported end to end: the tiny PegasusForConditionalGeneration of HF_MODELS (its
PegasusTokenizer over a spiece.model trained there): the manifest (pre-LN, [sin | cos] sinusoids at the
position itself, decoder from pad), the bundle's tokenizers file giving the transformers tokenizer's ids and
SentencePiece's own ids + 103, a bare spiece.model importing as tokenizer.json does, a checkpoint's
generation config (beam 4, length penalty, no-repeat n-grams, min / max length, forced eos) served as
generate decodes with it, Score as transformers' teacher-forced log-probs, and sources near the model's own
limit (max_position_embeddings) served or refused. Greedy / beam tokens of the graphs and of the runtime
equal to generate's: the shared tests of test_pretrained_bundle.py."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import sentencepiece

from export.build import BuildOptions
from export.hf.tokenizer import PEGASUS_OFFSET
from export.pretrained import import_pretrained
from interface import names
from service.domain.errors import InvalidInput
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from tests.support.hf_generate import hf_generate
from tests.support.hf_models import parallel

TEXTS = [s for s, _ in parallel(24, 7)]
ODD = ["zebra quickly", "the  cat", "Anna", "héllo 日本!", "<mask_1> the cat"]  # unk, spaces, case, masks
GENERATION = {"num_beams": 4, "length_penalty": 0.6, "no_repeat_ngram_size": 2, "min_length": 4,
              "max_length": 6, "forced_eos_token_id": 1}  # both lengths binding on the tiny model
TOL = 1e-4  # scores and log-probs: float32 graphs against float32 transformers


def manifest(bundle) -> dict:
    """bundle.json."""
    return json.loads((bundle / names.BUNDLE_FILE).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def pegasus(hf_dirs, hf_bundles):
    """(model dir, bundle dir, transformers model, tokenizer) of the tiny Pegasus of HF_MODELS."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model_dir = hf_dirs["pegasus"]
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    return model_dir, hf_bundles["pegasus"], model, AutoTokenizer.from_pretrained(model_dir)


def test_the_manifest_states_the_pegasus_layout(pegasus):
    _, bundle, model, tok = pegasus
    m = manifest(bundle)
    assert m["pretrained"]["family"] == "pegasus" and "languages" not in m
    assert m["tokenizer"] == {"kind": "tokenizers", "file": "tokenizer.json"}
    assert m["generation"]["decoder_start_id"] == tok.pad_token_id == 0  # the decoder starts from pad
    assert m["generation"]["source_suffix"] == [tok.eos_token_id] and "source_prefix" not in m["generation"]
    assert m["special_tokens"] == {"pad": 0, "bos": 0, "eos": 1, "unk": tok.unk_token_id}
    assert tok.unk_token_id == 2 + PEGASUS_OFFSET  # SentencePiece's unk (2), offset
    cfg = m["model"]
    assert (cfg["norm_first"], cfg["position_table"], cfg.get("position_offset", 0)) == (True, "halves", 0)
    assert cfg["max_len"] == model.config.max_position_embeddings  # the source limit is the model's own


def test_the_tokenizer_file_gives_the_transformers_and_sentencepiece_ids(pegasus):
    from tokenizers import Tokenizer

    model_dir, bundle, _, tok = pegasus
    file = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_dir / "spiece.model"))
    for text in [s for s, _ in parallel(30, 11)] + ODD:
        ids = file.encode(text, add_special_tokens=False).ids
        assert [*ids, 1] == tok(text)["input_ids"], text
    for text in [s for s, _ in parallel(30, 11)] + ODD[:3]:  # Pegasus's layout: piece i at i + 103
        want = [i + PEGASUS_OFFSET for i in sp.encode(text)]
        assert file.encode(text, add_special_tokens=False).ids == want, text


def test_a_bare_spiece_model_imports_as_its_tokenizer_json_does(pegasus, tmp_path):
    """Without tokenizer.json, transformers cannot read spiece.model here (its converter needs sentencepiece's
    protobuf module or tiktoken); the import builds the PegasusTokenizer from the model's pieces, scores and
    charsmap with the offset, and writes a tokenizers file that gives the same ids."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from export.hf.tokenizer import load_hf_tokenizer

    model_dir, bundle, _, tok = pegasus
    bare = shutil.copytree(model_dir, tmp_path / "bare")
    (bare / "tokenizer.json").unlink()
    with pytest.raises(Exception):  # noqa: B017  (ValueError here; another error where tiktoken is installed)
        AutoTokenizer.from_pretrained(bare)
    rebuilt = load_hf_tokenizer(bare, "pegasus")
    texts = [s for s, _ in parallel(30, 11)] + ODD
    assert [rebuilt(t)["input_ids"] for t in texts] == [tok(t)["input_ids"] for t in texts]
    assert rebuilt.get_vocab() == tok.get_vocab()
    out = import_pretrained(bare, tmp_path / "bundle", BuildOptions()).bundle_dir
    ours, theirs = manifest(out), manifest(bundle)
    assert all(ours[k] == theirs[k] for k in ("tokenizer", "generation", "special_tokens"))
    files = [Tokenizer.from_file(str(b / "tokenizer.json")) for b in (out, bundle)]
    assert [[f.encode(t, add_special_tokens=False).ids for t in texts] for f in files] == \
        [[tok(t, add_special_tokens=False)["input_ids"] for t in texts]] * 2


@pytest.fixture(scope="module")
def summarizer(pegasus, tmp_path_factory):
    """(bundle, transformers model) of the tiny Pegasus with GENERATION as its generation_config.json."""
    from transformers import AutoModelForSeq2SeqLM

    model_dir = shutil.copytree(pegasus[0], tmp_path_factory.mktemp("pegasus-gen") / "hf")
    path = model_dir / "generation_config.json"
    path.write_text(json.dumps(json.loads(path.read_text(encoding="utf-8")) | GENERATION), encoding="utf-8")
    bundle = import_pretrained(model_dir, model_dir.parent / "bundle", BuildOptions()).bundle_dir
    return bundle, AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()


@pytest.mark.parametrize("beam", [None, 1])
def test_the_checkpoints_generation_defaults_decode_as_generate(summarizer, pegasus, beam):
    """DecodeOptions() (beam 4, the config's length penalty, no-repeat n-grams, min / max length, eos forced
    at the limit; scores as generate's sequences_scores), and greedy under the same defaults: generate's
    tokens with the checkpoint's config."""
    bundle, model = summarizer
    tok = pegasus[3]
    gen = manifest(bundle)["generation"]
    assert gen["defaults"] == {k: GENERATION[k] for k in gen["defaults"]} and len(gen["defaults"]) == 5
    assert gen["forced_eos_at_limit"] is True
    runner = Runner(bundle, providers=["CPUExecutionProvider"])
    served = runner.translate(TEXTS, DecodeOptions(beam_size=beam))
    theirs = [g[0] for g in hf_generate(model, [tok(t)["input_ids"] for t in TEXTS],
                                        beam or GENERATION["num_beams"], inherit=True)]
    assert [h[0].tokens for h in served] == [g.tokens for g in theirs]
    if beam is None:  # beam search: the hypothesis's score is generate's sequences_scores
        assert [h[0].score for h in served] == pytest.approx([g.score for g in theirs], abs=TOL)
    assert all(len(h[0].tokens) >= GENERATION["min_length"] - 1 for h in served)
    assert any(len(h[0].tokens) == GENERATION["max_length"] - 2 for h in served)  # eos forced at the limit
    assert len({tuple(h[0].tokens) for h in served}) > 1  # not one output for every text


def test_score_gives_transformers_teacher_forced_log_probs(pegasus):
    import torch

    _, bundle, model, tok = pegasus
    targets = [t for _, t in parallel(24, 7)][::-1]  # any target, not the model's output
    results = Runner(bundle, providers=["CPUExecutionProvider"]).score(TEXTS, targets)
    for text, target, r in zip(TEXTS, targets, results, strict=True):
        labels = tok(text_target=target)["input_ids"]  # target ids + eos
        assert r.source_ids == tok(text)["input_ids"] and r.target_ids == labels
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([r.source_ids]),
                           decoder_input_ids=torch.tensor([[0, *labels[:-1]]])).logits
        want = torch.log_softmax(logits, -1)[0].numpy()[np.arange(len(labels)), labels]
        np.testing.assert_allclose(r.log_probs, want, rtol=1e-5, atol=1e-5)


def text_of_tokens(tok, n: int) -> str:
    """A text of the tiny vocabulary's words whose source is exactly n tokens (eos included)."""
    words = [w for s, _ in parallel(200, 3) for w in s.split()]
    for end in range(1, len(words)):
        text = " ".join(words[:end])
        if len(tok(text)["input_ids"]) == n:
            return text
    raise AssertionError(f"no prefix of the word list is {n} tokens long")


def test_sources_near_the_models_own_limit(pegasus):
    """A summarizer's source limit is its max_position_embeddings (64 here): a 60-token source is served as
    generate decodes it, a 70-token one refused with a status naming the limit (not truncated)."""
    _, bundle, model, tok = pegasus
    limit = model.config.max_position_embeddings
    runner = Runner(bundle, providers=["CPUExecutionProvider"])
    assert runner.max_len == limit == 64 and runner.limits().max_source_tokens == limit
    near, over = text_of_tokens(tok, 60), text_of_tokens(tok, 70)
    served = runner.translate([near, TEXTS[0]], DecodeOptions(beam_size=1, max_output_tokens=limit - 1))
    sources = [tok(t)["input_ids"] for t in (near, TEXTS[0])]
    theirs = [g[0] for g in hf_generate(model, sources, 1, limit - 1)]  # padded with a short row, as served
    assert [h[0].tokens for h in served] == [g.tokens for g in theirs]
    with pytest.raises(InvalidInput, match=f"text 1 is 70 tokens long .*at most {limit}"):
        runner.translate([near, over], DecodeOptions(beam_size=1))
