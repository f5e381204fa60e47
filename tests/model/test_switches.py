"""The configuration switches of imported pretrained families, each against its formula, and the
defaults that keep our own checkpoints and bundles as they were."""

from __future__ import annotations

import json
import math

import pytest
import torch

from model.config import ModelConfig
from model.decoding import beam_search, greedy_decode
from model.norms import RMSNorm
from model.positions import RelativePositionBias, relative_position_bucket
from model.transformer import (
    Embeddings,
    MultiHeadAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
    sinusoidal_table,
)
from tests.support import REPO_ROOT
from tests.support.model import T5_SWITCHES, tiny


@pytest.mark.parametrize("activation, sigma", [
    ("relu", lambda x: max(0.0, x)),
    ("gelu", lambda x: x * 0.5 * (1 + math.erf(x / math.sqrt(2)))),  # x Phi(x)
    ("silu", lambda x: x / (1 + math.exp(-x))),  # x sigmoid(x): Marian's "swish"
    # GELU's tanh approximation: T5 v1.1's gelu_new
    ("gelu_tanh", lambda x: 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))),
])
def test_feed_forward_activation_matches_formula(activation, sigma):
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(4, 6, activation=activation).eval()
    x = torch.randn(3, 4)
    with torch.no_grad():
        hidden = [[sigma(float(v)) for v in row] for row in x @ ffn.w_1.weight.T + ffn.w_1.bias]
    ref = torch.tensor(hidden) @ ffn.w_2.weight.T + ffn.w_2.bias
    assert torch.allclose(ffn(x), ref, atol=1e-5)


def test_gated_feed_forward_is_the_activation_times_a_second_projection():
    """T5 v1.1's gated-gelu: FFN(x) = (gelu_tanh(x W_1 + b_1) * (x V + c)) W_2 + b_2."""
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(4, 6, activation="gelu_tanh", gated=True).eval()
    x = torch.randn(3, 4, dtype=torch.float64)
    ffn = ffn.double()
    a = x @ ffn.w_1.weight.T + ffn.w_1.bias
    gate = 0.5 * a * (1 + torch.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3)))
    ref = (gate * (x @ ffn.v.weight.T + ffn.v.bias)) @ ffn.w_2.weight.T + ffn.w_2.bias
    assert torch.allclose(ffn(x), ref, atol=1e-12)
    assert PositionwiseFeedForward(4, 6).v is None


def test_rms_norm_scales_by_the_root_mean_square_without_centering():
    norm = RMSNorm(5, eps=1e-6).double()
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(2, 3, 5, dtype=torch.float64) + 3.0  # a mean a LayerNorm would remove
    ref = norm.weight * x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6)
    assert torch.allclose(norm(x), ref, atol=1e-12)
    assert set(norm.state_dict()) == {"weight"}  # no bias
    m = tiny(**T5_SWITCHES)
    assert isinstance(m.encoder.norm, RMSNorm) and isinstance(m.decoder.layers[0].sublayer[2].norm, RMSNorm)


def test_relative_buckets_are_t5s():
    """The buckets of key - query positions: transformers' T5Attention._relative_position_bucket (the
    reference: its float32 rounding decides the edges), both directions, far past max_distance."""
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = torch.arange(-600, 601)
    for bidirectional in (True, False):
        for buckets, distance in ((32, 128), (8, 20), (16, 20), (6, 10)):
            ours = relative_position_bucket(relative, bidirectional, buckets, distance)
            theirs = T5Attention._relative_position_bucket(relative, bidirectional, buckets, distance)
            assert torch.equal(ours, theirs), (bidirectional, buckets, distance)


def test_relative_bias_reads_a_learned_scalar_per_head_and_bucket():
    """bias[b, h, i, j] = table[bucket(key_j - query_i), h], for positions far beyond max_distance too."""
    torch.manual_seed(0)
    module = RelativePositionBias(n_heads=3, n_buckets=8, max_distance=10, bidirectional=False)
    queries, keys = torch.tensor([[0, 7, 40], [3, 4, 5]]), torch.arange(60).expand(2, 60)
    bias = module(queries, keys)
    assert bias.shape == (2, 3, 3, 60)
    buckets = relative_position_bucket(keys[:, None, :] - queries[:, :, None], False, 8, 10)
    assert torch.equal(bias, module.buckets.weight[buckets].permute(0, 3, 1, 2))
    assert "buckets.weight" in module.state_dict() and "bucket_of" not in module.state_dict()


def test_head_dim_sets_the_heads_apart_from_d_model():
    """T5's d_kv: h heads of head_dim, W^Q: d_model -> h * head_dim, W^O back to d_model."""
    mha = MultiHeadAttention(16, 4, d_head=3)
    assert (mha.w_q.weight.shape, mha.w_o.weight.shape) == ((12, 16), (16, 12))
    cfg = ModelConfig(d_model=16, n_heads=5, head_dim=8)  # 5 does not divide 16: fine with head_dim
    assert cfg.d_head == 8 and ModelConfig(d_model=16, n_heads=4).d_head == 4
    m = tiny(**T5_SWITCHES)
    assert m.decoder.layers[0].self_attn.w_k.weight.shape == (4 * 3, 16)
    assert m.pos.pe is None and m.tgt_pos is None  # no absolute positions
    assert m.encoder.position_bias is not None and m.decoder.position_bias is not None


def test_halves_table_is_marian_sin_then_cos():
    d, n = 16, 40
    pe = sinusoidal_table(n, d, "halves")
    for pos in range(n):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, d // 2 + i].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_fairseq_table_with_offset_is_m2m100s():
    d, n, offset = 16, 40, 2
    pe = sinusoidal_table(n, d, "fairseq", offset)
    assert pe.shape == (n, d)
    for pos in range(n):
        row = pos + offset  # position p reads row p + offset of fairseq's table
        for i in range(d // 2):
            angle = row * math.exp(-i * math.log(10000) / (d // 2 - 1))
            assert pe[pos, i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert pe[pos, d // 2 + i].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_offset_shifts_rows_and_interleaved_default_is_unchanged():
    assert torch.equal(sinusoidal_table(30, 8, "interleaved", 3), sinusoidal_table(33, 8)[3:])
    assert torch.equal(PositionalEncoding(8, 30).pe, sinusoidal_table(30, 8))
    with pytest.raises(ValueError, match="layout"):
        sinusoidal_table(4, 8, "learned")


def test_learned_table_and_embedding_norm():
    """position_table "learned": a saved parameter of max_len rows; embedding_norm: LayerNorm(x + pe)."""
    torch.manual_seed(0)
    learned = PositionalEncoding(8, 30, layout="learned", offset=2, norm=True)
    assert learned.pe.shape == (30, 8) and "pe" in learned.state_dict()
    assert "pe" not in PositionalEncoding(8, 30).state_dict()  # sinusoids: rebuilt, never saved
    with torch.no_grad():
        learned.pe.normal_()
        learned.norm.weight.normal_()
    x, positions = torch.randn(2, 3, 8), torch.tensor([[4, 5, 6], [0, 1, 2]])
    norm = learned.norm
    ref = torch.nn.functional.layer_norm(x + learned.pe[positions], (8,), norm.weight, norm.bias)
    assert torch.allclose(learned(x, positions), ref, atol=1e-6)
    assert torch.allclose(learned(x)[1], learned(x, positions)[1], atol=1e-6)  # default: 0..L-1
    m = tiny(position_table="learned", position_offset=2, embedding_norm=True)
    assert m.tgt_pos is not None and m.tgt_pos is not m.pos and tiny().tgt_pos is None
    assert {"pos.pe", "tgt_pos.pe", "pos.norm.weight", "tgt_pos.norm.bias"} <= set(m.state_dict())


def test_embedding_scale_is_sqrt_d_model_or_one():
    torch.manual_seed(0)
    tokens = torch.tensor([[1, 2, 3]])
    scaled, plain = Embeddings(5, 16), Embeddings(5, 16, scale=False)
    plain.lut.weight.data.copy_(scaled.lut.weight.data)
    assert torch.allclose(scaled(tokens), plain(tokens) * 4.0)
    assert torch.equal(plain(tokens), plain.lut(tokens))


def test_output_bias_is_added_to_the_logits():
    """final_logits_bias: log_softmax(x E^T + b) with b the generator's bias."""
    m = tiny()
    with torch.no_grad():
        m.generator.proj.bias.normal_()
    x = torch.randn(2, 3, 16)
    ref = torch.log_softmax(x @ m.src_embed.lut.weight.T + m.generator.proj.bias, dim=-1)
    assert torch.allclose(m.generator(x), ref, atol=1e-5)


def test_separate_source_vocabulary():
    m = tiny(tie_embeddings=False, source_vocab_size=25)
    assert m.src_embed.lut.weight.shape == (25, 16) and m.generator.proj.weight.shape == (40, 16)
    lp = m(torch.randint(4, 25, (2, 5)), torch.randint(4, 40, (2, 3)))
    assert lp.shape == (2, 3, 40)
    with pytest.raises(ValueError, match="one vocabulary"):
        ModelConfig(vocab_size=40, source_vocab_size=25)


def test_decoder_start_token_begins_greedy_and_beam():
    m = tiny(decoder_start_id=7)
    assert m.cfg.start_id == 7 and tiny().cfg.start_id == tiny().cfg.bos_id == 1
    src = torch.tensor([[5, 6, 8, 2]])
    hyp = greedy_decode(m, src, 6)[0]
    out = hyp.tokens + ([m.cfg.eos_id] if hyp.finished else [])
    with torch.no_grad():  # teacher forcing from the start token
        logp = m(src, torch.tensor([[7, *out[:-1]]]))[0]
    forced = sum(float(logp[t, tok]) for t, tok in enumerate(out))
    assert hyp.log_prob == pytest.approx(forced, abs=1e-4)
    beam = beam_search(m, src, 6, beam_size=1)[0][0]
    assert beam.tokens == hyp.tokens and beam.log_prob == pytest.approx(hyp.log_prob, abs=1e-5)


def test_switches_reject_unknown_values():
    with pytest.raises(ValueError, match="activation"):
        ModelConfig(activation="tanh")
    with pytest.raises(ValueError, match="position_table"):
        ModelConfig(position_table="rotary")
    with pytest.raises(ValueError, match="relative_buckets"):
        ModelConfig(position_table="relative", relative_buckets=2)
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(d_model=16, n_heads=5)


def test_defaults_keep_our_checkpoints_and_bundles_as_they_were():
    """A config saved before the switches existed loads as the paper's model and writes the same keys."""
    shipped = json.loads((REPO_ROOT / "artifacts/default/bundle/bundle.json").read_text())["model"]
    cfg = ModelConfig.from_dict(shipped)
    assert cfg.to_dict() == shipped
    assert (cfg.activation, cfg.position_table, cfg.position_offset, cfg.scale_embedding) == \
        ("relu", "interleaved", 0, True)
    assert not cfg.embedding_norm and not cfg.side_positions
    assert (cfg.rms_norm, cfg.gated_ffn, cfg.head_dim) == (False, False, None)
    assert cfg.src_vocab == cfg.vocab_size and cfg.start_id == cfg.bos_id
    marian = ModelConfig.from_dict({**shipped, "activation": "silu", "decoder_start_id": 5})
    assert marian.to_dict() == {**shipped, "activation": "silu", "decoder_start_id": 5}
    t5 = {**shipped, "position_table": "relative", "rms_norm": True, "head_dim": 8,
          "relative_max_distance": 64}
    assert ModelConfig.from_dict(t5).to_dict() == t5  # relative_buckets at its default (32): left out
