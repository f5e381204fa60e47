"""A position-biased packed Attention (T5's encoder) rewritten for the int8 variant
(export/variants/int8_attention.py): MatMul + Split + MultiHeadAttention computes what ONNX Runtime's
Attention kernel computed, its projection is then quantized as every MatMul, and what the form cannot
express is refused."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from export.export import ExportError, pin_ir_version
from export.lowering.fused import MS_DOMAIN
from export.variants.int8 import quantize_graph
from export.variants.int8_attention import unpack_biased_attention
from export.verify.base import cpu_session

B, S, D, HEADS = 2, 7, 16, 2


def attention_graph(sizes: list[int] | None = None, past: bool = False) -> onnx.ModelProto:
    """One com.microsoft.Attention: input (B, S, D), packed weights and bias, an int32 key padding mask
    (B, S), a position bias (1, HEADS, S, S); qkv_hidden_sizes where given."""
    rng = np.random.default_rng(0)
    width = sum(sizes) if sizes else 3 * D
    out_width = sizes[2] if sizes else D
    attrs = {"num_heads": HEADS, "mask_filter_value": float(np.finfo(np.float32).min)}
    if sizes:
        attrs["qkv_hidden_sizes"] = sizes
    inits = [numpy_helper.from_array(rng.standard_normal((D, width)).astype(np.float32) / 4, "w"),
             numpy_helper.from_array(rng.standard_normal(width).astype(np.float32) / 4, "b")]
    node = helper.make_node("Attention", ["x", "w", "b", "mask", "past" if past else "", "position_bias"],
                            ["y"], name="attn", domain=MS_DOMAIN, **attrs)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, D]),
              helper.make_tensor_value_info("mask", TensorProto.INT32, [B, S]),
              helper.make_tensor_value_info("position_bias", TensorProto.FLOAT, [1, HEADS, S, S])]
    if past:
        inputs.append(helper.make_tensor_value_info("past", TensorProto.FLOAT, [2, B, HEADS, 0, D // HEADS]))
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, out_width])
    graph = helper.make_graph([node], "attention", inputs, [output], inits)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid(MS_DOMAIN, 1)]
    proto = helper.make_model(graph, opset_imports=opsets)
    pin_ir_version(proto)
    return proto


def feeds() -> dict[str, np.ndarray]:
    """Inputs with one padded row (its last 3 keys masked) and a position bias large enough to matter."""
    rng = np.random.default_rng(1)
    mask = np.ones((B, S), dtype=np.int32)
    mask[1, -3:] = 0
    return {"x": rng.standard_normal((B, S, D)).astype(np.float32), "mask": mask,
            "position_bias": 2 * rng.standard_normal((1, HEADS, S, S)).astype(np.float32)}


def run(proto: onnx.ModelProto) -> np.ndarray:
    """The graph's output under ONNX Runtime's CPU provider (in the global thread pool if one exists)."""
    return cpu_session(proto.SerializeToString(), ort.SessionOptions()).run(None, feeds())[0]


@pytest.mark.parametrize("sizes", [None, [16, 16, 32]], ids=["packed", "wider-values"])
def test_the_rewrite_computes_what_attention_computed(sizes):
    proto = attention_graph(sizes)
    expected = run(proto)
    no_bias = attention_graph(sizes)
    no_bias.graph.node[0].input[5] = ""
    assert not np.allclose(run(no_bias), expected, atol=1e-2)  # the position bias matters to the output
    assert unpack_biased_attention(proto) == 1
    assert [n.op_type for n in proto.graph.node] == ["MatMul", "Split", "MultiHeadAttention"]
    onnx.checker.check_model(proto)
    np.testing.assert_allclose(run(proto), expected, rtol=1e-5, atol=1e-5)


def test_its_projection_is_quantized_and_stays_close():
    proto = attention_graph()
    expected = run(proto)
    int8 = quantize_graph(proto)
    ops = Counter(n.op_type for n in int8.graph.node)
    assert ops["MatMulInteger"] == 1 and ops["Attention"] == 0 and ops["MultiHeadAttention"] == 1
    assert not any(t.data_type == TensorProto.FLOAT and t.dims == [D, 3 * D] for t in int8.graph.initializer)
    unbiased = attention_graph()
    unbiased.graph.node[0].input[5] = ""
    error, bias_effect = np.abs(run(int8) - expected).mean(), np.abs(run(unbiased) - expected).mean()
    # int8 rounding (about 5% of the mean output on these random weights), not a lost input
    assert error < 0.1 * np.abs(expected).mean() and error < 0.2 * bias_effect


def test_attention_without_a_position_bias_is_left_for_qattention():
    proto = attention_graph()
    proto.graph.node[0].input[5] = ""
    assert unpack_biased_attention(proto) == 0
    assert Counter(n.op_type for n in quantize_graph(proto).graph.node)["QAttention"] == 1


def test_a_biased_attention_with_a_past_cache_is_refused():
    with pytest.raises(ExportError, match="past cache"):
        unpack_biased_attention(attention_graph(past=True))


def test_a_biased_attention_with_an_attribute_the_rewrite_would_drop_is_refused():
    proto = attention_graph()
    proto.graph.node[0].attribute.append(helper.make_attribute("do_rotary", 1))
    with pytest.raises(ExportError, match="do_rotary"):
        unpack_biased_attention(proto)
