"""The in-place lowering: GroupQueryAttention over a fixed-size cache, rows of different lengths."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import export.verify.base
from export.__main__ import main as cli_main
from export.build import FP16_FILES
from export.lowering.fused import CACHE_LENGTHS, CROSS_LENGTHS, DOMAIN, MS_DOMAIN, WITH_WEIGHTS, fused_forward
from export.verify.base import ParityError, cpu_session, verify_bundle
from export.verify.cases import Case
from export.verify.fp16 import FP16_ATOL, verify_fp16
from export.verify.inplace import BoundCache
from interface import names
from model.transformer import MultiHeadAttention
from tests.support.model import graph_ops

GQA = (MS_DOMAIN, "GroupQueryAttention")


@pytest.fixture(scope="module")
def inplace_dir(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint exported by the CLI with the in-place lowering (and the fp16 variant)."""
    out = tmp_path_factory.mktemp("inplace") / "bundle"
    assert cli_main(["--checkpoint", str(tiny_checkpoint), "--out", str(out), "--attention", "inplace",
                     "--fp16"]) == 0
    return out


def garbage(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Large random values: any read of them shows in the output."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 10


@pytest.mark.parametrize("lens,new_len", [([5, 0, 3, 1], 1), ([4, 1], 3), ([0, 0], 2)])
@torch.inference_mode()
def test_cached_self_attention_equals_the_modules_attention_over_a_concatenated_past(lens, new_len):
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=12, n_heads=3).eval()
    b, h, dh, capacity = len(lens), 3, 4, max(lens) + new_len + 3
    x = torch.randn(b, new_len, 12)
    past_k, past_v = garbage((b, h, capacity, dh), 1), garbage((b, h, capacity, dh), 2)
    seqlens_k = torch.tensor(lens, dtype=torch.int32) + new_len - 1
    setattr(mha, CACHE_LENGTHS, (seqlens_k, seqlens_k.max() + 1))
    try:  # the export's path: packed projection, then torch.ops.translator.cached_self_attention (eager)
        out, (pk, pv), weights = fused_forward(mha, x, x, past=(past_k, past_v))
    finally:
        delattr(mha, CACHE_LENGTHS)
    assert weights is None and pk.shape == past_k.shape
    for r, p in enumerate(lens):
        causal = torch.ones(1, new_len, p + new_len, dtype=torch.bool).tril(diagonal=p)
        ref_out, (ref_k, ref_v), _ = mha(x[r : r + 1], x[r : r + 1], causal,
                                         past=(past_k[r : r + 1, :, :p], past_v[r : r + 1, :, :p]))
        torch.testing.assert_close(out[r : r + 1], ref_out, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(pk[r : r + 1, :, : p + new_len], ref_k)
        torch.testing.assert_close(pv[r : r + 1, :, : p + new_len], ref_v)
        assert torch.equal(pk[r, :, p + new_len :], past_k[r, :, p + new_len :])  # beyond: untouched
    # the same op with one row's garbage replaced: that row's output must not change
    past_k2 = past_k.clone()
    past_k2[0, :, lens[0] + new_len :] += 100.0
    setattr(mha, CACHE_LENGTHS, (seqlens_k, seqlens_k.max() + 1))
    try:
        out2, _, _ = fused_forward(mha, x, x, past=(past_k2, past_v))
    finally:
        delattr(mha, CACHE_LENGTHS)
    torch.testing.assert_close(out2, out)


@torch.inference_mode()
def test_cached_self_attention_adds_a_position_bias_over_each_rows_columns():
    """A position bias over the buffer's columns (B, H, T, capacity), as the in-place graph traces it: each
    row's output is the module's over its own concatenated past with the bias of its own columns."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=12, n_heads=3).eval()
    lens, new_len, h, dh = [5, 0, 2], 1, 3, 4
    b, capacity = len(lens), max(lens) + 4
    x = torch.randn(b, new_len, 12)
    past_k, past_v = garbage((b, h, capacity, dh), 1), garbage((b, h, capacity, dh), 2)
    bias = torch.randn(b, h, new_len, capacity)
    seqlens_k = torch.tensor(lens, dtype=torch.int32) + new_len - 1
    setattr(mha, CACHE_LENGTHS, (seqlens_k, seqlens_k.max() + 1))
    try:
        out, _, _ = fused_forward(mha, x, x, past=(past_k, past_v), bias=bias)
    finally:
        delattr(mha, CACHE_LENGTHS)
    for r, p in enumerate(lens):
        causal = torch.ones(1, new_len, p + new_len, dtype=torch.bool).tril(diagonal=p)
        row_past = (past_k[r : r + 1, :, :p], past_v[r : r + 1, :, :p])
        row_bias = bias[r : r + 1, :, :, : p + new_len]
        ref, _, _ = mha(x[r : r + 1], x[r : r + 1], causal, past=row_past, bias=row_bias)
        torch.testing.assert_close(out[r : r + 1], ref, atol=1e-6, rtol=1e-5)


def test_decoder_uses_group_query_attention_with_the_inplace_interface(
    inplace_dir, tiny_concat_bundle, tiny_model
):
    cfg = tiny_model.cfg
    n = cfg.n_decoder_layers
    proto = onnx.load(str(inplace_dir / names.DECODER_FILE))
    dec_ops = graph_ops(inplace_dir / names.DECODER_FILE)
    assert dec_ops.count(GQA) == 2 * n  # self- and cross-attention of every layer
    assert ("", "Cast") not in dec_ops  # no source mask to cast
    assert not any(domain == DOMAIN for domain, _ in dec_ops)
    assert [i.name for i in proto.graph.input] == names.decoder_inputs(n, "inplace")
    assert [o.name for o in proto.graph.output] == names.decoder_outputs(n)
    assert len(dec_ops) < len(graph_ops(tiny_concat_bundle / names.DECODER_FILE))  # fewer than "fused"
    gqa = [node for node in proto.graph.node if node.op_type == "GroupQueryAttention"]
    heads = {"num_heads": cfg.n_heads, "kv_num_heads": cfg.n_heads}
    for i in range(n):
        self_attn, cross = gqa[2 * i], gqa[2 * i + 1]
        assert {a.name: a.i for a in self_attn.attribute} == heads
        assert list(self_attn.input[3:]) == [names.past_name(i, "decoder", kv) for kv in ("key", "value")] + [
            names.SEQLENS_K, names.TOTAL_SEQUENCE_LENGTH]
        weights = {"qk_output": 2} if i == n - 1 else {}  # softmax output: the last layer's cross_attentions
        assert {a.name: a.i for a in cross.attribute} == heads | {"causal": 0} | weights
        assert cross.input[1] == cross.input[2] != ""  # the same empty new K/V: shared-KV mode
        assert list(cross.input[3:]) == [names.past_name(i, "encoder", kv) for kv in ("key", "value")] + [
            names.ENCODER_SEQLENS_K, names.ENCODER_TOTAL_LENGTH]
    types = {i.name: i.type.tensor_type.elem_type for i in proto.graph.input}
    lengths = (names.SEQLENS_K, names.TOTAL_SEQUENCE_LENGTH, names.ENCODER_SEQLENS_K,
               names.ENCODER_TOTAL_LENGTH)
    assert {types[name] for name in lengths} == {onnx.TensorProto.INT32}


def test_verify_bundle_passes_with_rows_of_different_lengths(inplace_dir, tiny_model):
    report = verify_bundle(inplace_dir, tiny_model, sources=[[5, 6, 7, 2], [8, 2], [9, 10, 2]])
    assert report.kv_cache == "inplace"
    assert max(report.logprobs_max_diff, report.present_max_diff, report.cross_attentions_max_diff) <= 1e-4
    assert report.greedy_identical == report.greedy_sources == 3
    ragged = [lens for lens in report.row_past_lens if len(set(lens)) > 1]
    assert ragged and any(0 in lens and max(lens) > 0 for lens in ragged)
    assert [4, 11, 9, 1] in report.cases and [9, 8, 7, 6] in report.row_past_lens
    for (batch, _, past_len, new_len), lens in zip(report.cases, report.row_past_lens, strict=True):
        assert len(lens) == batch and max(lens) == past_len
        assert batch == 1 or new_len == 1 or past_len == 0  # GroupQueryAttention's restriction


def test_verification_sees_a_read_of_the_garbage_columns(inplace_dir, tiny_model, monkeypatch):
    real = export.verify.base.decoder_feeds

    def one_column_too_far(*args, **kwargs):
        feeds = real(*args, **kwargs)
        if names.SEQLENS_K in feeds and feeds[names.SEQLENS_K].max() > 0:  # attend one stale column
            feeds[names.SEQLENS_K] = feeds[names.SEQLENS_K] + 1
            feeds[names.TOTAL_SEQUENCE_LENGTH] = np.array(feeds[names.TOTAL_SEQUENCE_LENGTH] + 1, np.int32)
        return feeds

    monkeypatch.setattr(export.verify.base, "decoder_feeds", one_column_too_far)
    with pytest.raises(ParityError, match="differs"):
        verify_bundle(inplace_dir, tiny_model, sources=[[5, 2]], cases=(Case(3, 6, 4, 1),))


def test_verification_sees_a_read_of_the_encoder_padding(inplace_dir, tiny_model, monkeypatch):
    real = export.verify.base.decoder_feeds

    def one_source_position_too_far(*args, **kwargs):
        feeds = real(*args, **kwargs)
        if names.ENCODER_SEQLENS_K in feeds:  # rows shorter than the source axis read a garbage column
            total = int(feeds[names.ENCODER_TOTAL_LENGTH])
            feeds[names.ENCODER_SEQLENS_K] = np.minimum(feeds[names.ENCODER_SEQLENS_K] + 1, total - 1)
        return feeds

    monkeypatch.setattr(export.verify.base, "decoder_feeds", one_source_position_too_far)
    with pytest.raises(ParityError, match="differs"):
        verify_bundle(inplace_dir, tiny_model, sources=[[5, 2]], cases=(Case(3, 6, 4, 1),))


@pytest.mark.parametrize("src_lens,new_len", [([5, 1, 3], 1), ([4], 3)])
@torch.inference_mode()
def test_cached_cross_attention_equals_the_modules_masked_attention(src_lens, new_len):
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=12, n_heads=3).eval()
    b, s = len(src_lens), max(src_lens) + 2
    x, memory = torch.randn(b, new_len, 12), torch.randn(b, s, 12)
    _, (k, v), _ = mha(memory, memory)  # the encoder's projected K/V (B, H, S, Dh)
    lengths = torch.tensor(src_lens)
    mask = (torch.arange(s)[None, :] < lengths[:, None])[:, None]  # (B, 1, S)
    ref_out, _, ref_w = mha(x, kv=(k, v), mask=mask)
    k_bad, v_bad = k.clone(), v.clone()
    for r, n in enumerate(src_lens):  # garbage beyond each row's source: never read
        k_bad[r, :, n:], v_bad[r, :, n:] = garbage(k[r, :, n:].shape, 3), garbage(v[r, :, n:].shape, 4)
    setattr(mha, CROSS_LENGTHS, ((lengths - 1).to(torch.int32), torch.tensor(s, dtype=torch.int32)))
    setattr(mha, WITH_WEIGHTS, True)
    try:  # the export's path: q projection with its bias, then torch.ops.translator.cached_cross_attention
        out, _, weights = fused_forward(mha, x, kv=(k_bad, v_bad))
    finally:
        delattr(mha, CROSS_LENGTHS)
        delattr(mha, WITH_WEIGHTS)
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights, ref_w, atol=1e-6, rtol=1e-5)  # zeros beyond each source too


def test_io_binding_updates_the_numpy_buffer_in_place(inplace_dir, tiny_model):
    cfg = tiny_model.cfg
    n, h, dh = cfg.n_decoder_layers, cfg.n_heads, cfg.d_head
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    dec = cpu_session(inplace_dir / names.DECODER_FILE, so)  # joins a global pool if a Runner made one
    rng = np.random.default_rng(0)
    lens, s, capacity = np.array([3, 0, 5]), 4, 8
    b = len(lens)
    feeds = {
        names.INPUT_IDS: rng.integers(4, cfg.vocab_size, (b, 1)),
        names.POSITION_IDS: lens[:, None].astype(np.int64),
        names.SEQLENS_K: lens.astype(np.int32),  # one new token: cache length after the step - 1
        names.TOTAL_SEQUENCE_LENGTH: np.array(lens.max() + 1, np.int32),
        names.ENCODER_SEQLENS_K: np.array([3, 1, 2], np.int32),  # sources of 4, 2 and 3 tokens
        names.ENCODER_TOTAL_LENGTH: np.array(4, np.int32),
    }
    buffers = {}
    for i in range(n):
        for kv in ("key", "value"):
            buffers[i, kv] = rng.standard_normal((b, h, capacity, dh), np.float32)
            feeds[names.past_name(i, "encoder", kv)] = rng.standard_normal((b, h, s, dh), np.float32)
    before = {k: v.copy() for k, v in buffers.items()}
    past = {names.past_name(i, "decoder", kv): v for (i, kv), v in before.items()}
    plain = dec.run(None, {**feeds, **past})

    binding = dec.io_binding()
    for name, value in feeds.items():
        binding.bind_cpu_input(name, value)
    binding.bind_output(names.LOGPROBS)
    for (i, kv), buf in buffers.items():
        value = ort.OrtValue.ortvalue_from_numpy(buf)
        assert value.data_ptr() == buf.ctypes.data  # wraps the numpy memory, no copy
        binding.bind_ortvalue_input(names.past_name(i, "decoder", kv), value)
        binding.bind_ortvalue_output(names.present_name(i, "decoder", kv), value)
    dec.run_with_iobinding(binding)
    np.testing.assert_allclose(binding.get_outputs()[0].numpy(), plain[0], atol=1e-6)

    out_names = names.decoder_outputs(n)
    for (i, kv), buf in buffers.items():
        present = plain[out_names.index(names.present_name(i, "decoder", kv))]
        for r, p in enumerate(lens):
            np.testing.assert_array_equal(buf[r, :, :p], before[i, kv][r, :, :p])  # the past: kept
            np.testing.assert_allclose(buf[r, :, p], present[r, :, p], atol=1e-6)  # the new column
            assert np.abs(buf[r, :, p] - before[i, kv][r, :, p]).max() > 0.1  # ... was written here
    # the verifier's helper does the same binding
    again = {k: v.copy() for k, v in before.items()}
    bound = BoundCache(dec, [again[i, kv] for i in range(n) for kv in ("key", "value")])
    np.testing.assert_allclose(bound.run(feeds), plain[0], atol=1e-6)
    for k, buf in buffers.items():
        np.testing.assert_array_equal(again[k][np.arange(b), :, lens], buf[np.arange(b), :, lens])


def test_cli_writes_an_inplace_manifest_and_fp16_variant(inplace_dir, tiny_model):
    manifest = json.loads((inplace_dir / names.BUNDLE_FILE).read_text())
    n = tiny_model.cfg.n_decoder_layers
    assert manifest["onnx"]["attention"] == "inplace" and manifest["onnx"]["kv_cache"] == "inplace"
    assert manifest["io"]["decoder"]["inputs"] == names.decoder_inputs(n, "inplace")
    assert names.ATTENTION_MASK not in manifest["io"]["dynamic_axes"]["decoder"]
    assert manifest["verification"]["kv_cache"] == "inplace"
    assert manifest["variants"] == {"fp16": FP16_FILES}
    assert manifest["provider_variants"] == {"CUDAExecutionProvider": "fp16"}
    fp16 = onnx.load(str(inplace_dir / FP16_FILES["decoder"]))
    types = {i.name: i.type.tensor_type.elem_type for i in fp16.graph.input}
    assert types[names.SEQLENS_K] == types[names.TOTAL_SEQUENCE_LENGTH] == onnx.TensorProto.INT32
    assert types[names.past_name(0, "decoder", "key")] == onnx.TensorProto.FLOAT16
    ops = graph_ops(inplace_dir / FP16_FILES["decoder"])  # cross-attention: MultiHeadAttention (CUDA)
    assert ops.count(GQA) == n and ops.count((MS_DOMAIN, "MultiHeadAttention")) == n
    result = verify_fp16(inplace_dir, tiny_model, [[5, 6, 2], [7, 2]], **FP16_FILES)
    assert result["logprobs_max_diff"] <= FP16_ATOL["logprobs"] and result["greedy_sources"] == 2
