"""The int8 variant: the CPU provider's graphs with int8 weights, made by ONNX Runtime's dynamic quantization.

`write_int8` derives `encoder.int8.onnx` and `decoder.int8.onnx` from the verified fp32 graphs:

- every MatMul with a constant weight, the output projection included, through
  `onnxruntime.quantization.quantize_dynamic`: int8 weights (`WEIGHT_TYPE`), activations quantized
  at run time (DynamicQuantizeLinear + MatMulInteger, which ONNX Runtime fuses into
  `com.microsoft.DynamicQuantizeMatMul` with its bias when it loads the graph);
- the encoder's `com.microsoft.Attention` (its packed Q/K/V projection) as `com.microsoft.QAttention`, but
  where it adds a position bias (T5's `attention_bias`, input 5), which QAttention has no input for: there
  its projection becomes a MatMul before a MultiHeadAttention (export/variants/int8_attention.py), quantized
  as the others;
- the token embeddings as int8 rows read by a Gather (export/variants/int8_embedding.py): where an embedding
  is the output projection's matrix (tied, as in our models and OPUS-MT), it reads the rows R_q = Q^T
  of the projection's int8 matrix Q, and the projection's MatMulInteger reads Transpose(R_q), which
  ONNX Runtime folds into Q at load (export/variants/int8_projection.py), so the bundle stores that matrix
  once, in int8, as rows.

Per-tensor or per-channel scales, reduce_range and the op form were chosen by measurement
(docs/export.md, "The int8 variant"); the constants below say why in a line each.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from export.export import ExportError, pin_ir_version
from export.graph_file import is_large, save_graph
from export.lowering.tied import SHARE_TIED_EMBEDDING, output_projection, untie_embeddings
from export.variants.int8_attention import unpack_biased_attention
from export.variants.int8_embedding import Projection, quantize_embeddings
from interface.sessions import cpu_flags, has_vnni

INT8_VARIANT = "int8"
INT8_FILES = {"encoder": "encoder.int8.onnx", "decoder": "decoder.int8.onnx"}
# one scale per output column (per embedding row): closer to fp32 than one per tensor (opus-mt shape:
# mean |delta log-prob| 0.0052 vs 0.0084) for 0-12% of the speed (docs/export.md); CTranslate2 scales rows too
PER_CHANNEL = True
# 7-bit weights: without VNNI, ONNX Runtime's U8S8 kernels saturate int16 pair sums, which 7-bit weights
# avoid; with VNNI they only add rounding error (opus-mt shape, emulated per MatMul: 1.2% relative error
# with VNNI, 2.5% without VNNI, 1.8% with reduce_range anywhere). Off by default (--int8-reduce-range)
REDUCE_RANGE = False
# signed weights, unsigned activations (U8S8): the combination ONNX Runtime's x86 kernels run fastest
WEIGHT_TYPE = "QInt8"
OP_TYPES = ("MatMul", "Attention")  # Attention -> QAttention (the fused encoder's Q/K/V projection)
SUFFIX, SCALE, ZERO_POINT = "_quantized", "_scale", "_zero_point"  # the quantizer's names for a weight W


def quantize_graph(proto: onnx.ModelProto, per_channel: bool = PER_CHANNEL,
                   reduce_range: bool = REDUCE_RANGE) -> onnx.ModelProto:
    """proto with its MatMul / Attention weights in int8, by onnxruntime.quantization.quantize_dynamic
    (proto's position-biased Attention nodes are first rewritten in place: int8_attention.py)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        unpack_biased_attention(proto)  # QAttention takes no attention_bias: its projection as a MatMul
        save_graph(proto, src, check=False)
        quantize_dynamic(src, dst, op_types_to_quantize=list(OP_TYPES), per_channel=per_channel,
                         reduce_range=reduce_range, weight_type=QuantType[WEIGHT_TYPE],
                         use_external_data_format=is_large(proto),
                         extra_options={"MatMulConstBOnly": True, "WeightSymmetric": True})
        return onnx.load(dst)


def projection_of(fp32_decoder: onnx.ModelProto, int8_decoder: onnx.ModelProto, d_model: int
                  ) -> Projection | None:
    """The output projection's fp32 weight and its int8 form (tensor, scales) in the quantized decoder."""
    weight = output_projection(fp32_decoder, d_model, fp32_decoder.graph.output[0].name)
    if weight is None:
        return None
    fp32 = {t.name: t for t in fp32_decoder.graph.initializer}
    int8 = {t.name: t for t in int8_decoder.graph.initializer}
    parts = [int8.get(weight + s) for s in (SUFFIX, SCALE, ZERO_POINT)]
    if any(p is None for p in parts):
        raise ExportError(f"the quantized decoder has no {weight}{SUFFIX}/{SCALE}/{ZERO_POINT}: "
                          "onnxruntime's quantizer names its tensors otherwise")
    if np.any(numpy_helper.to_array(parts[2])):
        raise ExportError(f"{weight}: int8 weights with a zero point (WeightSymmetric is off)")
    return Projection(numpy_helper.to_array(fp32[weight]), parts[0], numpy_helper.to_array(parts[1]))


def own_projection(per_channel: bool, reduce_range: bool) -> Callable[[np.ndarray, str], Projection]:
    """A function quantizing a (d_model, vocabulary) matrix as the quantizer does a MatMul weight (for an
    embedding that is not the output projection's matrix)."""
    def own(weight: np.ndarray, name: str) -> Projection:
        """weight's int8 form, named after `name`."""
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, weight.shape[0]])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, weight.shape[1]])
        graph = helper.make_graph([helper.make_node("MatMul", ["x", name], ["y"])], "own", [x], [y],
                                  [numpy_helper.from_array(weight, name)])
        fp32 = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        found = projection_of(fp32, quantize_graph(fp32, per_channel, reduce_range), weight.shape[0])
        assert found is not None
        return found
    return own


def _save(proto: onnx.ModelProto, path: Path) -> None:
    """Pin the IR version, check and write (weights inline; packing moves them later)."""
    pin_ir_version(proto)
    save_graph(proto, path)


def quantization(reduce_range: bool = REDUCE_RANGE, per_channel: bool = PER_CHANNEL,
                 shared: bool = SHARE_TIED_EMBEDDING) -> dict[str, object]:
    """How the int8 variant is quantized (bundle.json verification.int8.quantization)."""
    return {"weights": f"int8, symmetric, per {'channel' if per_channel else 'tensor'}",
            "activations": "uint8, per tensor, at run time (DynamicQuantizeLinear)",
            "ops": "MatMulInteger (DynamicQuantizeMatMul once loaded), QAttention, int8 embedding rows"
                   + (", the projection's from Transpose(rows)" if shared else ""),
            "tied_embedding": "int8 rows, read by the output projection too" if shared
                              else "int8 rows of its own",
            "reduce_range": reduce_range, "verified_on_vnni": has_vnni(cpu_flags())}


def write_int8(bundle_dir: Path, fp32_files: Mapping[str, str], d_model: int,
               files: Mapping[str, str] = INT8_FILES, per_channel: bool = PER_CHANNEL,
               reduce_range: bool = REDUCE_RANGE, share_embedding: bool = SHARE_TIED_EMBEDDING
               ) -> dict[str, int]:
    """Write the int8 variant's graphs beside the fp32 ones; how many embeddings read the projection's
    int8 rows and how many have int8 rows of their own."""
    fp32_decoder = onnx.load(bundle_dir / fp32_files["decoder"])
    untie_embeddings(fp32_decoder)  # tied lookups (export/lowering/tied.py) as tables again: quantized below
    decoder = quantize_graph(fp32_decoder, per_channel, reduce_range)
    projection = projection_of(fp32_decoder, decoder, d_model)
    del fp32_decoder
    own = own_projection(per_channel, reduce_range)
    counts = quantize_embeddings(decoder, projection, own, share_embedding)
    _save(decoder, bundle_dir / files["decoder"])
    del decoder
    fp32_encoder = onnx.load(bundle_dir / fp32_files["encoder"])
    untie_embeddings(fp32_encoder)
    encoder = quantize_graph(fp32_encoder, per_channel, reduce_range)
    del fp32_encoder
    more = quantize_embeddings(encoder, projection, own, share_embedding)
    _save(encoder, bundle_dir / files["encoder"])
    return {k: counts[k] + more[k] for k in counts}
