"""The fp16 variant: the CUDA provider's graphs, in fp16, every node checked against its CUDA kernels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnxruntime.transformers.float16 import convert_float_to_float16

from export.export import ExportError, pin_ir_version
from export.graph_file import save_graph
from export.variants.cuda_form import cuda_cross_attention
from export.variants.cuda_kernels import missing_cuda_kernels
from interface import names

FLOAT32_OUTPUTS = (names.LOG_NORMALIZER,)  # float32 in the fp16 variant too (a few numbers per row)


def to_fp16(src: Path, dst: Path) -> None:
    """Write the CUDA provider's fp16 variant of src; ExportError if a node has no CUDA kernel."""
    # the decoder's shared-KV cross-attention as MultiHeadAttention plus standard ops for the
    # alignment weights (export/variants/cuda_form.py); then fp16 weights, activations and float I/O (the
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
    missing = missing_cuda_kernels(proto)  # variants/cuda_kernels.py: no bundle ships what CUDA cannot run
    if missing:
        listed = "; ".join(f"{m.node} ({m.op}): {m.reason}" for m in missing)
        raise ExportError(f"{dst.name}: {len(missing)} node(s) without a CUDA kernel: {listed}")
    pin_ir_version(proto)
    save_graph(proto, dst)
