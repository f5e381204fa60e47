"""The ONNX Runtime offline-optimized form of a graph (`--optimize`): provider-independent rewrites only."""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort
from onnx.external_data_helper import load_external_data_for_model

from export.export import pin_ir_version
from export.graph_file import save_graph
from export.verify.base import cpu_session

# Offline optimization level. BASIC only applies provider-independent rewrites that keep standard
# ONNX ops (constant folding, redundant Cast/Reshape/Identity elimination, Transpose/MatMul
# folding), so the saved graph still runs on CPU, CUDA and TensorRT. EXTENDED adds com.microsoft
# fusions (FusedMatMul, SkipLayerNormalization) that ORT only applies to nodes assigned to the
# provider used while optimizing (CPU here), and ALL adds CPU-only NCHWc layouts (ORT itself warns
# such a file is tied to the machine). Nothing is lost: a serving session still runs its own
# EXTENDED/ALL fusions at load time, for the provider it actually uses.
OFFLINE_LEVEL = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
OFFLINE_LEVEL_NAME = "basic"


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
    save_graph(proto, path)
