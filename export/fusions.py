"""Post-export graph fusion: residual Add (+ bias Add) + LayerNormalization -> SkipLayerNormalization.

Every sublayer of the Transformer ends in `x + (h W + b)` followed by a LayerNormalization (the
next sublayer's norm in pre-LN, the same sublayer's in post-LN). ONNX Runtime's own optimizer
fuses this only when the sum has no other consumer, which is never the case in pre-LN (the sum is
also the next residual). `com.microsoft.SkipLayerNormalization` computes LN(input + skip + bias)
and can also return the sum (its 4th output), so three kernels become one either way:

    MatMul -> Add(b) -> Add(x) -> LayerNormalization      =>  MatMul -> SkipLayerNormalization
                          `-> (other consumers of the sum)         `-> input_skip_bias_sum

Applied by the fused lowerings after their attention rewrite; the graph's maths is unchanged
(verified against PyTorch like every export).
"""

from __future__ import annotations

from collections import defaultdict

import onnx
from onnx import helper

MS_DOMAIN = "com.microsoft"


def _attr(node: onnx.NodeProto, name: str, default: float | int) -> float | int:
    """A node attribute's value, or default."""
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _topological(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """Nodes in an order where every input is produced first (stable: original order if valid)."""
    done, ordered, pending = set(available) | {""}, [], list(nodes)
    while pending:
        rest = []
        for n in pending:
            if all(i in done for i in n.input):
                ordered.append(n)
                done.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise ValueError(f"graph has a cycle or a missing input near {rest[0].name}")
        pending = rest
    return ordered


def fuse_skip_layer_norm(proto: onnx.ModelProto) -> int:
    """Rewrite every Add(+bias) -> Add -> LayerNormalization chain in place; returns how many."""
    graph = proto.graph
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for n in graph.node:
        for i in n.input:
            consumers[i].append(n)
    initializers = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    drop: set[str] = set()  # first outputs of the Add nodes folded away
    fused = 0
    for ln in list(graph.node):
        if ln.op_type != "LayerNormalization" or ln.domain not in ("", "ai.onnx") or len(ln.input) < 3:
            continue
        if _attr(ln, "axis", -1) != -1:
            continue
        add = producer.get(ln.input[0])
        if add is None or add.op_type != "Add" or add.output[0] in drop:
            continue
        # one side of the residual may be a bias Add (MatMul output + 1-D initializer): fold the bias
        main, skip, bias = add.input[0], add.input[1], ""
        for a, b in ((add.input[1], add.input[0]), (add.input[0], add.input[1])):
            inner = producer.get(a)
            if (inner is not None and inner.op_type == "Add" and len(consumers[a]) == 1 and a not in outputs
                    and inner.output[0] not in drop):
                for x, c in ((inner.input[0], inner.input[1]), (inner.input[1], inner.input[0])):
                    if c in initializers and len(initializers[c].dims) == 1:
                        main, skip, bias = x, b, c
                        drop.add(inner.output[0])
                        break
            if bias:
                break
        total = add.output[0]
        keep_sum = total in outputs or len(consumers[total]) > 1
        node = helper.make_node(
            "SkipLayerNormalization", [main, skip, ln.input[1], ln.input[2], bias],
            [ln.output[0], "", "", total if keep_sum else ""],
            domain=MS_DOMAIN, name=f"{ln.output[0]}_skip", epsilon=float(_attr(ln, "epsilon", 1e-5)),
        )
        ln.CopyFrom(node)  # takes the LayerNormalization's place in the topological order
        drop.add(add.output[0])
        fused += 1
    kept = [n for n in graph.node if not (n.op_type == "Add" and n.output[0] in drop)]
    del graph.node[:]
    graph.node.extend(_topological(kept, {i.name for i in graph.input} | set(initializers)))
    if fused and not any(op.domain == MS_DOMAIN for op in proto.opset_import):
        proto.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return fused
