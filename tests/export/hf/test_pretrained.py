"""Pretrained Hugging Face checkpoints mapped onto model/'s Transformer: teacher-forced log-probs equal to
transformers' own forward for every family and shape, the weight files it reads, and the families,
settings and files it refuses (with the reason)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from export.build import BuildOptions
from export.export import export_graphs
from export.hf.mapping import UnsupportedModel, load_pretrained
from export.pretrained import import_pretrained
from export.pretrained import main as cli_main
from export.verify.base import verify_bundle
from tests.support.hf_models import HF_MODELS, parallel

LOGPROB_ATOL = 1e-5
NAMES = list(HF_MODELS)


def teacher_forced(hf_model, ours, src: torch.Tensor, labels: torch.Tensor) -> float:
    """Max |log-prob difference| over every real target position of a padded batch; transformers' forward
    without a cache, as ours (with one, or with SDPA attention, its own log-probs move: 1.1e-5 on a tiny
    Flan-T5's logits of 30; eager attention without a cache gives that model's to the bit)."""
    cfg = hf_model.config
    start = torch.full((labels.size(0), 1), cfg.decoder_start_token_id)
    tgt = torch.cat([start, labels[:, :-1]], dim=1)  # transformers' shift_tokens_right
    tgt = tgt.masked_fill(tgt.eq(-100), cfg.pad_token_id)
    with torch.no_grad():
        ref = hf_model(input_ids=src, attention_mask=src.ne(cfg.pad_token_id).long(),
                       decoder_input_ids=tgt, use_cache=False).logits.log_softmax(-1)
        got = ours(src, tgt)
    real = labels.ne(-100)
    return float((ref - got).abs()[real].max())


def hf_pair_batch(tok, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(source ids, labels with -100 at padding) of n generated pairs, right-padded."""
    pairs = parallel(n, seed)
    enc = tok([s for s, _ in pairs], text_target=[t for _, t in pairs], padding=True, return_tensors="pt")
    labels = enc["labels"].masked_fill(enc["labels"].eq(tok.pad_token_id), -100)
    return enc["input_ids"], labels


@pytest.mark.parametrize("name", NAMES)
def test_log_probs_equal_transformers_forward(hf_dirs, name):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    hf_model = AutoModelForSeq2SeqLM.from_pretrained(hf_dirs[name], attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(hf_dirs[name])
    ours, info = load_pretrained(hf_dirs[name])
    src, labels = hf_pair_batch(tok, 12, 5)
    assert src.eq(tok.pad_token_id).any()  # padded rows: the masks are exercised
    assert teacher_forced(hf_model, ours, src, labels) <= LOGPROB_ATOL
    families = {"m2m100": "m2m_100", "nllb": "m2m_100", "flan-t5": "t5"}
    assert info.family == families.get(name, name.split("-")[0])


UNTRAINED = {  # MarianConfig / M2M100Config overrides: random weights, no tokenizer
    "gelu-unscaled": ("marian", {"activation_function": "gelu", "scale_embedding": False,
                                 "encoder_layers": 2}),
    "separate-sizes": ("marian", {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 50,
                                  "pad_token_id": 49, "decoder_start_token_id": 49, "d_model": 32,
                                  "encoder_attention_heads": 4, "decoder_attention_heads": 4}),
    "untied-output": ("marian", {"tie_word_embeddings": False, "activation_function": "relu"}),
    # transformers' names of GELU's tanh approximation, each computed its own way there
    "gelu-new": ("marian", {"activation_function": "gelu_new"}),
    "gelu-fast": ("marian", {"activation_function": "gelu_fast", "tie_word_embeddings": False}),
    "bart-gelu-pytorch-tanh": ("bart", {"activation_function": "gelu_pytorch_tanh"}),
    "m2m-gelu-2x2": ("m2m_100", {"activation_function": "gelu", "encoder_layers": 2, "decoder_layers": 2,
                                 "scale_embedding": False}),
    "bart": ("bart", {"activation_function": "gelu", "decoder_layers": 2}),
    "bart-scaled-relu": ("bart", {"activation_function": "relu", "scale_embedding": True}),
    "mbart": ("mbart", {"activation_function": "gelu", "encoder_layers": 2, "scale_embedding": True}),
    "pegasus": ("pegasus", {"activation_function": "relu", "decoder_layers": 2, "scale_embedding": True}),
}
FAMILY_CLASSES = {"marian": ("MarianConfig", "MarianMTModel"),
                  "m2m_100": ("M2M100Config", "M2M100ForConditionalGeneration"),
                  "bart": ("BartConfig", "BartForConditionalGeneration"),
                  "mbart": ("MBartConfig", "MBartForConditionalGeneration"),
                  "pegasus": ("PegasusConfig", "PegasusForConditionalGeneration")}


def untrained_dir(root, family: str, overrides: dict):
    """A random tiny model of `family` saved to root (config and weights only)."""
    import transformers

    config_class, model_class = (getattr(transformers, n) for n in FAMILY_CLASSES[family])
    base = dict(vocab_size=70, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=64,
                dropout=0.0, eos_token_id=2)
    torch.manual_seed(0)
    if family == "marian":
        config = config_class(**{**base, "pad_token_id": 69, "decoder_start_token_id": 69, **overrides})
    else:
        config = config_class(**{**base, "pad_token_id": 1, "decoder_start_token_id": 2, **overrides})
    model = model_class(config)
    with torch.no_grad():
        if family in ("marian", "bart", "mbart", "pegasus"):  # a bias the mapping must carry (zeros at first)
            model.final_logits_bias.normal_()
        for name, p in model.named_parameters():  # spread logits: near-uniform ones hide a wrong mapping
            if "embed_positions" not in name or family in ("bart", "mbart"):  # sinusoids are rebuilt
                p.mul_(4.0)
            if "layernorm_embedding" in name:  # not the identity: the norm's weights must be carried
                p.add_(torch.randn_like(p) * 0.5)
    model.save_pretrained(root)
    return root, type(model).from_pretrained(root).eval()


@pytest.mark.parametrize("name", sorted(UNTRAINED))
def test_untrained_shapes_equal_transformers_forward(tmp_path, name):
    family, overrides = UNTRAINED[name]
    model_dir, hf_model = untrained_dir(tmp_path, family, overrides)
    ours, info = load_pretrained(model_dir)
    assert info.family == family
    cfg = hf_model.config
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 40, (3, 7), generator=g)
    src[1, 5:], src[2, 3:] = cfg.pad_token_id, cfg.pad_token_id
    labels = torch.randint(4, 40, (3, 6), generator=g)
    assert teacher_forced(hf_model, ours, src, labels) <= LOGPROB_ATOL


def test_separate_vocabulary_sizes_export_and_verify(tmp_path):
    model_dir, _ = untrained_dir(tmp_path / "hf", *UNTRAINED["separate-sizes"])
    ours, _ = load_pretrained(model_dir)
    assert (ours.cfg.src_vocab, ours.cfg.vocab_size, ours.cfg.tie_embeddings) == (70, 50, False)
    export_graphs(ours, tmp_path / "graphs")
    sources = [[5, 6, 7, 2], [60, 65, 2]]  # ids of the larger source vocabulary
    report = verify_bundle(tmp_path / "graphs", ours, sources)
    assert report.greedy_identical == 2 and report.logprobs_max_diff < 1e-4


def test_pytorch_bin_weights_load_as_safetensors_do(tmp_path):
    """pytorch_model.bin as older transformers wrote it (every tied tensor stored), read with weights_only."""
    model_dir, hf_model = untrained_dir(tmp_path, "marian", {})
    safe = load_pretrained(model_dir)[0].state_dict()
    torch.save(hf_model.state_dict(), model_dir / "pytorch_model.bin")
    (model_dir / "model.safetensors").unlink()
    ours, info = load_pretrained(model_dir)
    assert info.weight_files == ("pytorch_model.bin",) and ours.cfg.tie_embeddings
    assert all(torch.equal(safe[k], v) for k, v in ours.state_dict().items())


@pytest.mark.parametrize("model_type, config_class, why", [
    ("plbart", "PLBartConfig", "learned positional embeddings"),
    ("umt5", "UMT5Config", "relative position bias of its own in every layer"),
    ("longt5", "LongT5Config", "transient-global attention"),
    ("nllb-moe", "NllbMoeConfig", "mixture-of-experts"),
    ("gpt2", "GPT2Config", "not supported"),
])
def test_other_families_are_refused_with_the_reason(tmp_path, capsys, model_type, config_class, why):
    import transformers

    getattr(transformers, config_class)().save_pretrained(tmp_path / "m")
    with pytest.raises(UnsupportedModel, match=why) as err:
        load_pretrained(tmp_path / "m")
    assert model_type in str(err.value)
    assert cli_main(["--model", str(tmp_path / "m"), "--out", str(tmp_path / "b")]) == 2
    assert why in capsys.readouterr().err and not (tmp_path / "b").exists()


def edit_weights(model_dir, change) -> None:
    """Rewrite model.safetensors with change(tensors) applied."""
    tensors = load_file(model_dir / "model.safetensors")
    change(tensors)
    save_file(tensors, model_dir / "model.safetensors", metadata={"format": "pt"})


def test_learned_positions_and_leftover_tensors_are_refused(tmp_path):
    from model.transformer import sinusoidal_table

    model_dir, _ = untrained_dir(tmp_path, "marian", {})
    table = sinusoidal_table(64, 16, "halves")
    edit_weights(model_dir, lambda t: t.update({"model.encoder.embed_positions.weight": table}))
    load_pretrained(model_dir)  # a stored table equal to the sinusoids is accepted
    edit_weights(model_dir, lambda t: t.update({"model.encoder.embed_positions.weight": table + 0.1}))
    with pytest.raises(UnsupportedModel, match="learned positions"):
        load_pretrained(model_dir)
    edit_weights(model_dir, lambda t: t.update({"model.encoder.embed_positions.weight": table,
                                                "model.encoder.layernorm_embedding.weight": torch.ones(16)}))
    with pytest.raises(UnsupportedModel, match="layernorm_embedding"):
        load_pretrained(model_dir)


@pytest.mark.parametrize("key, value, match", [
    ("normalize_before", True, "normalize_before"),
    ("activation_function", "quick_gelu", "activation_function 'quick_gelu' is not supported"),
    ("decoder_ffn_dim", 40, "feed-forward sizes differ"),
])
def test_settings_without_a_switch_are_refused(tmp_path, key, value, match):
    model_dir, _ = untrained_dir(tmp_path, "marian", {})
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(UnsupportedModel, match=match):
        load_pretrained(model_dir)


def test_a_model_without_its_tokenizer_writes_no_bundle(tmp_path, capsys):
    model_dir, _ = untrained_dir(tmp_path / "hf", "marian", {})
    assert cli_main(["--model", str(model_dir), "--out", str(tmp_path / "b")]) == 2
    assert "tokenizer" in capsys.readouterr().err and not (tmp_path / "b").exists()
    with pytest.raises(FileNotFoundError, match="config.json"):
        import_pretrained(tmp_path, tmp_path / "b2", BuildOptions())


@pytest.mark.parametrize("name", ["bart", "mbart"])
def test_learned_positions_read_from_row_two_and_export_with_the_cache(tmp_path, name):
    """BART / mBART: position p reads row p + 2 of each side's own table; the graphs keep dynamic
    axes and the KV cache (greedy decoding through the cache equals the model's)."""
    model_dir, hf_model = untrained_dir(tmp_path / "hf", *UNTRAINED[name])
    ours, _ = load_pretrained(model_dir)
    cfg = ours.cfg
    assert (cfg.position_table, cfg.position_offset, cfg.embedding_norm) == ("learned", 2, True)
    inner = hf_model.model
    for mine, theirs in ((ours.pos, inner.encoder), (ours.tgt_pos, inner.decoder)):
        assert torch.equal(mine.pe, theirs.embed_positions.weight[2:])
        assert torch.equal(mine.norm.weight, theirs.layernorm_embedding.weight)
    assert not torch.equal(ours.pos.pe, ours.tgt_pos.pe)  # one table per side
    export_graphs(ours, tmp_path / "graphs")
    report = verify_bundle(tmp_path / "graphs", ours, [[5, 6, 7, 8, 9, 2], [30, 31, 2]])
    assert report.greedy_identical == 2 and report.logprobs_max_diff < 1e-4
