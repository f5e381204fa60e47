"""The fused attention lowering: same maths as the model, fewer nodes, same ONNX Runtime outputs."""

from __future__ import annotations

from contextlib import ExitStack

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from export.export import attached, export_graphs
from export.lowering.attention import get_lowering
from export.lowering.fused import DOMAIN, KEY_PADDING, MS_DOMAIN, WITH_WEIGHTS, fused_forward, packed_cross_kv
from export.verify.base import compare_case, cpu_session, open_session
from export.verify.cases import Case
from interface import names
from model.transformer import MultiHeadAttention, subsequent_mask
from tests.support.model import graph_ops


@pytest.fixture(scope="module")
def plain_dir(tiny_model, tmp_path_factory):
    """The tiny model exported with the plain lowering (standard ONNX attention)."""
    out = tmp_path_factory.mktemp("plain")
    export_graphs(tiny_model, out, get_lowering("plain"))
    return out


@torch.inference_mode()
def test_fused_forward_equals_the_modules_own_attention():
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=12, n_heads=3).eval()
    b, t, p, s = 2, 3, 4, 5
    x, memory = torch.randn(b, t, 12), torch.randn(b, s, 12)
    past = (torch.randn(b, 3, p, 4), torch.randn(b, 3, p, 4))
    causal = torch.ones(t, p + t, dtype=torch.bool).tril(diagonal=p).unsqueeze(0).expand(b, t, p + t).clone()
    causal[1, :, :2] = False  # row 1: two hidden cache columns
    src_mask = torch.ones(b, 1, s, dtype=torch.bool)
    src_mask[0, :, 3:] = False  # row 0: padded source
    kv = mha.project_kv(memory)
    calls = {
        "self with past": dict(query=x, key_value=x, mask=causal, past=past),
        "cross, precomputed K/V": dict(query=x, mask=src_mask, kv=kv),
        "encoder self": dict(query=memory, key_value=memory, mask=src_mask),
        "causal, no mask past": dict(query=x, key_value=x, mask=subsequent_mask(t)),
    }
    for what, kwargs in calls.items():
        ref_out, ref_kv, _ = mha(**kwargs)
        out, present, weights = fused_forward(mha, **kwargs)
        assert weights is None
        torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-5, msg=what)
        for a, r in zip(present, ref_kv, strict=True):
            torch.testing.assert_close(a, r, msg=what)


@torch.inference_mode()
def test_fused_forward_adds_a_position_bias_like_the_model():
    """T5's relative position bias (B|1, H, Tq, Tk) reaches the fused ops as their attention_bias: the
    module's own outputs with that bias, heads of head_dim != d_model / H included; cross-attention takes
    none."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=12, n_heads=3, d_head=8).eval()
    b, t, p = 2, 3, 4
    x = torch.randn(b, t, 12)
    past = (torch.randn(b, 3, p, 8), torch.randn(b, 3, p, 8))
    causal = torch.ones(t, p + t, dtype=torch.bool).tril(diagonal=p).unsqueeze(0).expand(b, t, p + t).clone()
    causal[1, :, :2] = False
    src_mask = torch.ones(b, 1, t, dtype=torch.bool)
    src_mask[0, :, 2:] = False
    calls = {
        "self with past": dict(query=x, key_value=x, mask=causal, past=past,
                               bias=torch.randn(b, 3, t, p + t)),
        "encoder self": dict(query=x, key_value=x, mask=src_mask, bias=torch.randn(1, 3, t, t)),
    }
    for what, kwargs in calls.items():
        ref_out, ref_kv, _ = mha(**kwargs)
        out, present, _ = fused_forward(mha, **kwargs)
        torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-5, msg=what)
        unbiased, _, _ = mha(**{**kwargs, "bias": None})
        assert not torch.allclose(out, unbiased, atol=1e-3), what  # the bias was not dropped
    with pytest.raises(ValueError, match="self-attention only"):
        fused_forward(mha, x, mask=src_mask, kv=mha.project_kv(x), bias=torch.zeros(1, 3, t, t))


@torch.inference_mode()
def test_fused_forward_masks_padded_and_fully_masked_rows_like_the_model():
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=12, n_heads=3).eval()
    b, t, s = 3, 2, 5
    x, memory = torch.randn(b, t, 12), torch.randn(b, s, 12)
    padding = torch.tensor([[1] * s, [1, 1, 0, 0, 0], [0] * s], dtype=torch.int32)  # row 2: nothing to attend
    src_mask = padding.bool().unsqueeze(1)  # the model's (B, 1, S)
    calls = {
        "cross, precomputed K/V": dict(query=x, mask=src_mask, kv=mha.project_kv(memory)),
        "encoder self": dict(query=memory, key_value=memory, mask=src_mask),
    }
    for what, kwargs in calls.items():
        ref_out, _, ref_weights = mha(**kwargs)
        # from the boolean mask; from the export's int32 mask; with the weights as in the last layer
        for attrs in ({}, {KEY_PADDING: padding}, {KEY_PADDING: padding, WITH_WEIGHTS: True}):
            with ExitStack() as stack:
                for name, value in attrs.items():
                    stack.enter_context(attached([mha], name, value))
                out, _, weights = fused_forward(mha, **kwargs)
            torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-5, msg=f"{what} {list(attrs)}")
            if weights is not None:
                torch.testing.assert_close(weights, ref_weights, msg=what)
        assert torch.isfinite(ref_out).all()
    # the model's fully masked row attends uniformly (masked_fill with the dtype's minimum)
    torch.testing.assert_close(ref_weights[2], torch.full_like(ref_weights[2], 1 / s))


@torch.inference_mode()
def test_packed_cross_kv_equals_the_models_cross_kv(tiny_model):
    memory = torch.randn(3, 7, tiny_model.cfg.d_model)
    for got, ref in zip(packed_cross_kv(tiny_model, memory), tiny_model.cross_kv(memory), strict=True):
        for a, r in zip(got, ref, strict=True):
            torch.testing.assert_close(a, r, atol=1e-6, rtol=1e-5)


def test_graphs_use_the_contrib_op_and_are_smaller(tiny_concat_bundle, plain_dir, tiny_model):
    n_enc, n_dec = tiny_model.cfg.n_encoder_layers, tiny_model.cfg.n_decoder_layers
    mha = (MS_DOMAIN, "MultiHeadAttention")
    fused_dec = graph_ops(tiny_concat_bundle / names.DECODER_FILE)
    plain_dec = graph_ops(plain_dir / names.DECODER_FILE)
    # every self- and cross-attention (the last one's weights come from MHA's scores + Softmax)
    assert fused_dec.count(mha) == 2 * n_dec
    # the encoder's self-attention: com.microsoft.Attention (packed Q/K/V projection inside)
    assert graph_ops(tiny_concat_bundle / names.ENCODER_FILE).count((MS_DOMAIN, "Attention")) == n_enc
    assert mha not in plain_dec
    assert len(fused_dec) < len(plain_dec)
    for f in (names.ENCODER_FILE, names.DECODER_FILE):
        proto = onnx.load(str(tiny_concat_bundle / f))
        assert not any(n.domain == DOMAIN for n in proto.graph.node)  # placeholders rewritten
        imports = {o.domain: o.version for o in proto.opset_import}
        assert imports.get(MS_DOMAIN) == 1 and DOMAIN not in imports
        heads = [a.i for n in proto.graph.node if n.op_type in ("MultiHeadAttention", "Attention")
                 for a in n.attribute if a.name == "num_heads"]
        assert heads and set(heads) == {tiny_model.cfg.n_heads}


def test_fused_and_plain_graphs_agree_with_pytorch(tiny_concat_bundle, plain_dir, tiny_model):
    cases = (Case(1, 1, 0, 1), Case(3, 7, 5, 1), Case(2, 9, 0, 4), Case(4, 5, 6, 3))
    for directory in (tiny_concat_bundle, plain_dir):
        enc = open_session(directory / names.ENCODER_FILE)
        dec = open_session(directory / names.DECODER_FILE)
        for case in cases:
            diffs = compare_case(enc, dec, tiny_model, case, np.random.default_rng(1))
            assert max(diffs.values()) <= 1e-4, (directory.name, case, diffs)


def test_fused_decoder_output_equals_plain_decoder_output(tiny_concat_bundle, plain_dir, tiny_model):
    cfg = tiny_model.cfg
    rng = np.random.default_rng(0)
    b, p, s, h, dh = 3, 6, 8, cfg.n_heads, cfg.d_head
    feeds = {
        names.INPUT_IDS: rng.integers(4, cfg.vocab_size, (b, 1)),
        names.POSITION_IDS: np.array([[6], [3], [0]]),
        names.ATTENTION_MASK: np.array([[1] * 7, [0, 0, 0, 1, 1, 1, 1], [0] * 6 + [1]]),
        names.ENCODER_ATTENTION_MASK: np.array([[1] * 8, [1] * 5 + [0] * 3, [1] * 2 + [0] * 6]),
    }
    for i in range(cfg.n_decoder_layers):
        for kv in ("key", "value"):
            feeds[names.past_name(i, "decoder", kv)] = rng.standard_normal((b, h, p, dh), np.float32)
            feeds[names.past_name(i, "encoder", kv)] = rng.standard_normal((b, h, s, dh), np.float32)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    run = {d: cpu_session(d / names.DECODER_FILE, so) for d in (tiny_concat_bundle, plain_dir)}
    fused, plain = (run[d].run(None, feeds) for d in (tiny_concat_bundle, plain_dir))
    for name, a, r in zip(names.decoder_outputs(cfg.n_decoder_layers), fused, plain, strict=True):
        np.testing.assert_allclose(a, r, atol=1e-4, err_msg=name)
