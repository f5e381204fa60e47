"""Every decoder graph's `log_normalizer` output (interface/names.py): the logsumexp of the model's logits
over the vocabulary, so that logits = logprobs + log_normalizer[..., None]. Checked against PyTorch's
logits (our model's output projection, read by a hook of the test's own; transformers' own
MarianMTModel for an imported model), decoding a teacher-forced target one token per run, in the
concatenated and in-place cache layouts and in the tied, int8 and fp16 graphs on the CPU provider."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from export.build import FP16_FILES
from export.variants.int8 import INT8_FILES
from export.verify.base import empty_cache, encoder_feeds, kv_cache_of, open_session, step_feeds
from export.verify.fp16 import FP16_ATOL, CastInputs
from interface import names
from model.transformer import padding_mask

FP32 = {"encoder": names.ENCODER_FILE, "decoder": names.DECODER_FILE}
FILES = {"fp32": FP32, "fp16": FP16_FILES, "int8": INT8_FILES}
# max |difference| from PyTorch's logsumexp: the fp32 graphs' tolerance (export/verify/base.py), fp16's
# (export/verify/fp16.py); int8 weights move every logit (the int8 check's log-prob limit is 0.5; the
# tiny model's int8 normalizer is measured within 0.03 and its logits within 0.16)
ATOL = {"fp32": 1e-4, "fp16": FP16_ATOL["log_normalizer"], "int8": 0.25}


def run_graphs(bundle: Path, variant: str, src: np.ndarray, tgt: np.ndarray, pad: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """The bundle's graphs fed tgt (B, T) one token per run, each run's present cache the next run's
    past -> log-probs (B, T, V) and log-normalizer (B, T), the latter checked float32."""
    files = FILES[variant]
    enc, dec = (CastInputs(open_session(bundle / files[g])) for g in ("encoder", "decoder"))
    cross = enc.run(None, encoder_feeds(src, pad))
    layout = kv_cache_of(dec.session)
    past = empty_cache(layout, cross, tgt.shape[1])
    presents = list(names.self_cache_io(len(cross) // 2).values())
    logps, normalizers = [], []
    for t in range(tgt.shape[1]):
        feeds = step_feeds(layout, tgt[:, t : t + 1], t, (src != pad).astype(np.int64), past, cross)
        logp, lse, *past = dec.run([names.LOGPROBS, names.LOG_NORMALIZER, *presents], feeds)
        assert lse.dtype == np.float32 and lse.shape == (len(src), 1)
        logps.append(logp.astype(np.float32))
        normalizers.append(lse)
    return np.concatenate(logps, axis=1), np.concatenate(normalizers, axis=1)


@torch.inference_mode()
def model_logits(model, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
    """PyTorch's logits (B, T, V) of the whole target at once: the generator's projection, before its
    log-softmax."""
    seen = []
    hook = model.generator.proj.register_forward_hook(lambda _module, _inputs, out: seen.append(out))
    try:
        s = torch.from_numpy(src)
        mask = padding_mask(s, model.cfg.pad_id)
        model.decode(torch.from_numpy(tgt), model.cross_kv(model.encode(s, mask)), mask)
    finally:
        hook.remove()
    (logits,) = seen
    return logits.double().numpy()


def logsumexp(x: np.ndarray) -> np.ndarray:
    """logsumexp over the last axis, in float64."""
    top = x.max(axis=-1, keepdims=True)
    return (top + np.log(np.exp(x - top).sum(axis=-1, keepdims=True)))[..., 0]


def check(logp: np.ndarray, lse: np.ndarray, logits: np.ndarray, atol: float) -> float:
    """The graph's log-normalizer is PyTorch's logsumexp, and log-probs + log-normalizer are PyTorch's
    logits, within atol (twice that for the logits: both outputs' errors); returns the largest difference."""
    diff = float(np.abs(lse - logsumexp(logits)).max())
    assert diff <= atol, diff
    assert np.abs(logp + lse[..., None] - logits).max() <= 2 * atol
    return diff


def our_inputs(cfg, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded sources (3 rows of different lengths) and teacher-forced targets (bos + 5 tokens)."""
    rng = np.random.default_rng(seed)
    src = np.full((3, 7), cfg.pad_id, np.int64)
    for row, length in enumerate((7, 3, 5)):
        src[row, :length] = rng.integers(4, cfg.src_vocab, length)
        src[row, length - 1] = cfg.eos_id
    tgt = np.concatenate([np.full((3, 1), cfg.bos_id), rng.integers(4, cfg.vocab_size, (3, 5))], axis=1)
    return src, tgt


@pytest.mark.parametrize(("bundle", "variant", "layout"), [
    ("tiny_concat_bundle", "fp32", "concat"), ("tiny_bundle", "fp32", "inplace"),
    ("tiny_concat_bundle", "fp16", "concat"), ("tiny_bundle", "fp16", "inplace"),
    ("tiny_int8_bundle", "int8", "inplace"),
])
def test_our_models_log_normalizer_is_the_logsumexp_of_its_logits(bundle, variant, layout, tiny_model,
                                                                   request):
    directory = request.getfixturevalue(bundle)
    manifest = json.loads((directory / names.BUNDLE_FILE).read_text())
    assert manifest["onnx"]["kv_cache"] == layout
    if variant != "int8":  # the tied graphs: the embeddings read the output projection (lowering/tied.py)
        assert manifest["verification"]["tied_embeddings"] > 0
    src, tgt = our_inputs(tiny_model.cfg, seed=len(bundle))
    logp, lse = run_graphs(directory, variant, src, tgt, tiny_model.cfg.pad_id)
    diff = check(logp, lse, model_logits(tiny_model, src, tgt), ATOL[variant])
    assert diff > 0 or variant == "fp32"  # the variants really differ from float32 (they were run)


@pytest.mark.parametrize(("name", "variant", "layout"), [
    ("marian", "fp32", "inplace"), ("marian", "fp16", "inplace"), ("marian-separate", "fp32", "concat"),
])
def test_an_imported_marian_models_log_normalizer_is_the_logsumexp_of_transformers_logits(
    hf_dirs, hf_bundles, name, variant, layout
):
    from transformers import AutoTokenizer, MarianMTModel

    bundle = hf_bundles[name]
    manifest = json.loads((bundle / names.BUNDLE_FILE).read_text())
    assert manifest["onnx"]["kv_cache"] == layout
    tok = AutoTokenizer.from_pretrained(hf_dirs[name])
    hf_model = MarianMTModel.from_pretrained(hf_dirs[name]).eval()
    cfg = hf_model.config
    src = tok(["the big cat saw red apples", "we run", "the dog eats bread on the day"], padding=True,
              return_tensors="np")["input_ids"].astype(np.int64)
    rng = np.random.default_rng(3)
    tokens = rng.integers(2, cfg.pad_token_id, (len(src), 5))  # ordinary target ids (pad is the last)
    tgt = np.concatenate([np.full((len(src), 1), cfg.decoder_start_token_id), tokens], axis=1)
    assert (src == cfg.pad_token_id).any()  # padded rows: the source lengths matter
    mask = torch.from_numpy((src != cfg.pad_token_id).astype(np.int64))
    with torch.no_grad():
        logits = hf_model(input_ids=torch.from_numpy(src), attention_mask=mask,
                          decoder_input_ids=torch.from_numpy(tgt)).logits.double().numpy()
    logp, lse = run_graphs(bundle, variant, src, tgt, cfg.pad_token_id)
    check(logp, lse, logits, ATOL[variant])


def test_the_fp16_decoder_outputs_a_float32_normalizer_computed_in_fp16(tiny_bundle):
    proto = onnx.load(str(tiny_bundle / FP16_FILES["decoder"]), load_external_data=False)
    types = {o.name: o.type.tensor_type.elem_type for o in proto.graph.output}
    assert types[names.LOGPROBS] == onnx.TensorProto.FLOAT16
    assert types[names.LOG_NORMALIZER] == onnx.TensorProto.FLOAT
    producer = {out: node for node in proto.graph.node for out in node.output}
    cast = producer[names.LOG_NORMALIZER]
    sub = producer[cast.input[0]]  # max(logits) - max(logprobs), in fp16
    assert cast.op_type == "Cast" and sub.op_type == "Sub"
    assert [producer[x].op_type for x in sub.input] == ["ReduceMax", "ReduceMax"]
