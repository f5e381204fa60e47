"""CPU sessions (service/runtime/model/sessions.py) and DecoderBinding (service/runtime/cache/backends.py)."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from export.verify.base import cpu_session
from interface import names
from interface.sessions import cpu_flags, cpu_session_config
from service.runtime.cache.backends import DecoderBinding
from service.runtime.model.sessions import CPU, session_options
from service.runtime.runner import Runner


@pytest.fixture(scope="module")
def decoder(tiny_bundle):
    """The tiny bundle's decoder session (in-place lowering)."""
    return cpu_session(tiny_bundle / names.DECODER_FILE, ort.SessionOptions())


def random_step(decoder, seed: int, rows: int = 3, src: int = 4, capacity: int = 8):
    """Feeds and self-attention buffers of one step, rows of different lengths."""
    rng = np.random.default_rng(seed)
    inputs = {i.name: i for i in decoder.get_inputs()}
    heads, d_head = inputs[names.past_name(0, "decoder", "key")].shape[1::2]
    n_layers = sum(1 for n in inputs if n.endswith(".decoder.key"))
    vocab = decoder.get_outputs()[0].shape[-1]
    lens = rng.integers(0, capacity - 1, rows)
    feeds = {
        names.INPUT_IDS: rng.integers(4, vocab, (rows, 1)),
        names.POSITION_IDS: lens[:, None].astype(np.int64),
        names.SEQLENS_K: lens.astype(np.int32),
        names.TOTAL_SEQUENCE_LENGTH: np.array(lens.max() + 1, np.int32),
        names.ENCODER_SEQLENS_K: rng.integers(0, src, rows).astype(np.int32),  # source length - 1
        names.ENCODER_TOTAL_LENGTH: np.array(src, np.int32),
    }
    past = {}
    for i in range(n_layers):
        for kv in ("key", "value"):
            for part, length in (("decoder", capacity), ("encoder", src)):
                shape = (rows, heads, length, d_head)
                past[names.past_name(i, part, kv)] = rng.standard_normal(shape, np.float32)
    return feeds, past


def plain_logprobs(decoder, feeds, past) -> np.ndarray:
    """Log-probs of an ordinary run on copies (no binding, no in-place update)."""
    copies = {k: v.copy() for k, v in past.items()}
    return decoder.run([names.LOGPROBS], {**feeds, **copies})[0]


def test_rebinds_what_changed_and_sees_in_place_edits(decoder):
    n_layers = sum(1 for i in decoder.get_inputs() if i.name.endswith(".decoder.key"))
    binding = DecoderBinding(decoder, names.self_cache_io(n_layers))
    feeds, past = random_step(decoder, 0)
    expected = plain_logprobs(decoder, feeds, past)
    logp, *_ = binding.run(feeds, past)
    np.testing.assert_allclose(logp, expected, atol=1e-5)

    # the same objects edited in place: not rebound, the next run reads the new values
    other, other_past = random_step(decoder, 1)
    for name, arr in feeds.items():
        arr[...] = other[name]
    for name, arr in past.items():
        arr[...] = other_past[name]
    expected = plain_logprobs(decoder, feeds, past)
    again, *_ = binding.run(feeds, past)
    assert again is logp  # the output buffer is reused while its shape is the same
    np.testing.assert_allclose(again, expected, atol=1e-5)

    # new objects of other shapes (more rows, a longer source): rebound, new output buffers
    feeds, past = random_step(decoder, 2, rows=5, src=6)
    expected = plain_logprobs(decoder, feeds, past)
    logp, attn, *_ = binding.run(feeds, past)
    assert logp.shape[0] == 5 and attn.shape == (5, 1, 6)
    np.testing.assert_allclose(logp, expected, atol=1e-5)


def test_writes_the_new_column_into_the_bound_cache(decoder):
    n_layers = sum(1 for i in decoder.get_inputs() if i.name.endswith(".decoder.key"))
    cache_io = names.self_cache_io(n_layers)
    binding = DecoderBinding(decoder, cache_io)
    feeds, past = random_step(decoder, 3)
    before = {k: v.copy() for k, v in past.items()}
    outputs = decoder.run(None, {**feeds, **before})
    present = dict(zip([o.name for o in decoder.get_outputs()], outputs, strict=True))
    binding.run(feeds, past)
    lens = feeds[names.SEQLENS_K]
    for past_name, present_name in cache_io.items():
        for r, p in enumerate(lens):
            np.testing.assert_array_equal(past[past_name][r, :, :p], before[past_name][r, :, :p])
            np.testing.assert_allclose(past[past_name][r, :, p], present[present_name][r, :, p], atol=1e-5)


def test_non_contiguous_inputs_are_bound_as_copies(decoder):
    n_layers = sum(1 for i in decoder.get_inputs() if i.name.endswith(".decoder.key"))
    binding = DecoderBinding(decoder, names.self_cache_io(n_layers))
    feeds, past = random_step(decoder, 4)
    expected = plain_logprobs(decoder, feeds, past)
    wide = np.zeros((len(feeds[names.INPUT_IDS]), 3), np.int64)
    wide[:, 1] = feeds[names.INPUT_IDS][:, 0]
    feeds[names.INPUT_IDS] = wide[:, 1:2]  # a strided view
    logp, *_ = binding.run(feeds, past)
    np.testing.assert_allclose(logp, expected, atol=1e-5)
    wide[:, 1] = (wide[:, 1] + 1) % 50 + 4  # edited after a copy was bound: seen at the next run
    changed, past2 = dict(feeds), {k: v for k, v in past.items()}
    expected = plain_logprobs(decoder, {**changed, names.INPUT_IDS: wide[:, 1:2].copy()}, past2)
    np.testing.assert_allclose(binding.run(feeds, past)[0], expected, atol=1e-5)


def test_cpu_sessions_leave_residual_add_and_layer_norm_unfused(tiny_bundle, tmp_path):
    runner = Runner(tiny_bundle, providers=["CPUExecutionProvider"], profile_prefix=str(tmp_path / "prof"))
    runner.translate([[5, 6, 7, 2]])
    ops = set()
    for session in (runner.sessions.encoder, runner.sessions.decoder):
        with open(session.end_profiling(), encoding="utf-8") as f:
            events = json.load(f)
        ops |= {e["args"]["op_name"] for e in events if e.get("cat") == "Node" and "op_name" in e["args"]}
    assert "LayerNormalization" in ops and "GroupQueryAttention" in ops  # the profile saw the kernels
    assert "SkipLayerNormalization" not in ops  # slower than Add + LayerNormalization on the CPU


@pytest.mark.parametrize("flags, exact_asked", [
    ({"avx2", "fma"}, True),  # Haswell .. Zen 3: U8S8 pair sums saturate in int16
    ({"avx2", "avx512f", "avx512bw"}, True),  # Skylake-SP: AVX-512 without VNNI saturates too
    ({"avx2", "avx512f", "avx512_vnni"}, False),  # Cascade Lake, Zen 4: exact 32-bit sums
    ({"avx2", "avx_vnni"}, False),  # Alder Lake: AVX-VNNI
    (None, True),  # flags unreadable: the safe kernels
])
def test_exact_int8_products_are_asked_for_only_where_the_cpu_has_no_vnni(flags, exact_asked):
    config = cpu_session_config(None if flags is None else frozenset(flags))
    assert config == ({"session.x64quantprecision": "1"} if exact_asked else {})


def test_cpu_sessions_compute_int8_products_exactly():
    """A MatMulInteger at the saturating extremes (uint8 255 by int8 +-127: pair sums of 64,770 past int16)
    through the service's CPU session options equals numpy's exact integer product on this CPU."""
    rng = np.random.default_rng(0)
    k, n = 64, 48
    b = rng.choice(np.array([-127, -126, 125, 127], np.int8), size=(k, n))
    b[:, 0] = 127  # a column whose every pair sum saturates (with a = 255)
    a = np.concatenate([np.full((1, k), 255, np.uint8), rng.integers(0, 256, (7, k), dtype=np.uint8)])
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "q",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, ["m", k])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, ["m", n])],
                              [numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    so = session_options(CPU, 1, shared_pool=False)
    for key, value in cpu_session_config(cpu_flags()).items():
        assert so.get_session_config_entry(key) == value
    (y,) = cpu_session(model.SerializeToString(), so).run(None, {"a": a})
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert exact[0, 0] == 255 * 127 * k  # the extreme the test is for
    np.testing.assert_array_equal(y, exact)
