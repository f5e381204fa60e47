"""Derived model files: the fp16 variant and the ONNX Runtime offline-optimized graph."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnx.external_data_helper import load_external_data_for_model
from onnxruntime.transformers.float16 import convert_float_to_float16

from export.cuda_kernels import missing_cuda_kernels
from export.cuda_variant import cuda_cross_attention
from export.export import ExportError, pin_ir_version
from export.verify import cpu_session
from interface import names

# Offline optimization level. BASIC only applies provider-independent rewrites that keep standard
# ONNX ops (constant folding, redundant Cast/Reshape/Identity elimination, Transpose/MatMul
# folding), so the saved graph still runs on CPU, CUDA and TensorRT. EXTENDED adds com.microsoft
# fusions (FusedMatMul, SkipLayerNormalization) that ORT only applies to nodes assigned to the
# provider used while optimizing (CPU here), and ALL adds CPU-only NCHWc layouts (ORT itself warns
# such a file is tied to the machine). Nothing is lost: a serving session still runs its own
# EXTENDED/ALL fusions at load time, for the provider it actually uses.
OFFLINE_LEVEL = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
OFFLINE_LEVEL_NAME = "basic"
FLOAT32_OUTPUTS = (names.LOG_NORMALIZER,)  # float32 in the fp16 variant too (a few numbers per row)


def to_fp16(src: Path, dst: Path) -> None:
    """Write the CUDA provider's fp16 variant of src; ExportError if a node has no CUDA kernel."""
    # the decoder's shared-KV cross-attention as MultiHeadAttention plus standard ops for the
    # alignment weights (export/cuda_variant.py); then fp16 weights, activations and float I/O (the
    # K/V caches and log-probs are fp16 too, which halves cache traffic), but for the decoder's
    # log-normalizer: computed in fp16, cast to float32 on the way out (the interface's type)
    proto = cuda_cross_attention(onnx.load(src))
    float32 = [o.name for o in proto.graph.output if o.name in FLOAT32_OUTPUTS]
    proto = convert_float_to_float16(proto, keep_io_types=float32)
    for init in proto.graph.initializer:  # the converter stores fp16 as int32_data (~2x the bytes)
        if init.data_type == onnx.TensorProto.FLOAT16 and not init.raw_data:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init), init.name))
    # constants outside the fp16 range are clipped to +-65504, and so is the attention kernels'
    # mask_filter_value (float32's minimum is -inf in fp16: a fully masked row would be NaN)
    fp16_min = float(np.finfo(np.float16).min)
    for node in proto.graph.node:
        for attr in node.attribute:
            if attr.name == "mask_filter_value" and attr.f < fp16_min:
                attr.f = fp16_min
    missing = missing_cuda_kernels(proto)  # export/cuda_kernels.py: no bundle ships what CUDA cannot run
    if missing:
        listed = "; ".join(f"{m.node} ({m.op}): {m.reason}" for m in missing)
        raise ExportError(f"{dst.name}: {len(missing)} node(s) without a CUDA kernel: {listed}")
    pin_ir_version(proto)
    onnx.checker.check_model(proto, full_check=True)
    onnx.save_model(proto, dst, save_as_external_data=False)


def optimize_offline(path: Path) -> None:
    """Replace path by its ORT BASIC-level optimized graph (one file, weights inline, IR version pinned)."""
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        out = Path(tmp) / path.name
        so = ort.SessionOptions()
        so.graph_optimization_level = OFFLINE_LEVEL
        so.optimized_model_filepath = str(out)
        so.intra_op_num_threads = 1
        cpu_session(path, so)
        # ORT's saved graph still refers to path's external data (export/weights.py), if it had any,
        # by the location relative to path: read it from there, so that the result is inline
        proto = onnx.load(out, load_external_data=False)
        load_external_data_for_model(proto, str(path.parent))
    used = {node.domain for node in proto.graph.node}
    # ORT lists every domain it knows; keep only those the graph uses (and the default domain)
    keep = [op for op in proto.opset_import if op.domain in used or op.domain in ("", "ai.onnx")]
    del proto.opset_import[:]
    proto.opset_import.extend(keep)
    pin_ir_version(proto)
    onnx.checker.check_model(proto, full_check=True)
    onnx.save_model(proto, path, save_as_external_data=False)
