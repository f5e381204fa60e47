"""T5, Flan-T5 and mT5 (`t5`, `mt5`) imported end to end, beyond the shared checks of tests/export/hf
(log-probs, greedy / beam / served tokens equal to generate's, for the tiny checkpoints of HF_MODELS): the
manifest and tokenizer file, the output head tied or not and scaled or not as transformers reads it, the
relative position bias computed in the graphs for caches longer than its max distance (forced decoding and
rows of different ages against transformers), a task prefix as part of every source, a bare spiece.model,
and the refusals."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import onnx
import pytest
import torch
from safetensors.torch import load_file, save_file

from export.build import BuildOptions
from export.hf.mapping import UnsupportedModel, load_pretrained
from export.hf.tokenizer import TokenizerMismatch, load_hf_tokenizer
from export.pretrained import import_pretrained, pretrained_source
from export.pretrained import main as cli_main
from export.verify.int8 import Int8Limits
from interface import names
from tests.support.hf_generate import hf_generate
from tests.support.hf_models import T5_TASKS, parallel
from tests.support.pretrained import hard_texts

T5_NAMES = ["t5", "flan-t5", "mt5"]  # of HF_MODELS: T5 v1.0, Flan-T5, mT5
MAX_NEW = 20
MAX_DISTANCE = 20  # the tiny checkpoints' relative_attention_max_distance (tests/support/hf_models.py)


def manifest(bundle) -> dict:
    """bundle.json."""
    return json.loads((bundle / names.BUNDLE_FILE).read_text(encoding="utf-8"))


def hf(model_dir, eager: bool = False):
    """(model, tokenizer) as transformers loads them (eager attention: its forward without SDPA's
    rounding)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    extra = {"attn_implementation": "eager"} if eager else {}
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, **extra).eval()
    return model, AutoTokenizer.from_pretrained(model_dir)


def runner_of(bundle):
    """The torch-free runner of a bundle, on the CPU."""
    from service.runtime.runner import Runner

    return Runner(bundle, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", T5_NAMES)
def test_the_manifest_states_the_switches_and_the_tokenizers_file(hf_bundles, hf_dirs, name):
    """pad 0 starts the decoder, eos 1 ends a source, no bos; relative positions, RMSNorm, the FFN and head of
    the variant; the tokenizers file gives the transformers tokenizer's ids, sentinels included, and its
    text."""
    from tokenizers import Tokenizer

    m, bundle = manifest(hf_bundles[name]), hf_bundles[name]
    model_hf, tok = hf(hf_dirs[name])
    assert m["tokenizer"] == {"kind": "tokenizers", "file": "tokenizer.json"}
    assert "vocab.json" not in m["files"] and "spiece.model" not in m["files"]
    assert m["generation"]["decoder_start_id"] == 0 and m["generation"]["source_suffix"] == [1]
    assert "source_prefix" not in m["generation"] and "languages" not in m
    assert m["special_tokens"] == {"pad": 0, "bos": 0, "eos": 1, "unk": 2}
    model = m["model"]
    assert (model["position_table"], model["rms_norm"], model["norm_first"]) == ("relative", True, True)
    assert (model["relative_buckets"], model["relative_max_distance"]) == (16, MAX_DISTANCE)
    assert model.get("gated_ffn", False) == (name != "t5")
    assert model.get("activation", "relu") == ("relu" if name == "t5" else "gelu_tanh")
    assert model["tie_embeddings"] == (name == "t5")  # v1.0 ties the head; Flan-T5 and mT5 have their own
    assert model.get("head_dim") == model_hf.config.d_kv and model["vocab_size"] == len(tok) + 6
    assert m["pretrained"]["task_prefixes"] == {k: v["prefix"] for k, v in T5_TASKS.items()}
    file = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    sentinels = ["<extra_id_0>", "<extra_id_99>"] if name != "mt5" else []
    texts = [s for s, _ in parallel(20, 11)] + hard_texts(40, 3, extra=sentinels)
    for text in texts:
        ids = file.encode(text, add_special_tokens=False).ids
        assert [*ids, 1] == tok(text)["input_ids"], text
        assert file.decode(ids, skip_special_tokens=True) == tok.decode(ids, skip_special_tokens=True), text
    if sentinels:
        assert tok.convert_tokens_to_ids("<extra_id_0>") == len(tok) - 1  # the last id, as T5's 32099


def head_dir(root, config_edit=None, own_head: bool = False):
    """A random tiny T5 checkpoint (saved by transformers 5), config.json edited, and an lm_head.weight of its
    own with `own_head`; returns its directory."""
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(vocab_size=70, d_model=32, d_kv=16, d_ff=48, num_layers=2, num_decoder_layers=1,
                      num_heads=2, relative_attention_num_buckets=8, relative_attention_max_distance=12,
                      dropout_rate=0.0, decoder_start_token_id=0, feed_forward_proj="gated-gelu")
    T5ForConditionalGeneration(config).save_pretrained(root)
    if own_head:
        tensors = load_file(root / "model.safetensors")
        tensors["lm_head.weight"] = torch.randn(70, 32, generator=torch.Generator().manual_seed(1)) * 0.2
        save_file(tensors, root / "model.safetensors", metadata={"format": "pt"})
    written = json.loads((root / "config.json").read_text())
    if config_edit is not None:
        config_edit(written)
        (root / "config.json").write_text(json.dumps(written))
    return root


def hub_v1(config):
    """As t5-small's config.json: neither tie_word_embeddings nor scale_decoder_outputs."""
    config.pop("tie_word_embeddings", None)
    config.pop("scale_decoder_outputs", None)


def hub_flan(config):
    """As flan-t5-small's config.json: tie_word_embeddings false."""
    hub_v1(config)
    config["tie_word_embeddings"] = False


@pytest.mark.parametrize("config_edit, own_head, tied, scaled", [
    (hub_v1, False, True, True),  # T5 v1.0: tied head, output times d_model ** -0.5
    (hub_flan, True, False, False),  # Flan-T5: its own head, not scaled
    (hub_flan, False, True, False),  # tie_word_embeddings false but no lm_head: transformers ties it
    (None, True, False, True),  # transformers 5's config (scale_decoder_outputs true) with a head of its own
], ids=["t5-v1", "flan", "flan-without-head", "scaled-own-head"])
def test_the_head_is_tied_and_scaled_as_transformers_reads_it(tmp_path, config_edit, own_head, tied, scaled):
    model_dir = head_dir(tmp_path, config_edit, own_head)
    ours, info = load_pretrained(model_dir)
    model_hf, _ = hf(model_dir, eager=True)
    assert getattr(model_hf.config, "scale_decoder_outputs", None) == scaled  # the case is what it says
    assert (model_hf.lm_head.weight.data_ptr() == model_hf.shared.weight.data_ptr()) == tied
    assert info.family == "t5" and ours.cfg.tie_embeddings == tied
    final = model_hf.decoder.final_layer_norm.weight * (32**-0.5 if scaled else 1.0)
    torch.testing.assert_close(ours.decoder.norm.weight, final, rtol=0, atol=0)
    g = torch.Generator().manual_seed(2)
    src, tgt = torch.randint(3, 60, (3, 9), generator=g), torch.randint(3, 60, (3, 14), generator=g)
    src[1, 5:], tgt[:, 0] = 0, 0  # a padded source; decoder inputs from the start (pad)
    with torch.no_grad():
        ref = model_hf(input_ids=src, attention_mask=src.ne(0).long(), decoder_input_ids=tgt,
                       use_cache=False).logits.log_softmax(-1)
        assert (ref - ours(src, tgt)).abs().max() <= 1e-5


@pytest.mark.parametrize("name", T5_NAMES)
def test_forced_decoding_past_the_max_distance_gives_transformers_log_probs(hf_bundles, hf_dirs, name):
    """Targets of over 40 tokens, scored by the runner's forced decoding one position per run (the cache
    growing past relative_attention_max_distance, key positions from the mask or the in-place columns) and,
    with a concatenated cache, several per run, against transformers' teacher-forced log-probs."""
    model_hf, tok = hf(hf_dirs[name], eager=True)
    runner = runner_of(hf_bundles[name])
    sources = [s for s, _ in parallel(6, 21)]
    targets = [" ".join(t for _, t in parallel(14, 30 + i)) for i in range(len(sources))]
    labels = [tok(t)["input_ids"] for t in targets]
    assert min(map(len, labels)) > 2 * MAX_DISTANCE
    for mode in ("steps", "auto"):  # auto: several positions per run where the graphs allow
        requests = runner.score_requests(sources, targets)
        results = runner.new_scorer(max_rows=3, mode=mode).score(requests)
        for source, label, result in zip(sources, labels, results, strict=True):
            assert result.target_ids == label
            src = torch.tensor([tok(source)["input_ids"]])
            with torch.no_grad():
                logp = model_hf(input_ids=src, decoder_input_ids=torch.tensor([[0, *label[:-1]]]),
                                use_cache=False).logits.log_softmax(-1)[0]
            ref = logp[torch.arange(len(label)), torch.tensor(label)]
            assert result.log_probs == pytest.approx(ref.tolist(), abs=1e-4), mode


@pytest.mark.parametrize("name", T5_NAMES)
def test_rows_of_different_ages_decode_as_generate(hf_bundles, hf_dirs, name):
    """24 texts, two requests at a time: one joins when another ends, the cache columns before it hidden
    (concat) or its own (in place), so its keys' positions count from its own start; greedy and beam 4
    tokens exactly generate's, decoding each source alone."""
    from service.domain.types import DecodeOptions

    model_hf, tok = hf(hf_dirs[name])
    runner = runner_of(hf_bundles[name])
    texts = [s for s, _ in parallel(24, 17)]
    for beam in (1, 4):
        options = DecodeOptions(beam_size=beam, max_output_tokens=MAX_NEW)
        served = runner.translate(texts, options, max_rows=beam * 2)
        theirs = [hf_generate(model_hf, [tok(t)["input_ids"]], beam, MAX_NEW)[0][0].tokens for t in texts]
        assert [h[0].tokens for h in served] == theirs


def test_the_decoder_takes_only_the_interfaces_inputs(hf_bundles):
    """The bias is computed in the graphs from position_ids and the mask (or the in-place lengths): no input
    is added to interface/names.py's, in any lowering."""
    for name in T5_NAMES:
        bundle = hf_bundles[name]
        m = manifest(bundle)
        decoder = onnx.load(bundle / names.DECODER_FILE, load_external_data=False)
        expected = names.decoder_inputs(m["model"]["n_decoder_layers"], m["onnx"]["kv_cache"])
        assert [i.name for i in decoder.graph.input] == expected


def test_tasks_are_declared_the_default_starts_every_source_and_int8_verifies(hf_bundles, hf_dirs, tmp_path):
    """Every task of config.json's task_specific_params becomes generation.tasks (the ids of its prefix, as
    the transformers tokenizer gives them); --task translation_en_to_de is the default: a request naming no
    task is served what generate gives for that prefix + text, one naming another task or "none" what
    generate gives for its prefix + text or the bare text. The int8 variant of the same import (its encoder's
    position-biased attention a quantized MatMul before MultiHeadAttention: export/variants/int8_attention.py)
    and its offline-optimized graphs pass verification."""
    from service.domain.types import DecodeOptions

    model_dir = hf_dirs["t5"]
    model_hf, tok = hf(model_dir)
    prefixes = {name: task["prefix"] for name, task in T5_TASKS.items()}
    # and ONNX Runtime's offline optimization. The tiny model's greedy tokens are near-ties that int8
    # rounding flips on some CPUs' kernels (5 of 8 sources agree under PyTorch's default kernels), so the
    # variant is held to the log-prob drift limit only
    opts = BuildOptions(quantize="int8", optimize=True, int8_limits=Int8Limits(agreement=0.0))
    bundle = import_pretrained(model_dir, tmp_path / "bundle", opts, task="translation_en_to_de").bundle_dir
    m = manifest(bundle)
    assert m["generation"]["tasks"] == {name: tok(p, add_special_tokens=False)["input_ids"]
                                        for name, p in prefixes.items()}
    assert m["generation"]["task"] == "translation_en_to_de" and "source_prefix" not in m["generation"]
    assert m["pretrained"]["task_prefixes"] == prefixes
    assert manifest(hf_bundles["t5"])["generation"]["tasks"] == m["generation"]["tasks"]  # declared anyway
    assert "task" not in manifest(hf_bundles["t5"])["generation"]
    assert m["verification"]["int8"]["greedy_sources"] == 8 and "int8" in m["variants"]
    assert 0 < m["verification"]["int8"]["logprob_max_delta"] <= Int8Limits().logprob_delta
    encoder = onnx.load(bundle / m["variants"]["int8"]["encoder"], load_external_data=False)
    ops = Counter(n.op_type for n in encoder.graph.node)
    assert ops["Attention"] == ops["QAttention"] == 0  # no Q/K/V weights left in fp32
    assert ops["MultiHeadAttention"] == m["model"]["n_encoder_layers"]
    floats = {t.name for t in encoder.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    assert not [n.name for n in encoder.graph.node if n.op_type == "MatMul" and n.input[1] in floats]
    assert m["onnx"]["optimized"] and m["verification"]["greedy_identical"] == 8
    texts = [s for s, _ in parallel(8, 5)]
    runner = runner_of(bundle)
    asked = {None: prefixes["translation_en_to_de"], "summarization": prefixes["summarization"], "none": ""}
    served_by_task = {}
    for task, prefix in asked.items():
        for beam in (1, 4):
            options = DecodeOptions(beam_size=beam, max_output_tokens=MAX_NEW, task=task)
            served = [h[0].tokens for h in runner.translate(texts, options)]
            theirs = hf_generate(model_hf, [tok(prefix + t)["input_ids"] for t in texts], beam, MAX_NEW)
            assert served == [g[0].tokens for g in theirs]
            served_by_task[task, beam] = served
    assert served_by_task[None, 1] != served_by_task["none", 1]  # the prefix is read
    assert served_by_task["summarization", 1] != served_by_task[None, 1]
    plain = runner_of(hf_bundles["t5"])  # no default task: a text as it is, or after a named task's prefix
    greedy = DecodeOptions(max_output_tokens=MAX_NEW)
    assert [h[0].tokens for h in plain.translate(texts, greedy)] == served_by_task["none", 1]
    named = DecodeOptions(max_output_tokens=MAX_NEW, task="translation_en_to_de")
    assert [h[0].tokens for h in plain.translate(texts, named)] == served_by_task[None, 1]


def test_a_task_prefix_is_scored_as_transformers_reads_it(hf_bundles, hf_dirs):
    """Score with a task: transformers' teacher-forced log-probs of the target given prefix + source."""
    from service.domain.types import ScoreOptions

    model_hf, tok = hf(hf_dirs["t5"], eager=True)
    runner = runner_of(hf_bundles["t5"])
    pairs = parallel(6, 23)
    prefix = T5_TASKS["summarization"]["prefix"]
    options = ScoreOptions(task="summarization")
    requests = runner.score_requests([s for s, _ in pairs], [t for _, t in pairs], options)
    for (source, target), result in zip(pairs, runner.new_scorer().score(requests), strict=True):
        label = tok(target)["input_ids"]
        src = torch.tensor([tok(prefix + source)["input_ids"]])
        assert result.source_ids == src[0].tolist()
        with torch.no_grad():
            logp = model_hf(input_ids=src, decoder_input_ids=torch.tensor([[0, *label[:-1]]]),
                            use_cache=False).logits.log_softmax(-1)[0]
        assert result.log_probs == pytest.approx(logp[torch.arange(len(label)), torch.tensor(label)].tolist(),
                                                  abs=1e-4)


def test_task_prefixes_that_cannot_be_stated_are_refused(hf_dirs, tmp_path, capsys):
    """A prefix that merges with the text after it cannot be stated as ids: refused when given, left out
    (with the reason in the manifest) when only the checkpoint declares it; an unknown default is refused."""
    model_dir = hf_dirs["t5"]
    with pytest.raises(TokenizerMismatch, match="does not tokenize apart"):
        pretrained_source(model_dir, BuildOptions(), prefixes={"tight": "summarize:"})
    source, _ = pretrained_source(model_dir, BuildOptions(), task="short", prefixes={"short": "summarize: "})
    assert source.manifest["generation"]["task"] == "short"
    assert source.manifest["pretrained"]["task_prefixes"]["short"] == "summarize: "
    hub = shutil.copytree(model_dir, tmp_path / "hub")
    config = json.loads((hub / "config.json").read_text())
    config["task_specific_params"]["tight"] = {"prefix": "summarize:"}
    (hub / "config.json").write_text(json.dumps(config))
    source, _ = pretrained_source(hub, BuildOptions())
    assert set(source.manifest["generation"]["tasks"]) == set(T5_TASKS)
    assert "does not tokenize apart" in source.manifest["pretrained"]["tasks_refused"]["tight"]
    args = ["--model", str(model_dir), "--out", str(tmp_path / "b"), "--task", "translation_en_to_fr"]
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    assert "summarization" in err and "translation_en_to_de" in err and not (tmp_path / "b").exists()
    for bad in ("summarize: ", "=summarize: ", "none=x "):
        assert cli_main(["--model", str(model_dir), "--out", str(tmp_path / "c"), "--task-prefix", bad]) == 2
        assert "task" in capsys.readouterr().err and not (tmp_path / "c").exists()


@pytest.mark.parametrize("name", ["flan-t5", "mt5"])
def test_a_bare_spiece_model_imports_as_its_tokenizer_json_does(hf_dirs, tmp_path, name):
    """Without tokenizer.json, transformers cannot read spiece.model here (its converter needs
    sentencepiece's protobuf module); the import builds the T5Tokenizer as transformers converts one (pieces
    and scores, then the sentinels in reverse order, the charsmap) and writes the same tokenizers file and
    manifest objects."""
    model_dir = hf_dirs[name]
    bare = shutil.copytree(model_dir, tmp_path / "bare")
    (bare / "tokenizer.json").unlink()
    _, tok = hf(model_dir)
    rebuilt = load_hf_tokenizer(bare, "t5")
    texts = [s for s, _ in parallel(20, 11)] + hard_texts(40, 4, extra=["<extra_id_0>", "<extra_id_7>"])
    assert [rebuilt(t)["input_ids"] for t in texts] == [tok(t)["input_ids"] for t in texts]
    assert rebuilt.get_vocab() == tok.get_vocab()
    for directory, out in ((model_dir, tmp_path / "full"), (bare, tmp_path / "rebuilt")):
        source, _ = pretrained_source(directory, BuildOptions())
        out.mkdir()
        source.write_tokenizer(out)
        source.manifest.pop("pretrained")
        (out / "manifest.json").write_text(json.dumps(source.manifest))
    for file in ("tokenizer.json", "manifest.json"):
        assert (tmp_path / "full" / file).read_text() == (tmp_path / "rebuilt" / file).read_text()


def test_weights_and_settings_without_a_place_are_refused(tmp_path, capsys):
    """An unknown feed-forward and a position bias in a layer past the first (UMT5's kind) are refused with
    the reason; the cross-attention bias that original checkpoints carry and transformers ignores is
    accepted."""
    model_dir = head_dir(tmp_path / "m", hub_v1)
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "dense_act_fn": "softsign"}))
    with pytest.raises(UnsupportedModel, match="softsign"):
        load_pretrained(model_dir)
    (model_dir / "config.json").write_text(json.dumps({**config, "feed_forward_proj": "fast-gelu"}))
    with pytest.raises(UnsupportedModel, match="fast-gelu"):
        load_pretrained(model_dir)
    hub = {k: v for k, v in config.items() if k not in ("dense_act_fn", "is_gated_act")}  # as hub configs
    (model_dir / "config.json").write_text(json.dumps({**hub, "feed_forward_proj": "gated-quick_gelu"}))
    with pytest.raises(UnsupportedModel, match="feed_forward_proj 'gated-quick_gelu': activation 'quick_gel"):
        load_pretrained(model_dir)
    (model_dir / "config.json").write_text(json.dumps(config))
    tensors = load_file(model_dir / "model.safetensors")
    table = tensors["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
    tensors["decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"] = table.clone()
    save_file(tensors, model_dir / "model.safetensors", metadata={"format": "pt"})
    load_pretrained(model_dir)
    tensors["encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"] = table.clone()
    save_file(tensors, model_dir / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UnsupportedModel, match="position bias in layers past the first"):
        load_pretrained(model_dir)


def test_a_byte_tokenizer_is_refused_with_the_reason(tmp_path, capsys):
    """ByT5 (model_type t5, a byte tokenizer without a tokenizers backend): no bundle, the reason said."""
    from transformers import ByT5Tokenizer

    model_dir = head_dir(tmp_path / "byt5", hub_v1)
    ByT5Tokenizer().save_pretrained(model_dir)
    assert cli_main(["--model", str(model_dir), "--out", str(tmp_path / "b")]) == 2
    assert "no tokenizers backend" in capsys.readouterr().err and not (tmp_path / "b").exists()
