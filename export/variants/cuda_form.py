"""The decoder's CUDA form: cross-attention as MultiHeadAttention, its alignment weights computed apart.

The "inplace" lowering (export/lowering/inplace.py) writes the decoder's cross-attention as
`com.microsoft.GroupQueryAttention` in its shared-KV form (empty new K/V, `causal` 0, the encoder's
K/V as the cache, `encoder_seqlens_k` as the lengths) and takes the last layer's alignment weights
from the kernel (`qk_output` 2). That is the fast choice on the CPU, but ONNX Runtime's CUDA
GroupQueryAttention refuses any QK output ("The current GQA CUDA implementation will never be
able to have a QK output", contrib_ops/cuda/bert/group_query_attention.cc). `cuda_cross_attention`
rewrites the finished graph (traced once from the model, export/export.py) so that every node
has a CUDA kernel once it is converted to fp16 (export/variants/fp16.py):

- the source mask is built once from the lengths, shared by every layer: positions
  Range(0, S) with S from the encoder key's shape, `keep` = positions <= encoder_seqlens_k[b]
  (bool (B, S)) and its int32 cast, MultiHeadAttention's `key_padding_mask`;
- each cross-attention node becomes `com.microsoft.MultiHeadAttention` with the query (B, T, D)
  (its bias already added), the encoder's key/value (B, H, S, Dh) as they are ("BNSH") and the
  int32 mask; `mask_filter_value` is float32's minimum, which the fp16 conversion clips;
- the alignment weights (B, H, T, S) of the last layer, the `cross_attentions` output before its
  mean over heads, are standard ops: Q scaled by 1/sqrt(Dh), split into heads, MatMul with K^T,
  Where(keep, scores, float32's minimum), Softmax. No node asks for a QK output.

The decoder's inputs and outputs do not change (`names.decoder_inputs(n, "inplace")`), so a
runtime loads this form like the base graph. Self-attention stays GroupQueryAttention (in-place
cache; CUDA runs it in fp16). A graph without shared-KV cross-attention is returned unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from interface import names

MS_DOMAIN = "com.microsoft"
MASK_FILTER_VALUE = float(np.finfo(np.float32).min)  # the model's masked_fill value
PREFIX = "cuda_cross"  # names of the nodes and values added here


def _attr(node: onnx.NodeProto, name: str, default: int = 0) -> int:
    """An integer attribute of a node, or default."""
    return next((a.i for a in node.attribute if a.name == name), default)


def is_shared_kv_cross_attention(node: onnx.NodeProto) -> bool:
    """A GroupQueryAttention node over the encoder's K/V (the inplace lowering's cross-attention)."""
    return (node.domain, node.op_type) == (MS_DOMAIN, "GroupQueryAttention") and \
        len(node.input) > 5 and node.input[5] == names.ENCODER_SEQLENS_K


def _const(proto: onnx.ModelProto, name: str, value: np.ndarray) -> str:
    """Add an initializer; return its name."""
    proto.graph.initializer.append(numpy_helper.from_array(value, f"{PREFIX}_{name}"))
    return f"{PREFIX}_{name}"


def _mask_nodes(proto: onnx.ModelProto, key: str) -> tuple[list[onnx.NodeProto], str, str]:
    """Nodes of the shared source mask from encoder_seqlens_k -> (nodes, keep (B, S) bool, int32 mask)."""
    n = PREFIX
    make = helper.make_node
    nodes = [
        make("Shape", [key], [f"{n}_key_shape"], name=f"{n}_key_shape"),
        make("Gather", [f"{n}_key_shape", _const(proto, "src_axis", np.array(2, np.int64))], [f"{n}_src_len"],
             name=f"{n}_src_len"),
        make("Range", [_const(proto, "zero", np.array(0, np.int64)), f"{n}_src_len",
                       _const(proto, "one", np.array(1, np.int64))], [f"{n}_positions"],
             name=f"{n}_positions"),
        make("Cast", [names.ENCODER_SEQLENS_K], [f"{n}_last"], to=TensorProto.INT64, name=f"{n}_last"),
        make("Unsqueeze", [f"{n}_last", _const(proto, "axis1", np.array([1], np.int64))], [f"{n}_last_col"],
             name=f"{n}_last_col"),
        make("LessOrEqual", [f"{n}_positions", f"{n}_last_col"], [f"{n}_keep"], name=f"{n}_keep"),
        make("Cast", [f"{n}_keep"], [f"{n}_key_padding_mask"], to=TensorProto.INT32,
             name=f"{n}_key_padding_mask"),
    ]
    return nodes, f"{n}_keep", f"{n}_key_padding_mask"


def _weights_nodes(
    proto: onnx.ModelProto, query: str, key: str, keep: str, weights: str, heads: int, head_dim: int
) -> list[onnx.NodeProto]:
    """Softmax(Q K^T / sqrt(Dh), masked) (B, H, T, S) as standard ops, written to `weights`."""
    n, make = f"{PREFIX}_weights", helper.make_node
    scale = _const(proto, "weights_scale", np.array(1.0 / math.sqrt(head_dim), np.float32))
    split = _const(proto, "weights_heads", np.array([0, 0, heads, head_dim], np.int64))
    fill = _const(proto, "weights_fill", np.array(MASK_FILTER_VALUE, np.float32))
    return [
        make("Mul", [query, scale], [f"{n}_q"], name=f"{n}_q"),
        make("Reshape", [f"{n}_q", split], [f"{n}_q_split"], name=f"{n}_q_split"),  # (B, T, H, Dh)
        make("Transpose", [f"{n}_q_split"], [f"{n}_q_heads"], perm=[0, 2, 1, 3], name=f"{n}_q_heads"),
        make("Transpose", [key], [f"{n}_k_t"], perm=[0, 1, 3, 2], name=f"{n}_k_t"),  # (B, H, Dh, S)
        make("MatMul", [f"{n}_q_heads", f"{n}_k_t"], [f"{n}_scores"], name=f"{n}_scores"),  # (B, H, T, S)
        make("Unsqueeze", [keep, _const(proto, "axes12", np.array([1, 2], np.int64))], [f"{n}_keep"],
             name=f"{n}_keep"),  # (B, 1, 1, S)
        make("Where", [f"{n}_keep", f"{n}_scores", fill], [f"{n}_masked"], name=f"{n}_masked"),
        make("Softmax", [f"{n}_masked"], [weights], axis=-1, name=f"{n}_softmax"),
    ]


def _to_mha(node: onnx.NodeProto, mask: str) -> None:
    """Shared-KV GroupQueryAttention -> MultiHeadAttention(query, key, value, -, key_padding_mask)."""
    heads = _attr(node, "num_heads")
    query, key, value = node.input[0], node.input[3], node.input[4]
    output = node.output[0]
    del node.input[:], node.output[:], node.attribute[:]
    node.input.extend([query, key, value, "", mask])
    node.output.append(output)
    node.attribute.extend([helper.make_attribute("num_heads", heads),
                           helper.make_attribute("mask_filter_value", MASK_FILTER_VALUE)])
    node.op_type = "MultiHeadAttention"


def drop_unused(proto: onnx.ModelProto) -> None:
    """Remove nodes none of whose outputs is used, initializers nothing reads and stale value types."""
    graph = proto.graph
    outputs = {o.name for o in graph.output}
    while True:
        used = {x for node in graph.node for x in node.input} | outputs
        dead = [i for i, node in enumerate(graph.node) if not any(o in used for o in node.output if o)]
        if not dead:
            break
        for i in reversed(dead):
            del graph.node[i]
    used = {x for node in graph.node for x in node.input} | outputs
    produced = {o for node in graph.node for o in node.output}
    keep = [init for init in graph.initializer if init.name in used]
    typed = [v for v in graph.value_info if v.name in produced]
    del graph.initializer[:], graph.value_info[:]
    graph.initializer.extend(keep)
    graph.value_info.extend(typed)


def cuda_cross_attention(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Rewrite the shared-KV GroupQueryAttention cross-attention of `proto` in place (see module doc)."""
    graph = proto.graph
    cross = [i for i, node in enumerate(graph.node) if is_shared_kv_cross_attention(node)]
    if not cross:
        return proto
    first = graph.node[cross[0]]
    mask_nodes, keep, mask = _mask_nodes(proto, first.input[3])
    added: list[tuple[int, list[onnx.NodeProto]]] = [(cross[0], mask_nodes)]
    for i in cross:
        node = graph.node[i]
        weights = node.output[3] if len(node.output) > 3 and _attr(node, "qk_output") else ""
        if weights:
            key_shape = next((v for v in graph.input if v.name == node.input[3]), None)
            head_dim = key_shape.type.tensor_type.shape.dim[3].dim_value if key_shape is not None else 0
            if head_dim <= 0:
                raise ValueError(f"{node.name}: the head size of {node.input[3]} is not a fixed dimension")
            heads = _attr(node, "num_heads")
            query, key = node.input[0], node.input[3]
            added.append((i + 1, _weights_nodes(proto, query, key, keep, weights, heads, head_dim)))
        _to_mha(node, mask)
    for position, nodes in sorted(added, key=lambda item: item[0], reverse=True):
        for offset, new in enumerate(nodes):
            graph.node.insert(position + offset, new)
    drop_unused(proto)
    return proto
