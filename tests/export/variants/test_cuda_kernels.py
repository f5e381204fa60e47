"""The fp16 variant is the CUDA form: every node has a CUDA kernel for its types
(export/variants/cuda_kernels.py, checked against the installed CUDA provider library), cross-attention as
MultiHeadAttention with its weights computed apart, no QK output anywhere, the same interface, decoding
close to PyTorch."""

from __future__ import annotations

import copy
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from onnxruntime.transformers.float16 import convert_float_to_float16

from export.build import FP16_FILES
from export.export import ExportError
from export.variants.cuda_form import cuda_cross_attention
from export.variants.cuda_kernels import CUDA_KERNELS, integer_nodes, missing_cuda_kernels
from export.variants.fp16 import to_fp16
from export.verify.base import ParityError, cpu_session, open_session
from export.verify.fp16 import FP16_ATOL, tie_margin, verify_fp16
from interface import names
from model.decoding import greedy_decode
from model.transformer import padding_mask
from tests.support.cuda import LIBRARY, first_arguments, kernel_classes
from tests.support.model import graph_ops

MHA, GQA = ("com.microsoft", "MultiHeadAttention"), ("com.microsoft", "GroupQueryAttention")
# table row -> (namespace, kernel class) of its CUDA kernel in libonnxruntime_providers_cuda.so
CONTRIB_CLASSES = {"Attention": "Attention", "MultiHeadAttention": "MultiHeadAttention",
                   "GroupQueryAttention": "GroupQueryAttention", "SkipLayerNormalization": "SkipLayerNorm"}
TEMPLATED = {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "Div", "And": "And", "Not": "Not",
             "Relu": "Relu", "MatMul": "MatMul", "Softmax": "Softmax", "LogSoftmax": "Softmax",
             "ReduceMean": "ReduceMean", "Less": "Less", "LessOrEqual": "LessOrEqual", "Cast": "Cast",
             "LayerNormalization": "LayerNorm", "Sigmoid": "Sigmoid", "Erf": "Erf",
             "ReduceMax": "ReduceMax", "Equal": "Equal", "Or": "Or", "Sqrt": "Sqrt",
             "Reciprocal": "Reciprocal", "Tanh": "Tanh"}  # and T5's (export/hf/t5.py)
UNTEMPLATED = {"Gather": "Gather", "Concat": "Concat", "Reshape": "Reshape", "Transpose": "Transpose",
               "Range": "Range", "Trilu": "Trilu", "Expand": "Expand", "Squeeze": "Squeeze",
               "Unsqueeze": "Unsqueeze", "Split": "Split_18", "GatherElements": "GatherElements",
               "Identity": "IdentityOp", "Pow": "Pow", "CumSum": "CumSum", "Clip": "Clip"}


def load(path) -> onnx.ModelProto:
    """An ONNX file."""
    return onnx.load(str(path))


def one_node_model(op: str, elem: int, opset: int = 18, **attrs) -> onnx.ModelProto:
    """y = op(x) over one tensor of element type elem."""
    x = helper.make_tensor_value_info("x", elem, [2, 3])
    y = helper.make_tensor_value_info("y", elem, [2, 3] if op != "ReduceMean" else None)
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], name="the_node", **attrs)], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def value(name: str, elem: int, shape: list[int] | None = None) -> onnx.ValueInfoProto:
    """A tensor value info."""
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.mark.parametrize("graph", ["encoder", "decoder"])
def test_every_node_of_the_fp16_variant_has_a_cuda_kernel(tiny_bundle, graph):
    proto = load(tiny_bundle / FP16_FILES[graph])
    assert missing_cuda_kernels(proto) == []
    floats = {i.type.tensor_type.elem_type for i in proto.graph.input if "key" in i.name or "value" in i.name}
    assert floats <= {TensorProto.FLOAT16}  # fp16 caches: the kernels were checked for fp16


def test_a_node_holding_a_subgraph_is_reported_itself():
    """No CUDA registration of the table holds a subgraph (our graphs have none): If is reported, whatever
    its branches hold."""
    f32 = TensorProto.FLOAT

    def branch(op: str) -> onnx.GraphProto:
        """x (outer scope) -> op -> b."""
        return helper.make_graph([helper.make_node(op, ["x"], ["b"])], op, [], [value("b", f32)])

    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch("Hardmax"),
                            else_branch=branch("Identity"))
    inputs = [value("c", TensorProto.BOOL, []), value("x", f32, [2])]
    graph = helper.make_graph([node], "g", inputs, [value("y", f32)])
    missing = missing_cuda_kernels(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    assert [(m.node, m.op, m.reason) for m in missing] == [("if", "ai.onnx:If",
                                                           "not in the CUDA kernel table")]


def test_the_fp32_decoder_is_reported_as_not_cuda_capable(tiny_bundle, tiny_model):
    """The check can fail: the base decoder's GroupQueryAttention nodes are float32 (CUDA: fp16/bf16
    only), and a plain fp16 conversion of it (the variant before its CUDA form) asks for a QK output."""
    n = tiny_model.cfg.n_decoder_layers
    base = load(tiny_bundle / names.DECODER_FILE)
    missing = missing_cuda_kernels(base)
    assert len(missing) == 2 * n and {m.op for m in missing} == {"com.microsoft:GroupQueryAttention"}
    assert all("is float;" in m.reason for m in missing)
    assert missing_cuda_kernels(load(tiny_bundle / names.ENCODER_FILE)) == []  # fp32 Attention has one
    plain_fp16 = convert_float_to_float16(load(tiny_bundle / names.DECODER_FILE), keep_io_types=False)
    (refused,) = missing_cuda_kernels(plain_fp16)
    assert "qk_output=2" in refused.reason


@pytest.mark.parametrize(("op", "elem", "opset", "reason"), [
    ("LogSoftmax", TensorProto.BFLOAT16, 18, "is bfloat16"),  # CUDA: double, float, float16
    ("ReduceMean", TensorProto.INT64, 18, "is int64"),
    ("Relu", TensorProto.INT32, 18, "is int32"),
    ("Hardmax", TensorProto.FLOAT, 18, "not in the CUDA kernel table"),  # CUDA registers none
    ("Transpose", TensorProto.FLOAT, 21, "op version 21 outside"),  # the table covers opset 18's versions
    ("Identity", TensorProto.FLOAT, 19, "op version 19 outside the registration's 14..18"),
])
def test_the_table_refuses_what_cuda_does_not_register(op, elem, opset, reason):
    (missing,) = missing_cuda_kernels(one_node_model(op, elem, opset))
    assert missing.node == "the_node" and reason in missing.reason


def test_an_fp16_variant_without_cuda_kernels_is_not_written(tmp_path):
    onnx.save(one_node_model("Hardmax", TensorProto.FLOAT), tmp_path / "g.onnx")
    with pytest.raises(ExportError, match="without a CUDA kernel"):
        to_fp16(tmp_path / "g.onnx", tmp_path / "g.fp16.onnx")
    assert not (tmp_path / "g.fp16.onnx").exists()


def test_cross_attention_is_multihead_attention_and_no_node_asks_for_a_qk_output(tiny_bundle, tiny_model):
    cfg = tiny_model.cfg
    n = cfg.n_decoder_layers
    proto = load(tiny_bundle / FP16_FILES["decoder"])
    ops = graph_ops(tiny_bundle / FP16_FILES["decoder"])
    assert ops.count(MHA) == n and ops.count(GQA) == n  # GQA: the in-place self-attention only
    assert [i.name for i in proto.graph.input] == names.decoder_inputs(n, "inplace")
    assert [o.name for o in proto.graph.output] == names.decoder_outputs(n)
    attributes = {a.name for node in proto.graph.node for a in node.attribute}
    assert not attributes & {"qk_output", "output_qk"}
    mha = [node for node in proto.graph.node if node.op_type == "MultiHeadAttention"]
    assert all(len(node.output) == 1 for node in mha)
    for i, node in enumerate(mha):  # query (with its bias), the encoder's BNSH K/V, one shared int32 mask
        kv = [names.past_name(i, "encoder", "key"), names.past_name(i, "encoder", "value")]
        assert list(node.input[1:4]) == [*kv, ""]
        assert node.input[4] == mha[0].input[4]
    (mask_cast,) = [node for node in proto.graph.node if mha[0].input[4] in node.output]
    assert mask_cast.op_type == "Cast"
    assert helper.get_attribute_value(mask_cast.attribute[0]) == TensorProto.INT32
    for node in [node for node in proto.graph.node if node.op_type == "GroupQueryAttention"]:
        assert names.SEQLENS_K in node.input and names.ENCODER_SEQLENS_K not in node.input
    (weights,) = [node for node in proto.graph.node if node.op_type == "Softmax"]  # the alignment weights
    (mean,) = [node for node in proto.graph.node if node.output[0] == names.CROSS_ATTENTIONS]
    assert mean.op_type == "ReduceMean" and mean.input[0] == weights.output[0]


@pytest.mark.parametrize("lens", [[3, 0, 5], [0]])
def test_the_cuda_form_computes_what_the_gqa_form_does(tiny_bundle, tiny_model, lens):
    """In float32 on the CPU, before any fp16 rounding: the MultiHeadAttention form of the decoder gives
    the GroupQueryAttention form's outputs, ignores the encoder K/V beyond each source, and gives no
    weight there."""
    cfg = tiny_model.cfg
    n, b, s = cfg.n_decoder_layers, len(lens), 6
    proto = cuda_cross_attention(load(tiny_bundle / names.DECODER_FILE))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    cuda_form = cpu_session(proto.SerializeToString(), so)
    base = open_session(tiny_bundle / names.DECODER_FILE)
    rng = np.random.default_rng(len(lens))
    src_lens = rng.integers(1, s + 1, b)
    feeds = {names.INPUT_IDS: rng.integers(4, cfg.vocab_size, (b, 1)),
             names.POSITION_IDS: np.array(lens, np.int64)[:, None],
             names.SEQLENS_K: np.array(lens, np.int32),
             names.TOTAL_SEQUENCE_LENGTH: np.array(max(lens) + 1, np.int32),
             names.ENCODER_SEQLENS_K: (src_lens - 1).astype(np.int32),
             names.ENCODER_TOTAL_LENGTH: np.array(s, np.int32)}
    for i in range(n):
        for kv in ("key", "value"):
            for kind, length in (("decoder", 8), ("encoder", s)):
                shape = (b, cfg.n_heads, length, cfg.d_head)
                feeds[names.past_name(i, kind, kv)] = rng.standard_normal(shape, np.float32)
    outputs = names.decoder_outputs(n)
    want, got = (dict(zip(outputs, s.run(outputs, feeds), strict=True)) for s in (base, cuda_form))
    for name in outputs:  # cross_attentions below: unspecified beyond each source in the GQA form
        if name != names.CROSS_ATTENTIONS:
            np.testing.assert_allclose(got[name], want[name], atol=1e-5, err_msg=name)
    attn_got, attn_want = got[names.CROSS_ATTENTIONS], want[names.CROSS_ATTENTIONS]
    for r, length in enumerate(src_lens):
        np.testing.assert_allclose(attn_got[r, :, :length], attn_want[r, :, :length], atol=1e-6)
        assert np.all(attn_got[r, :, length:] == 0.0)
    for i in range(n):  # garbage beyond each source: never read
        for kv in ("key", "value"):
            for r, length in enumerate(src_lens):
                feeds[names.past_name(i, "encoder", kv)][r, :, length:] = 100.0
    np.testing.assert_allclose(cuda_form.run(None, feeds)[0], got[names.LOGPROBS], atol=1e-6)


def test_the_manifest_names_the_fp16_variant_for_cuda_and_its_host_nodes(tiny_bundle):
    manifest = json.loads((tiny_bundle / names.BUNDLE_FILE).read_text())
    assert manifest["format_version"] == 1
    assert manifest["provider_variants"] == {"CUDAExecutionProvider": "fp16"}
    assert manifest["variants"]["fp16"] == FP16_FILES
    assert set(manifest["host_nodes"]) == set(FP16_FILES.values())
    for file, nodes in manifest["host_nodes"].items():
        proto = load(tiny_bundle / file)
        assert nodes == integer_nodes(proto)
        ops = {node.op_type for node in proto.graph.node if node.name in nodes}
        assert ops and not ops & {"MatMul", "MultiHeadAttention", "GroupQueryAttention", "Attention"}
    decoder = set(manifest["host_nodes"][FP16_FILES["decoder"]])  # the source mask, built from lengths
    assert {"cuda_cross_src_len", "cuda_cross_keep", "cuda_cross_key_padding_mask"} <= decoder
    fp16 = manifest["verification"]["fp16"]
    assert fp16["logprobs_max_diff"] <= FP16_ATOL["logprobs"] and fp16["greedy_sources"] > 0


def test_the_fp16_variant_decodes_close_to_pytorch(tiny_bundle, tiny_model):
    report = verify_fp16(tiny_bundle, tiny_model, [[5, 6, 7, 2], [8, 2], [9, 10, 2]], **FP16_FILES)
    for kind, atol in FP16_ATOL.items():
        assert 0 < report[f"{kind}_max_diff"] <= atol, kind  # compared (not 0), and within the tolerance
    assert report["greedy_sources"] == 3
    assert report["greedy_identical"] + report["greedy_near_ties"] == 3


def test_fp16_verification_fails_for_a_different_model(tiny_bundle, tiny_model):
    other = copy.deepcopy(tiny_model)
    with torch.no_grad():  # pad's log-prob moved by about 0.2, four times the fp16 tolerance (the
        other.generator.proj.bias[other.cfg.pad_id] += 0.2  # normalizer hardly: pad is never probable)
    with pytest.raises(ParityError, match="fp16 logprobs differs"):
        verify_fp16(tiny_bundle, other, [[5, 2]], **FP16_FILES)


@torch.inference_mode()
def test_a_greedy_divergence_is_judged_by_pytorchs_lead_at_the_step_where_it_parts(tiny_model):
    cfg = tiny_model.cfg
    source = [5, 6, 7, cfg.eos_id]
    ref = greedy_decode(tiny_model, torch.tensor([source]), 12)[0].tokens
    assert len(ref) >= 3
    src = torch.tensor([source])
    mask = padding_mask(src, cfg.pad_id)
    logp = tiny_model.decode(torch.tensor([[cfg.bos_id, *ref[:2]]]),
                             tiny_model.cross_kv(tiny_model.encode(src, mask)), mask)[0][0, -1]
    other = int(logp.argsort(descending=True)[1])  # the runner-up at step 2
    ours = [*ref[:2], other, *ref[3:]]
    margin = tie_margin(tiny_model, source, ours, ref)
    assert margin == pytest.approx(float(logp[ref[2]] - logp[other]), abs=1e-5) and margin >= 0
    stopped = tie_margin(tiny_model, source, ref[:2], ref)  # ours ended (eos) where PyTorch went on
    assert stopped == pytest.approx(float(logp[ref[2]] - logp[cfg.eos_id]), abs=1e-5)


@pytest.mark.skipif(not LIBRARY.exists(), reason=f"no CUDA provider library at {LIBRARY}")
def test_the_table_matches_the_kernels_the_installed_cuda_library_instantiates():
    classes = kernel_classes()
    for op, cls in CONTRIB_CLASSES.items():
        kernel = CUDA_KERNELS["com.microsoft", op]
        assert first_arguments(classes, "contrib", cls) == kernel.inputs[0], op
    assert CUDA_KERNELS[MHA].outputs[3] == first_arguments(classes, "contrib", "MultiHeadAttention", 1)
    assert CUDA_KERNELS[GQA].inputs[3] <= first_arguments(classes, "contrib", "GroupQueryAttention", 1)
    for op, cls in TEMPLATED.items():  # a class instantiated for every type the table lists for input 0
        assert CUDA_KERNELS["", op].inputs[0] <= first_arguments(classes, "core", cls), op
    assert CUDA_KERNELS["", "Where"].inputs[1] <= first_arguments(classes, "core", "Where")
    for op, cls in UNTEMPLATED.items():  # type-dispatching kernels: the class exists
        assert ("core", cls) in classes, op
