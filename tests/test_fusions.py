"""The SkipLayerNormalization fusion pass: fewer nodes, same outputs in ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from export.fusions import MS_DOMAIN, fuse_skip_layer_norm
from export.verify import cpu_session

D = 8


def sublayers_graph(pre_ln: bool) -> onnx.ModelProto:
    """x -> two residual sublayers `x + (LN?(x) W + b)`, each followed by a LayerNormalization."""
    rng = np.random.default_rng(0)
    inits = []
    for i in range(2):
        inits += [numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(D).astype(np.float32), f"b{i}"),
                  numpy_helper.from_array(rng.uniform(0.5, 1.5, D).astype(np.float32), f"g{i}"),
                  numpy_helper.from_array(rng.standard_normal(D).astype(np.float32), f"be{i}")]
    nodes, x = [], "x"
    for i in range(2):
        h = f"n{i - 1}" if pre_ln and i else x
        nodes += [helper.make_node("MatMul", [h, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"lin{i}"]),  # bias
                  helper.make_node("Add", [x, f"lin{i}"], [f"sum{i}"]),  # residual
                  helper.make_node("LayerNormalization", [f"sum{i}", f"g{i}", f"be{i}"], [f"n{i}"],
                                   axis=-1, epsilon=1e-5)]
        x = f"sum{i}" if pre_ln else f"n{i}"  # pre-LN: the sum is the next residual too
    outputs = [helper.make_tensor_value_info(f"n{1}", TensorProto.FLOAT, None),
               helper.make_tensor_value_info("sum1", TensorProto.FLOAT, None)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, D])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model


def run(model: onnx.ModelProto, x: np.ndarray, tmp_path: Path) -> list[np.ndarray]:
    """Outputs of the model on x, ORT's own optimizations off."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    path = tmp_path / f"model-{len(list(tmp_path.iterdir()))}.onnx"
    onnx.save_model(model, path)
    return cpu_session(path, so).run(None, {"x": x})


def test_fusion_keeps_outputs_and_removes_both_adds_per_sublayer(tmp_path):
    x = np.random.default_rng(1).standard_normal((2, 3, D)).astype(np.float32)
    for pre_ln in (True, False):
        model = sublayers_graph(pre_ln)
        want = run(model, x, tmp_path)
        fused = onnx.ModelProto()
        fused.CopyFrom(model)
        assert fuse_skip_layer_norm(fused) == 2
        ops = [(n.domain, n.op_type) for n in fused.graph.node]
        assert ops.count((MS_DOMAIN, "SkipLayerNormalization")) == 2
        assert ("", "Add") not in ops and ("", "LayerNormalization") not in ops
        assert len(ops) == len(model.graph.node) - 4
        for got, ref in zip(run(fused, x, tmp_path), want, strict=True):
            np.testing.assert_allclose(got, ref, atol=1e-5)


def test_layer_norm_without_residual_add_is_left_alone():
    g = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones(D, np.float32), "g"),
         numpy_helper.from_array(np.zeros(D, np.float32), "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    assert fuse_skip_layer_norm(model) == 0
    assert [n.op_type for n in model.graph.node] == ["LayerNormalization"]
