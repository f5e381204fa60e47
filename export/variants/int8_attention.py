"""The int8 form of a position-biased packed attention (T5's encoder): its Q/K/V projection as a MatMul.

The fused lowering makes the encoder's self-attention one `com.microsoft.Attention` (input, packed weights
W = [W^Q W^K W^V], bias, mask, past, attention_bias). ONNX Runtime's quantizer makes Attention into
QAttention, which has no attention_bias input, so an Attention with T5's position bias would keep its packed
weights in fp32 (three of a layer's 4 d_model^2 attention weights). `unpack_biased_attention` rewrites each
such node into what it computes:

    MatMul(input, W) -> Split in three (Q, K, V; the heads' widths as Attention reads them)
    -> com.microsoft.MultiHeadAttention(Q, K, V, bias, mask, attention_bias)

with the node's num_heads, scale and mask_filter_value. The MatMul is then quantized as every other one
(DynamicQuantizeMatMul once loaded); the bias is added inside MultiHeadAttention as Attention did. Attention
nodes without a position bias are left for QAttention.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from export.export import ExportError
from export.lowering.fused import MS_DOMAIN

ATTENTION_BIAS = 5  # Attention's input index of attention_bias (4: past)
KEPT_ATTRIBUTES = ("num_heads", "scale", "mask_filter_value")  # Attention's, with the same meaning in MHA
READ_ATTRIBUTES = ("qkv_hidden_sizes", "unidirectional")  # Attention's, read by the rewrite itself


def is_biased_attention(node: onnx.NodeProto) -> bool:
    """Whether node is a com.microsoft.Attention adding a position bias (its input 5)."""
    return (node.op_type == "Attention" and node.domain == MS_DOMAIN and len(node.input) > ATTENTION_BIAS
            and bool(node.input[ATTENTION_BIAS]))


def unpack_biased_attention(proto: onnx.ModelProto) -> int:
    """Rewrite proto's position-biased Attention nodes in place as MatMul + Split + MultiHeadAttention; how
    many. ExportError for a node this form cannot express (a past cache, a unidirectional mask, packed
    weights that are not an initializer, an attribute it does not carry over, e.g. rotary embeddings)."""
    weights = {t.name: t for t in proto.graph.initializer}
    nodes, count = [], 0
    for node in proto.graph.node:
        if not is_biased_attention(node):
            nodes.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if (node.input[4] or any(node.output[1:]) or attrs.get("unidirectional", 0)
                or node.input[1] not in weights):
            raise ExportError(f"{node.name or node.output[0]}: a biased Attention with a past cache, a "
                              "unidirectional mask or non-constant weights has no int8 form")
        if other := sorted(set(attrs) - set(KEPT_ATTRIBUTES) - set(READ_ATTRIBUTES)):
            raise ExportError(f"{node.name or node.output[0]}: a biased Attention with attribute(s) {other} "
                              "has no int8 form")
        width = weights[node.input[1]].dims[1]
        sizes = attrs.get("qkv_hidden_sizes") or [width // 3] * 3
        if sum(sizes) != width or sizes[0] != sizes[1]:
            raise ExportError(f"{node.name or node.output[0]}: qkv_hidden_sizes {list(sizes)} do not split "
                              f"its packed weights of width {width}")
        name = node.name or f"biased_attention_{count}"
        packed, widths = f"{name}_qkv", f"{name}_qkv_sizes"
        q, k, v = (f"{name}_{part}" for part in "qkv")
        proto.graph.initializer.append(numpy_helper.from_array(np.asarray(sizes, dtype=np.int64), widths))
        nodes.append(helper.make_node("MatMul", list(node.input[:2]), [packed], name=f"{name}_matmul"))
        nodes.append(helper.make_node("Split", [packed, widths], [q, k, v], name=f"{name}_split", axis=-1))
        mha = helper.make_node("MultiHeadAttention", [q, k, v, node.input[2], node.input[3],
                                                      node.input[ATTENTION_BIAS]],
                               [node.output[0]], name=name, domain=MS_DOMAIN)
        mha.attribute.extend(a for a in node.attribute if a.name in KEPT_ATTRIBUTES)
        nodes.append(mha)
        count += 1
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    return count
