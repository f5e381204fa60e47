"""The T5 and Pegasus entries' builders at their quick shape (built offline, nothing converted or timed): the
directories laid out as t5-base's and pegasus-large's, tokenizers of the model's vocabulary (T5's less its
unused rows, which are zero), the texts T5 is fed starting with its task prefix, and the full shapes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from bench.families import pegasus, t5
from bench.families.engines import source_ids
from bench.families.registry import FAMILIES, family_dir
from bench.families.text import Shape, source_texts
from export.hf.tokenizer import PEGASUS_OFFSET


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The quick T5 and Pegasus directories."""
    root = tmp_path_factory.mktemp("families")
    return {f: family_dir(root / f, f, FAMILIES[f].quick, log=lambda _: None) for f in ("t5", "pegasus")}


def test_the_full_shapes_are_the_checkpoints():
    t5_base = Shape(d_model=768, layers=12, heads=12, d_ff=3072, vocab_size=32128)
    pegasus_large = Shape(d_model=1024, layers=16, heads=16, d_ff=4096, vocab_size=96103, max_positions=1024)
    assert (t5_base, pegasus_large) == (t5.FULL, pegasus.FULL)
    assert t5.FULL.vocab_size - t5.UNUSED_ROWS - t5.EXTRA_IDS == 32000  # t5-base's SentencePiece pieces
    assert pegasus.FULL.vocab_size - PEGASUS_OFFSET == 96000  # pegasus-large's SentencePiece pieces
    assert FAMILIES["t5"].prefix == "translate English to German: " and FAMILIES["pegasus"].prefix == ""


def test_t5_is_laid_out_as_t5_base(built):
    from transformers import AutoTokenizer

    hf = built["t5"]
    config = json.loads((hf / "config.json").read_text())
    assert config["architectures"] == ["T5ForConditionalGeneration"] and config["feed_forward_proj"] == "relu"
    assert (config["relative_attention_num_buckets"], config["relative_attention_max_distance"]) == (32, 128)
    assert (config["d_kv"], config["vocab_size"]) == (t5.QUICK.d_model // t5.QUICK.heads, t5.QUICK.vocab_size)
    assert "tie_word_embeddings" not in config and "scale_decoder_outputs" not in config  # tied, scaled
    assert config["task_specific_params"]["translation_en_to_de"]["prefix"] == t5.PREFIX
    generation = json.loads((hf / "generation_config.json").read_text())
    assert "num_beams" not in generation and generation["decoder_start_token_id"] == 0  # t5-base's: greedy
    tok = AutoTokenizer.from_pretrained(hf)
    rows = t5.QUICK.vocab_size - t5.UNUSED_ROWS
    assert len(tok) == rows and tok.convert_ids_to_tokens([0, 1, 2, rows - 1]) == [
        "<pad>", "</s>", "<unk>", "<extra_id_0>"]
    shared = load_file(hf / "model.safetensors")["shared.weight"]
    assert not shared[rows:].any() and np.abs(shared[:rows]).min(axis=1).all()  # only the unused rows zero
    texts = [FAMILIES["t5"].prefix + t for t in source_texts(t5.QUICK, 4)]
    prefix = tok(t5.PREFIX, add_special_tokens=False)["input_ids"]
    for ids in source_ids(hf, texts):
        assert ids[: len(prefix)] == prefix and ids[-1] == 1 and tok.unk_token_id not in ids


def test_pegasus_is_laid_out_as_pegasus_large(built):
    from transformers import AutoTokenizer

    hf = built["pegasus"]
    config = json.loads((hf / "config.json").read_text())
    assert config["architectures"] == ["PegasusForConditionalGeneration"]
    assert config["activation_function"] == "relu" and config["scale_embedding"]
    assert {k: config[k] for k in pegasus.LEGACY} == pegasus.LEGACY  # what CTranslate2's converter reads
    generation = json.loads((hf / "generation_config.json").read_text())
    assert [generation[k] for k in ("num_beams", "length_penalty", "max_length", "forced_eos_token_id")] == [
        8, 0.8, 256, 1]
    tok = AutoTokenizer.from_pretrained(hf)
    assert len(tok) == pegasus.QUICK.vocab_size
    assert tok.convert_ids_to_tokens([0, 1, 2, 3, 4]) == ["<pad>", "</s>", "<mask_1>", "<mask_2>", "<unk_2>"]
    for ids in source_ids(hf, source_texts(pegasus.QUICK, 4)):
        assert ids[-1] == 1 and tok.unk_token_id not in ids
