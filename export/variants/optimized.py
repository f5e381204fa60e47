"""The ONNX Runtime offline-optimized form of a graph (`--optimize`): provider-independent rewrites only."""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort
from onnx.external_data_helper import load_external_data_for_model

from export.export import pin_ir_version
from export.graph_file import EXTERNAL_THRESHOLD, save_graph, sidecar
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
ORT_EXTERNAL_FILE = "session.optimized_model_external_initializers_file_name"  # beside the saved graph
ORT_EXTERNAL_MIN_BYTES = "session.optimized_model_external_initializers_min_size_in_bytes"


def optimize_offline(path: Path) -> None:
    """Replace path by its ORT BASIC-level optimized graph (one file below 2 GiB, weights inline; a larger
    graph with its sidecar: export/graph_file.py), IR version pinned."""
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        out = Path(tmp) / path.name
        so = ort.SessionOptions()
        so.graph_optimization_level = OFFLINE_LEVEL
        so.optimized_model_filepath = str(out)
        so.intra_op_num_threads = 1
        # ORT's writer hits protobuf's 2 GiB limit unless the tensors go to a file of their own: always so,
        # one path whatever the size; they are read back below, then written as save_graph decides
        so.add_session_config_entry(ORT_EXTERNAL_FILE, sidecar(out).name)
        so.add_session_config_entry(ORT_EXTERNAL_MIN_BYTES, str(EXTERNAL_THRESHOLD))
        cpu_session(path, so)
        proto = onnx.load(out, load_external_data=False)
        load_external_data_for_model(proto, tmp)
    used = {node.domain for node in proto.graph.node}
    # ORT lists every domain it knows; keep only those the graph uses (and the default domain)
    keep = [op for op in proto.opset_import if op.domain in used or op.domain in ("", "ai.onnx")]
    del proto.opset_import[:]
    proto.opset_import.extend(keep)
    pin_ir_version(proto)
    save_graph(proto, path)
