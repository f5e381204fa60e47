"""Which nodes of a graph ONNX Runtime 1.31's CUDA provider has a kernel for, checked offline.

`CUDA_KERNELS` lists, for every (domain, op_type) our bundles use (encoder and decoder of the
plain, fused and inplace lowerings, fp32 and fp16, the decoder's log-normalizer (ReduceMax, Sub),
the fp16 variant's CUDA form of export/variants/cuda_form.py, the feed-forward activations of imported
checkpoints (export/hf/mapping.py), T5's RMSNorm, gelu_new and relative position bias (Pow, Sqrt,
Reciprocal, Tanh; CumSum and Clip of positions), and SkipLayerNormalization, which ONNX Runtime's
own fusions create), the
CUDA kernel registration that serves an opset-18 graph: the op versions it covers, the element
types it accepts per input (and, where the kernel constrains them, per output), attributes the
kernel rejects when run, and the source file of the registration in the onnxruntime repository.
`missing_cuda_kernels(proto)` returns the nodes that no registration accepts: an op not in the
table, an op version the registration does not cover, an input or output type it does not list
(value types from onnx shape inference; the int64/int32/bool shape-computation nodes count as
well), or a rejected attribute (GroupQueryAttention's `qk_output`). Our graphs have no subgraphs:
a node that holds one (Loop, If, Scan) is not in the table, so it is reported itself. `Constant`
nodes need no kernel: ONNX Runtime turns them into initializers when it builds a graph
(Graph::Graph in onnxruntime/core/graph/graph.cc; with 1.31.1 they are not among the placed nodes).

Sources, for ONNX Runtime 1.31: the registrations are in the files named per op below (the ai.onnx
kernels are listed in onnxruntime/core/providers/cuda/cuda_execution_provider.cc, the
com.microsoft ones in onnxruntime/contrib_ops/cuda/cuda_contrib_kernels.cc); the types were
taken from docs/OperatorKernels.md (generated from the kernel registry, section "Operators
implemented by CUDAExecutionProvider") and cross-checked against the kernel classes instantiated
in the installed libonnxruntime_providers_cuda.so 1.31.1 (RTTI type names such as
`GroupQueryAttention<MLFloat16, ...>`; tests/export/variants/test_cuda_kernels.py does this whenever the
library is installed). Nothing here needs a GPU; what only a GPU run shows (which attention
kernel ONNX Runtime picks, the speed) is in docs/export.md.

Regenerating the table when ONNX Runtime is upgraded: on a machine where the CUDA provider loads
(CUDA and cuDNN libraries installed), `onnxruntime.capi._pybind_state.get_all_opkernel_def()`
lists every registered kernel (op_name, domain, provider, version_range, type_constraints): keep
those of "CUDAExecutionProvider" for the ops below and copy the version range serving our opset
and the types per input; elsewhere (it crashes where the provider cannot load) read the new
release's docs/OperatorKernels.md. Then run tests/export/variants/test_cuda_kernels.py, which compares the
com.microsoft rows with the new library's kernel classes and checks the bundles against the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import onnx

OPSET = 18  # the ai.onnx opset of our graphs (export/lowering/attention.py)
CUDA = "onnxruntime/core/providers/cuda/"
CONTRIB = "onnxruntime/contrib_ops/cuda/bert/"
ALL = -1  # key of `Kernel.inputs`: every input (variadic ops)

FIXED = frozenset({"bfloat16", "bool", "double", "float", "float16", "int16", "int32", "int64", "int8",
                   "uint16", "uint32", "uint64", "uint8"})  # DataTypeImpl::AllFixedSizeTensorTypes()
NUMBERS = FIXED - {"bool"}  # Add, Sub, Mul, Div since opset 14
COMPARED = frozenset({"double", "float", "float16", "int32", "int64", "uint32", "uint64"})
FLOATS = frozenset({"double", "float", "float16"})
FLOATS_BF16 = FLOATS | {"bfloat16"}
HALF_FLOAT_BF16 = frozenset({"float", "float16", "bfloat16"})
CAST_TO = FIXED | {"float4e2m1", "float8e4m3fn", "float8e5m2"}
BOOL, INT32, INT64 = frozenset({"bool"}), frozenset({"int32"}), frozenset({"int64"})
INDICES = INT32 | INT64
INTEGERS = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
KV_CACHE = frozenset({"float16", "bfloat16", "float8e4m3fn", "int8"})  # GroupQueryAttention's T_CACHE


@dataclass(frozen=True)
class Kernel:
    """One CUDA kernel registration: op versions served, element types per input/output index."""

    source: str  # file of the registration in the onnxruntime repository
    versions: tuple[int, int | None]  # first and last op version (None: the newest); contrib ops (1, None)
    inputs: dict[int, frozenset[str]]  # input index (ALL: every input) -> accepted element types
    outputs: dict[int, frozenset[str]] = field(default_factory=dict)
    rejected: tuple[str, ...] = ()  # attributes the kernel refuses to run with, when not 0


def _binary(types: frozenset[str], since: int) -> Kernel:
    """An element-wise binary op of math/binary_elementwise_ops.cc."""
    return Kernel(CUDA + "math/binary_elementwise_ops.cc", (since, None), {0: types, 1: types})


CUDA_KERNELS: dict[tuple[str, str], Kernel] = {
    ("", "Add"): _binary(NUMBERS, 14),
    ("", "Sub"): _binary(NUMBERS, 14),
    ("", "Mul"): _binary(NUMBERS, 14),
    ("", "Div"): _binary(NUMBERS, 14),
    ("", "And"): Kernel(CUDA + "math/binary_elementwise_ops.cc", (7, None), {0: BOOL, 1: BOOL}),
    ("", "Or"): Kernel(CUDA + "math/binary_elementwise_ops.cc", (7, None), {0: BOOL, 1: BOOL}, {0: BOOL}),
    ("", "Equal"): Kernel(CUDA + "math/binary_elementwise_ops.cc", (13, None),
                          {0: COMPARED | BOOL, 1: COMPARED | BOOL}, {0: BOOL}),
    ("", "Less"): _binary(COMPARED, 13),
    ("", "LessOrEqual"): _binary(COMPARED, 16),
    ("", "Not"): Kernel(CUDA + "math/unary_elementwise_ops.cc", (1, None), {0: BOOL}),
    ("", "Relu"): Kernel(CUDA + "activation/activations.cc", (14, None), {0: FLOATS_BF16}),
    # the feed-forward activations of imported models: silu (Marian's swish) = x * Sigmoid(x), gelu with Erf
    ("", "Sigmoid"): Kernel(CUDA + "activation/activations.cc", (13, None), {0: FLOATS}),
    ("", "Erf"): Kernel(CUDA + "math/unary_elementwise_ops.cc", (13, None), {0: FLOATS}),
    # T5 (export/hf/t5.py): RMSNorm x * 1 / sqrt(mean(x^2) + eps), gelu_new's x^3 and tanh, the relative
    # position bias's key positions (the running sum of the mask) and offsets clamped to +-max_distance
    ("", "Pow"): Kernel(CUDA + "math/binary_elementwise_ops.cc", (15, None),
                        {0: FLOATS_BF16 | INT32 | INT64, 1: FLOATS_BF16 | INT32 | INT64}),
    ("", "Sqrt"): Kernel(CUDA + "math/unary_elementwise_ops.cc", (13, None), {0: FLOATS_BF16}),
    ("", "Reciprocal"): Kernel(CUDA + "math/unary_elementwise_ops.cc", (13, None), {0: FLOATS}),
    ("", "Tanh"): Kernel(CUDA + "activation/activations.cc", (13, None), {0: FLOATS_BF16}),
    ("", "CumSum"): Kernel(CUDA + "math/cumsum.cc", (14, None),
                           {0: FLOATS | INT32 | INT64 | {"uint32", "uint64"}, 1: INDICES}),
    ("", "Clip"): Kernel(CUDA + "math/clip.cc", (13, None),
                         {ALL: FLOATS | INT64 | {"int8", "uint64", "uint8"}}),
    ("", "MatMul"): Kernel(CUDA + "math/matmul.cc", (13, None), {0: FLOATS_BF16, 1: FLOATS_BF16}),
    # Gemm 13 (the tied output projection reading the embedding rows transposed, export/lowering/tied.py)
    ("", "Gemm"): Kernel(CUDA + "math/gemm.cc", (11, None), {0: FLOATS, 1: FLOATS}),
    ("", "Softmax"): Kernel(CUDA + "math/softmax.cc", (13, None), {0: FLOATS_BF16}),
    ("", "LogSoftmax"): Kernel(CUDA + "math/softmax.cc", (13, None), {0: FLOATS}),
    ("", "ReduceMean"): Kernel(CUDA + "reduction/reduction_ops.cc", (18, None),
                               {0: FLOATS | INT32, 1: INT64}),
    # ReduceMax 18 (the decoder's log-normalizer, max(logits) - max(logprobs), export/lowering/logits.py,
    # fp16 in the fp16 variant): the types OperatorKernels.md lists
    # (the 1.31.1 library also instantiates ReduceMax for int8 and uint8, which that page does not
    # list: left out until a registry dump confirms them)
    ("", "ReduceMax"): Kernel(CUDA + "reduction/reduction_ops.cc", (18, None),
                              {0: FLOATS | INT32 | INT64, 1: INT64}),
    ("", "LayerNormalization"): Kernel(CUDA + "nn/layer_norm.cc", (17, None),
                                       {0: FLOATS_BF16, 1: FLOATS_BF16, 2: FLOATS_BF16}),
    ("", "Cast"): Kernel(CUDA + "tensor/cast_op.cc", (13, 18), {0: FIXED}, {0: CAST_TO}),
    ("", "Concat"): Kernel(CUDA + "tensor/concat.cc", (13, None), {ALL: FIXED}),
    ("", "Expand"): Kernel(CUDA + "tensor/expand.cc", (13, None), {0: FIXED, 1: INT64}),
    ("", "Gather"): Kernel(CUDA + "tensor/gather.cc", (13, None), {0: FIXED, 1: INDICES}),
    ("", "GatherElements"): Kernel(CUDA + "tensor/gather_elements.cc", (13, None), {0: FIXED, 1: INDICES}),
    # Identity 16 (opset 18) is served by the 14..18 registration (19 on adds the float8 types)
    ("", "Identity"): Kernel(CUDA + "tensor/identity_op.cc", (14, 18), {0: FIXED}),
    ("", "Range"): Kernel(CUDA + "generator/range.cc", (11, None),
                          {ALL: frozenset({"double", "float", "int16", "int32", "int64"})}),
    ("", "Reshape"): Kernel(CUDA + "tensor/reshape.cc", (14, 18), {0: FIXED, 1: INT64}),
    ("", "Shape"): Kernel(CUDA + "tensor/shape_op.cc", (15, 18), {0: FIXED}, {0: INT64}),
    ("", "Slice"): Kernel(CUDA + "tensor/slice.cc", (13, None), {0: FIXED, 1: INDICES, 2: INDICES,
                                                                 3: INDICES, 4: INDICES}),
    ("", "Split"): Kernel(CUDA + "tensor/split.cc", (18, None), {0: FIXED, 1: INT64}),
    ("", "Squeeze"): Kernel(CUDA + "tensor/squeeze.cc", (13, 20), {0: FIXED, 1: INT64}),
    ("", "Transpose"): Kernel(CUDA + "tensor/transpose.cc", (13, 20), {0: FIXED}),
    ("", "Trilu"): Kernel(CUDA + "tensor/trilu.cc", (14, None), {0: FIXED, 1: INT64}),
    ("", "Unsqueeze"): Kernel(CUDA + "tensor/unsqueeze.cc", (13, 20), {0: FIXED, 1: INT64}),
    ("", "Where"): Kernel(CUDA + "tensor/where.cc", (16, None),
                          {0: BOOL, 1: FLOATS_BF16 | {"int32", "int64", "uint8"},
                           2: FLOATS_BF16 | {"int32", "int64", "uint8"}}),
    # com.microsoft: query / input (T) and int32 masks or lengths (M)
    # input 5 of Attention and MultiHeadAttention, 10 of GroupQueryAttention: attention_bias (T5's position
    # bias), of the query's type T
    ("com.microsoft", "Attention"): Kernel(CONTRIB + "attention.cc", (1, None),
                                           {0: HALF_FLOAT_BF16, 3: INT32, 5: HALF_FLOAT_BF16}),
    ("com.microsoft", "MultiHeadAttention"): Kernel(
        CONTRIB + "multihead_attention.cc", (1, None), {0: HALF_FLOAT_BF16, 4: INT32, 5: HALF_FLOAT_BF16},
        {3: HALF_FLOAT_BF16}),  # output 3 (qk) has its own type parameter QK
    ("com.microsoft", "GroupQueryAttention"): Kernel(
        CONTRIB + "group_query_attention.cc", (1, None),
        {0: frozenset({"float16", "bfloat16"}), 3: KV_CACHE, 4: KV_CACHE, 5: INT32, 6: INT32,
         10: frozenset({"float16", "bfloat16"})},
        rejected=("qk_output",)),  # "The current GQA CUDA implementation will never be able to have a QK
    # output" (group_query_attention.cc); attention_bias only without a quantized or windowed cache
    ("com.microsoft", "SkipLayerNormalization"): Kernel(CONTRIB + "skip_layer_norm.cc", (1, None),
                                                        {0: HALF_FLOAT_BF16}),
}


class Missing(NamedTuple):
    """A node without a CUDA kernel, and why."""

    node: str
    op: str  # "domain:op_type" ("" domain written as ai.onnx)
    reason: str


def type_name(elem_type: int) -> str:
    """onnx.TensorProto element type -> its name as in the table ("float16", "int64", ...)."""
    return onnx.TensorProto.DataType.Name(elem_type).lower()


def _own_types(graph: onnx.GraphProto) -> dict[str, str]:
    """Element type of the values a graph declares: inputs, outputs, value infos, initializers."""
    types = {v.name: type_name(v.type.tensor_type.elem_type)
             for v in [*graph.input, *graph.output, *graph.value_info] if v.type.tensor_type.elem_type}
    return types | {t.name: type_name(t.data_type) for t in graph.initializer}


def _label(node: onnx.NodeProto) -> str:
    """A node's name, or its first output's where it has none."""
    return node.name or (node.output[0] if node.output else node.op_type)


def _typed(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of proto after onnx shape inference; contrib outputs that inference leaves untyped (it
    knows no com.microsoft schema) take their input 0's type."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    while True:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        types, guessed = _own_types(model.graph), False
        for node in model.graph.node:
            if node.domain in ("", "ai.onnx") or not node.input or node.input[0] not in types:
                continue
            for name in node.output:
                if name and name not in types:
                    model.graph.value_info.append(onnx.helper.make_tensor_value_info(
                        name, onnx.TensorProto.DataType.Value(types[node.input[0]].upper()), None))
                    guessed = True
        if not guessed:
            return model


def _version(node: onnx.NodeProto, opsets: dict[str, int]) -> int:
    """The op version a node of an ai.onnx op resolves to (the schema's since_version); 1 for others."""
    if node.domain not in ("", "ai.onnx"):
        return 1
    return onnx.defs.get_schema(node.op_type, opsets.get("", OPSET), "").since_version


def _why_not(node: onnx.NodeProto, kernel: Kernel, version: int, types: dict[str, str]) -> str | None:
    """Why `kernel` cannot run `node`, or None if it can."""
    first, last = kernel.versions
    if version < first or (last is not None and version > last):
        return f"op version {version} outside the registration's {first}..{last or 'newest'}"
    checked = (("input", node.input, kernel.inputs), ("output", node.output, kernel.outputs))
    for kind, values, allowed in checked:
        for i, name in enumerate(values):
            ok = allowed.get(i, allowed.get(ALL))
            if not name or ok is None:
                continue
            got = types.get(name)
            if got is None:
                return f"{kind} {i} ({name}) has no inferred type"
            if got not in ok:
                return f"{kind} {i} ({name}) is {got}; CUDA registers {', '.join(sorted(ok))}"
    for attr in node.attribute:
        value = onnx.helper.get_attribute_value(attr)
        if attr.name in kernel.rejected and value:
            return f"attribute {attr.name}={value}: the CUDA kernel refuses it"
    return None


def missing_cuda_kernels(proto: onnx.ModelProto) -> list[Missing]:
    """The nodes of `proto` that ONNX Runtime 1.31's CUDA provider has no kernel for (see module doc)."""
    opsets = {o.domain if o.domain != "ai.onnx" else "": o.version for o in proto.opset_import}
    graph = _typed(proto).graph
    types, missing = _own_types(graph), []
    for node in graph.node:
        domain = node.domain if node.domain != "ai.onnx" else ""
        if (domain, node.op_type) == ("", "Constant"):  # an initializer once ONNX Runtime loads it
            continue
        op = f"{node.domain or 'ai.onnx'}:{node.op_type}"
        kernel = CUDA_KERNELS.get((domain, node.op_type))
        reason = "not in the CUDA kernel table" if kernel is None else \
            _why_not(node, kernel, _version(node, opsets), types)
        if reason is not None:
            missing.append(Missing(_label(node), op, reason))
    return missing


def integer_nodes(proto: onnx.ModelProto) -> list[str]:
    """Names of the nodes with only integer or bool inputs and outputs (CUDA may run them on the host)."""
    graph = _typed(proto).graph
    types = _own_types(graph)
    return [node.name for node in graph.node
            if all(types.get(x) in INTEGERS for x in [*node.input, *node.output] if x)]
