"""The Transformer's pieces against their formulas, and its masks against their promises."""

from __future__ import annotations

import math

import pytest
import torch

from model.config import ModelConfig
from model.transformer import (
    MultiHeadAttention,
    PositionalEncoding,
    padding_mask,
    scaled_dot_product_attention,
    subsequent_mask,
)
from tests.support.model import LAYOUTS, tiny


def test_positional_encoding_matches_formula():
    d, n = 16, 50
    pe = PositionalEncoding(d, n).pe
    for pos in range(n):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_attention_matches_hand_computation():
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)
    out, w = scaled_dot_product_attention(q, k, v)
    for b in range(2):
        for h in range(3):
            for i in range(5):
                scores = [
                    sum(q[b, h, i, d] * k[b, h, j, d] for d in range(8)) / math.sqrt(8) for j in range(7)
                ]
                m = max(scores)
                e = [math.exp(s - m) for s in scores]
                probs = [x / sum(e) for x in e]
                assert w[b, h, i].tolist() == pytest.approx([float(p) for p in probs], abs=1e-5)
                ref = sum(probs[j] * v[b, h, j] for j in range(7))
                assert torch.allclose(out[b, h, i], ref, atol=1e-5)
    assert torch.allclose(w.sum(-1), torch.ones(2, 3, 5), atol=1e-6)


def test_attention_mask_gives_zero_weight():
    torch.manual_seed(2)
    q, k, v = torch.randn(1, 1, 4, 8), torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8)
    mask = torch.tensor([True, True, False, True, False, False]).view(1, 1, 1, 6)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert (w[..., ~mask.view(6)] == 0).all()
    ref, _ = scaled_dot_product_attention(q, k[:, :, mask.view(6)], v[:, :, mask.view(6)])
    assert torch.allclose(out, ref, atol=1e-6)


def test_multi_head_is_concat_of_heads_times_w_o():
    torch.manual_seed(3)
    d, h = 16, 4
    mha = MultiHeadAttention(d, h).eval()
    x, mem = torch.randn(2, 5, d), torch.randn(2, 7, d)
    out, _, _ = mha(x, mem)
    heads = []
    for i in range(h):
        sl = slice(i * d // h, (i + 1) * d // h)
        qi = x @ mha.w_q.weight[sl].T + mha.w_q.bias[sl]
        ki = mem @ mha.w_k.weight[sl].T + mha.w_k.bias[sl]
        vi = mem @ mha.w_v.weight[sl].T + mha.w_v.bias[sl]
        heads.append(torch.softmax(qi @ ki.transpose(1, 2) / math.sqrt(d // h), -1) @ vi)
    ref = torch.cat(heads, -1) @ mha.w_o.weight.T + mha.w_o.bias
    assert torch.allclose(out, ref, atol=1e-5)


def test_subsequent_mask_is_lower_triangular():
    m = subsequent_mask(4)[0]
    assert m.tolist() == [[j <= i for j in range(4)] for i in range(4)]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_causal_mask_future_tokens_do_not_matter(layout):
    m = tiny(**LAYOUTS[layout])
    src = torch.randint(4, 40, (2, 6))
    tgt = torch.randint(4, 40, (2, 8))
    changed = tgt.clone()
    changed[:, 5:] = torch.randint(4, 40, (2, 3))
    a, b = m(src, tgt), m(src, changed)
    assert torch.allclose(a[:, :5], b[:, :5], atol=1e-6)
    assert not torch.allclose(a[:, 5:], b[:, 5:], atol=1e-3)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_source_padding_does_not_change_outputs(layout):
    m = tiny(**LAYOUTS[layout])
    src = torch.randint(4, 40, (1, 5))
    padded = torch.cat([src, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    tgt = torch.randint(4, 40, (1, 6))
    mem = m.encode(src, padding_mask(src, 0))
    mem_p = m.encode(padded, padding_mask(padded, 0))
    assert torch.allclose(mem, mem_p[:, :5], atol=1e-5)
    assert torch.allclose(m(src, tgt), m(padded, tgt), atol=1e-5)


def test_encoder_permutation_equivariant_only_without_positions():
    m = tiny()
    src = torch.randint(4, 40, (1, 7))
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    mask = padding_mask(src, 0)

    def enc(tokens, with_pe):
        x = m.src_embed(tokens)
        return m.encoder(m.pos(x) if with_pe else x, mask)

    assert torch.allclose(enc(src, False)[:, perm], enc(src[:, perm], False), atol=1e-5)
    assert not torch.allclose(enc(src, True)[:, perm], enc(src[:, perm], True), atol=1e-3)


def test_layer_norm_over_features_not_batch():
    m = tiny(norm_first=False)  # post-LN: every sublayer output is normalized
    src = torch.randint(4, 40, (3, 5))
    out = m.encode(src, padding_mask(src, 0))  # final LayerNorm has weight 1, bias 0 at init
    assert torch.allclose(out.mean(-1), torch.zeros(3, 5), atol=1e-5)
    assert torch.allclose(out.var(-1, unbiased=False), torch.ones(3, 5), atol=1e-3)
    other = src.clone()
    other[1:] = torch.randint(4, 40, (2, 5))
    assert torch.allclose(m.encode(other, padding_mask(other, 0))[0], out[0], atol=1e-6)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_kv_cache_equals_teacher_forcing(layout):
    m = tiny(**LAYOUTS[layout])
    src = torch.randint(4, 40, (3, 6))
    src[1, 4:] = 0
    tgt = torch.randint(4, 40, (3, 7))
    full = m(src, tgt)
    sm = padding_mask(src, 0)
    cross = m.cross_kv(m.encode(src, sm))
    past, steps = None, []
    for t in range(0, 7, 2):  # one step of 2 new tokens at a time (the last one has 1)
        lp, past, _ = m.decode(tgt[:, t : t + 2], cross, sm, past)
        steps.append(lp)
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
    assert past[0][0].shape == (3, 4, 7, m.cfg.d_head)  # (B, H, T, Dh)


@pytest.mark.parametrize("layout", ["pre-LN", "T5"])
def test_explicit_positions_and_self_mask_allow_ragged_rows(layout):
    """A row whose history is shorter (masked cache slots, own positions) decodes as if alone (T5: its keys'
    positions counted from its own first valid slot)."""
    m = tiny(**LAYOUTS[layout])
    src = torch.randint(4, 40, (2, 5))
    tgt = torch.randint(4, 40, (2, 4))
    sm = padding_mask(src, 0)
    cross = m.cross_kv(m.encode(src, sm))
    alone_lp, _, _ = m.decode(tgt[1:, :2], [(k[1:], v[1:]) for k, v in cross], sm[1:])
    # row 0 has a 2-token history; row 1 joins late: its first cache slots are invalid
    _, past, _ = m.decode(tgt[:, :2], cross, sm)
    pos = torch.tensor([[2, 3], [0, 1]])
    self_mask = torch.tensor([[True] * 4, [False, False, True, True]])
    lp, _, _ = m.decode(tgt[:, 2:] * torch.tensor([[1], [0]]) + tgt[:, :2] * torch.tensor([[0], [1]]),
                        cross, sm, past, positions=pos, self_mask=self_mask)
    assert torch.allclose(lp[1], alone_lp[0], atol=1e-5)


def test_log_softmax_output_is_normalized():
    m = tiny()
    lp = m(torch.randint(4, 40, (2, 5)), torch.randint(4, 40, (2, 3)))
    assert torch.allclose(lp.exp().sum(-1), torch.ones(2, 3), atol=1e-5)


def test_tied_embeddings_share_one_matrix():
    m = tiny()
    assert m.src_embed.lut.weight is m.tgt_embed.lut.weight is m.generator.proj.weight
    untied = tiny(tie_embeddings=False)
    assert untied.src_embed.lut.weight is not untied.generator.proj.weight


def test_config_rejects_bad_heads():
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(d_model=30, n_heads=4)
