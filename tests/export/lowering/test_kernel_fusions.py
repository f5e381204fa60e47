"""What ONNX Runtime runs of the default ("inplace") bundle: kernels per run, masks, padded rows."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from export.build import FP16_FILES
from export.export import prescaled_embeddings
from export.verify.base import cpu_session, decoder_feeds, encoder_feeds, open_session
from interface import names
from model.transformer import padding_mask

F32_MIN = float(np.finfo(np.float32).min)


def optimized_nodes(path, tmp_path) -> list[onnx.NodeProto]:
    """The nodes (kernels) of a graph after ONNX Runtime's own CPU optimizations."""
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / f"optimized.{path.name}")
    so.log_severity_level = 3  # no warning about the saved graph's NCHWc layouts
    cpu_session(path, so)
    return list(onnx.load(so.optimized_model_filepath, load_external_data=False).graph.node)  # refers to
    # path's weights file (relative to path, not to the saved graph)


def attr(node: onnx.NodeProto, name: str) -> float | int | None:
    """A node attribute's value, or None."""
    return next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name), None)


@torch.inference_mode()
def test_prescaled_embedding_tables_give_the_models_values_exactly(tiny_model):
    tokens = torch.arange(tiny_model.cfg.vocab_size)[None]
    embeddings = (tiny_model.src_embed, tiny_model.tgt_embed)
    ref = [e(tokens) for e in embeddings]
    with prescaled_embeddings(tiny_model):
        got = [e(tokens) for e in embeddings]
    assert all(torch.equal(a, r) for a, r in zip(got, ref, strict=True))
    assert all("forward" not in vars(e) for e in embeddings)  # the class's forward again


def test_decoder_step_takes_source_lengths_without_mask_kernels(tiny_bundle, tiny_model, tmp_path):
    n = tiny_model.cfg.n_decoder_layers
    nodes = optimized_nodes(tiny_bundle / names.DECODER_FILE, tmp_path)
    ops = [node.op_type for node in nodes]
    untied = [node.op_type for node in nodes if "/tied_" not in node.name]  # export/lowering/tied.py's rows
    # the lookup's Mul by sqrt(d_model); the projection's Gemm of the rows between Reshapes to 2-D and back
    assert sorted(set(ops) - set(untied)) == ["Concat", "Gemm", "Mul", "Reshape", "Shape"]
    # no mask at all (no Cast, Where, Expand, shape arithmetic), no GatherND position lookup
    assert not {"Cast", "Where", "Expand", "Shape", "Concat", "Unsqueeze", "GatherND", "Mul",
                "MultiHeadAttention", "Softmax"} & set(untied)
    gqa = [node for node in nodes if node.op_type == "GroupQueryAttention"]
    cross = [node for node in gqa if names.ENCODER_SEQLENS_K in node.input]
    assert len(gqa) == 2 * n and len(cross) == n
    (empty,) = [node for node in nodes if node.op_type == "Slice"]  # the shared empty new K/V
    for node in cross:  # shared-KV: the encoder's K/V are read up to each row's source length
        assert node.input[1] == node.input[2] == empty.output[0] and attr(node, "causal") == 0
    # per layer: 3 LayerNormalization; packed QKV MatMul + bias Add, GroupQueryAttention, MatMul +
    # bias Add, residual Add; Q MatMul + bias Add, GroupQueryAttention, MatMul + bias Add, residual
    # Add; MatMul, Add, Relu, MatMul, bias Add, residual Add. ORT fuses the last bias Add, residual
    # Add and the final LayerNormalization into one SkipLayerNormalization. Then 2 Gather + Add
    # (embedding, positions), Mul (the tied embedding's rows scaled), Slice, ReduceMean
    # (cross_attentions), Reshape + Gemm + Shape + Concat + Reshape (the generator reading the tied
    # rows, its bias Add after it) + LogSoftmax, ReduceMax twice + Sub (the log-normalizer:
    # max(logits) - max(logprobs)).
    assert len(nodes) == 21 * n + 15, ops  # 57 for the default model
    assert ops.count("SkipLayerNormalization") == 1  # only ORT's own: faster than ours for many rows


def test_encoder_prepares_the_source_mask_with_one_cast(tiny_bundle, tiny_model, tmp_path):
    n = tiny_model.cfg.n_encoder_layers
    nodes = optimized_nodes(tiny_bundle / names.ENCODER_FILE, tmp_path)
    ops = [node.op_type for node in nodes]
    untied = [node.op_type for node in nodes if "/tied_" not in node.name]  # export/lowering/tied.py's lookup
    assert not {"Where", "Expand", "Unsqueeze", "Mul", "MultiHeadAttention"} & set(untied)
    (cast,) = [node for node in nodes if node.op_type == "Cast"]
    assert list(cast.input) == [names.ATTENTION_MASK]
    attention = [node for node in nodes if node.op_type == "Attention"]  # packed QKV projection inside
    assert len(attention) == n and all(node.input[3] == cast.output[0] for node in attention)
    assert all(attr(node, "mask_filter_value") == F32_MIN for node in attention)
    fp16 = onnx.load(str(tiny_bundle / FP16_FILES["encoder"]))
    fills = {attr(node, "mask_filter_value") for node in fp16.graph.node if node.op_type == "Attention"}
    assert fills == {float(np.finfo(np.float16).min)}  # float32's minimum would be -inf in fp16
    assert ops.count("Split") == 1  # every decoder layer's cross K/V from one MatMul
    # per layer: 2 LayerNormalization, Attention, MatMul + bias Add, residual Add, MatMul, Add, Relu,
    # MatMul, bias Add, residual Add; ORT fuses the last bias Add, residual Add and the final
    # LayerNormalization into one SkipLayerNormalization; embedding and positions (2 Shape, Concat,
    # Slice, Gather, Add; the tied embedding's Mul of its rows), Cast; cross K/V (MatMul, Add,
    # Reshape, Transpose, Split)
    assert len(nodes) == 12 * n + 12, ops  # 36 for the default model


@pytest.mark.parametrize("bundle", ["tiny_bundle", "tiny_concat_bundle"])
@torch.inference_mode()
def test_padded_and_fully_padded_source_rows_match_pytorch(bundle, tiny_model, request):
    directory = request.getfixturevalue(bundle)
    cfg = tiny_model.cfg
    n, h, dh = cfg.n_decoder_layers, cfg.n_heads, cfg.d_head
    enc, dec = open_session(directory / names.ENCODER_FILE), open_session(directory / names.DECODER_FILE)
    src = np.array([[5, 6, 7, 2], [8, 2, 0, 0], [0, 0, 0, 0]])  # row 2: every position is padding
    inplace = names.SEQLENS_K in {i.name for i in dec.get_inputs()}
    if inplace:  # per-row source lengths: every source has at least its eos, no empty row
        src = src[:2]
    src_t = torch.from_numpy(src)
    src_mask = padding_mask(src_t, cfg.pad_id)
    cross_t = tiny_model.cross_kv(tiny_model.encode(src_t, src_mask))
    cross = enc.run(names.encoder_outputs(n), encoder_feeds(src, cfg.pad_id))
    for a, (k, v) in zip(zip(cross[::2], cross[1::2], strict=True), cross_t, strict=True):
        np.testing.assert_allclose(a[0], k.numpy(), atol=1e-4)
        np.testing.assert_allclose(a[1], v.numpy(), atol=1e-4)
    tokens, b = np.array([[cfg.bos_id]] * len(src)), len(src)
    rng = np.random.default_rng(0)
    past = [rng.standard_normal((b, h, 5 if inplace else 0, dh)).astype(np.float32) for _ in range(2 * n)]
    feeds = decoder_feeds(tokens, np.zeros((b, 1), np.int64), None if inplace else np.ones((b, 1), np.int64),
                          (src != cfg.pad_id).astype(np.int64), past, cross,
                          seqlens_k=np.zeros(b, np.int32) if inplace else None)
    out = dec.run(None, feeds)
    logp, _, weights = tiny_model.decode(torch.from_numpy(tokens), cross_t, src_mask)
    assert all(np.isfinite(o).all() for o in out)
    np.testing.assert_allclose(out[0], logp.numpy(), atol=1e-4)
    ref = weights.mean(dim=1).numpy()
    attn = out[names.decoder_outputs(n).index(names.CROSS_ATTENTIONS)]
    if inplace:  # cross_attentions beyond a row's source are unspecified
        np.testing.assert_allclose(attn[0], ref[0], atol=1e-5)
        np.testing.assert_allclose(attn[1, :, :2], ref[1, :, :2], atol=1e-5)
        return
    np.testing.assert_allclose(attn, ref, atol=1e-5)
    np.testing.assert_allclose(attn[1, 0, 2:], 0.0, atol=1e-7)  # padding gets no weight
    np.testing.assert_allclose(attn[2], 1 / src.shape[1], atol=1e-6)  # like the model: uniform
