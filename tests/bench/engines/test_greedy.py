"""The engine benchmark (bench/engines/greedy.py) smoke test, the CTranslate2 conversion of our weights
(token-identical), the server against CTranslate2, ORT's profile and the shaped model."""

from __future__ import annotations

import math

import pytest
import torch
from tokenizers import Tokenizer

from bench.engines import shaped
from bench.engines.ct2 import CT2Engine, convert
from bench.engines.greedy import run, table
from bench.engines.process import Point
from model.checkpoint import load_checkpoint, save_checkpoint
from model.config import ModelConfig
from model.decoding import greedy_decode
from model.transformer import Transformer
from service.runtime.model.bundle import load_bundle


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_ctranslate2_greedy_equals_pytorch(tmp_path, norm_first):
    torch.manual_seed(3)
    cfg = ModelConfig(vocab_size=40, d_model=16, n_heads=2, n_encoder_layers=2, n_decoder_layers=2, d_ff=32,
                      dropout=0.0, max_len=24, norm_first=norm_first, layer_norm_eps=1e-6)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # make LayerNorm and biases non-trivial so a wrong mapping shows
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
    save_checkpoint(tmp_path / "m.pt", model, 0, "tokenizer.json")
    vocab = ["<pad>", "<s>", "</s>", "<unk>", *(f"t{i}" for i in range(4, cfg.vocab_size))]
    engine = CT2Engine(convert(tmp_path / "m.pt", tmp_path / "ct2", vocab), vocab, threads=1)
    g = torch.Generator().manual_seed(0)
    sources = [torch.randint(4, cfg.vocab_size, (n,), generator=g).tolist() + [cfg.eos_id]
               for n in (3, 7, 12, 5)]
    ours = [greedy_decode(model, torch.tensor([s]), 12)[0].tokens for s in sources]
    assert engine.greedy(sources, 12) == ours
    assert any(len(o) > 1 for o in ours)  # something was generated


def test_engine_benchmark_smoke(tiny_checkpoint, tiny_bundle, tiny_corpus):
    points, ratios = run(checkpoint=tiny_checkpoint, bundle=tiny_bundle, split=tiny_corpus["valid"],
                         threads=1, batches=(1, 2), repeats=1)
    assert {(p.engine, p.batch) for p in points} == {
        (e, b) for e in ("pytorch", "onnxruntime", "ctranslate2") for b in (1, 2)
    }
    assert ratios["mismatched_sentences_onnxruntime"] == 0 and ratios["mismatched_sentences_ctranslate2"] == 0
    by = {(p.engine, p.batch): p for p in points}
    for key, (a, b) in {"ort_vs_torch_b1": ("onnxruntime", "pytorch"),
                        "ort_vs_ct2_b1": ("onnxruntime", "ctranslate2")}.items():
        assert math.isclose(ratios[key], by[a, 1].sentences_per_s / by[b, 1].sentences_per_s)
    for p in points:
        assert p.tokens > p.sentences > 0 and p.seconds > 0
        assert math.isclose(p.tokens_per_s, p.tokens / p.seconds)
    assert table(points).count("\n") == 4  # header, rule, three engines


def test_server_against_ctranslate2_smoke(tiny_checkpoint, tiny_bundle, tiny_corpus):
    """bench.engines.vs_ct2 measures the server and both engines, and its ratios are the ratios of its
    figures."""
    from bench.engines import vs_ct2

    out = vs_ct2.run(checkpoint=tiny_checkpoint, bundle=tiny_bundle, threads=1, split=tiny_corpus["valid"],
                     n_texts=16, repeats=1, log=lambda _: None)
    for ratio, (a, b) in {"service_vs_ct2_c1": ("server_c1", "ct2_b1"),
                          "service_vs_ct2_c64": ("server_c64", "ct2_b32"),
                          "server_c64_vs_inprocess": ("server_c64", "inprocess_b32")}.items():
        top, bottom = out[f"{a}_sentences_per_s"], out[f"{b}_sentences_per_s"]
        assert top > 0 and bottom > 0
        assert math.isclose(out[ratio], top / bottom)


def test_points_report_throughput():
    p = Point("x", 4, sentences=10, tokens=250, seconds=2.0)
    assert p.sentences_per_s == 5.0 and p.tokens_per_s == 125.0


def test_converter_keeps_the_checkpoint_loadable(tiny_checkpoint, tmp_path):
    out = convert(tiny_checkpoint, tmp_path / "ct2")
    assert (out / "model.bin").stat().st_size > 0
    assert load_checkpoint(tiny_checkpoint)[0].cfg.vocab_size > 0


def test_profile_summary_sums_kernel_events_per_run():
    from bench.engines.profile import count_runs, summarize

    events = [
        {"cat": "Session", "name": "model_run", "dur": 900},
        {"cat": "Session", "name": "model_run", "dur": 800},
        {"cat": "Node", "name": "mm_kernel_time", "dur": 30, "args": {"op_name": "MatMul"}},
        {"cat": "Node", "name": "mm_kernel_time", "dur": 50, "args": {"op_name": "MatMul"}},
        {"cat": "Node", "name": "mm_fence_before", "dur": 7, "args": {"op_name": "MatMul"}},
        {"cat": "Node", "name": "add_kernel_time", "dur": 10, "args": {"op_name": "Add"}},
    ]
    p = summarize(events, count_runs(events))
    assert p.runs == 2
    assert p.by_op == {"MatMul": (1.0, 40.0), "Add": (0.5, 5.0)}
    assert p.kernels_per_run == 1.5 and p.us_per_run == 45.0


def test_profile_counts_one_decoder_run_per_step(tiny_bundle, tiny_corpus, tmp_path):
    from bench.engines.profile import profile_decoder
    from service.domain.types import DecodeOptions
    from service.runtime.runner import Runner

    texts = [ln.split("\t")[0] for ln in tiny_corpus["valid"].read_text().splitlines()[:3]]
    enc, dec = profile_decoder(tiny_bundle, texts, 1, 1, tmp_path)
    runner = Runner(tiny_bundle, providers=["CPUExecutionProvider"], intra_op_threads=1)
    steps = []
    runner.fault_hook = steps.append
    options = DecodeOptions(max_output_tokens=runner.max_len - 1)
    for ids in runner.encode_texts(texts):
        runner.translate([ids], options, max_rows=1)
    assert enc.runs == steps.count("encoder") == 3
    assert dec.runs == steps.count("decoder") > 3
    assert dec.by_op["MatMul"][0] >= 1 and dec.us_per_run > 0
    assert len(list(tmp_path.glob("b1_decoder_*.json"))) == 1


@pytest.mark.parametrize("variant", ["base", "int8"])
def test_profile_runs_the_variant_asked_for(tiny_int8_bundle, tmp_path, variant):
    from bench.engines.profile import profile_decoder
    from tests.support.tiny import texts

    _, dec = profile_decoder(tiny_int8_bundle, texts()[:2], 1, 1, tmp_path, variant, new_tokens=3)
    int8_ops = {"DynamicQuantizeMatMul", "MatMulInteger", "MatMulIntegerToFloat"} & set(dec.by_op)
    assert bool(int8_ops) == (variant == "int8")  # the bundle's default on a CPU is int8
    assert 2 < dec.runs <= 2 * 3  # two sentences of 3 new tokens at most (their references are longer)


def test_profile_names_a_variant_the_bundle_lacks(tiny_bundle, capsys):
    from bench.engines.profile import main

    with pytest.raises(SystemExit) as e:
        main(["--bundle", str(tiny_bundle), "--variant", "int4", "--batches", "1", "--sentences", "1"])
    assert e.value.code == 2 and "has no variant 'int4'" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--sentences", "0"], ["--threads", "0"], ["--batches", "1", "0"],
                                  ["--new-tokens", "0"]])
def test_profile_refuses_sizes_below_one(argv, capsys):
    from bench.engines.profile import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and f"{argv[0]} must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("pre_ln", [False, True], ids=["post-LN", "pre-LN"])
def test_shaped_model_is_exported_with_the_requested_shape(tmp_path, tiny_checkpoint, pre_ln):
    tokenizer = tiny_checkpoint.parent / "tokenizer.json"
    argv = ["--out", str(tmp_path), "--d-model", "24", "--heads", "3", "--layers", "1", "--d-ff", "40",
            "--max-len", "32", "--tokenizer", str(tokenizer), *(["--pre-ln"] if pre_ln else [])]
    assert shaped.main(argv) == 0
    model, state = load_checkpoint(tmp_path / "model.pt")
    cfg = model.cfg
    assert (cfg.d_model, cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.d_ff, cfg.max_len,
            cfg.norm_first) == (24, 3, 1, 1, 40, 32, pre_ln)
    assert cfg.vocab_size == Tokenizer.from_file(str(tokenizer)).get_vocab_size()
    assert state["random_weights"] is True
    bundle = load_bundle(tmp_path / "bundle")  # written only after its parity check passed
    assert bundle.config == cfg.to_dict()
    assert (tmp_path / "tokenizer.json").read_bytes() == tokenizer.read_bytes()
