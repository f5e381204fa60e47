"""A graph file of the export's staging directory, whatever the size of its weights.

Protobuf cannot parse back a message of 2 GiB or more (onnx writes one, then cannot load it), and the
graphs of large checkpoints pass that before packing: mBART-50's fp32 decoder holds its 250,054 x 1,024
embedding twice until the tied matrix is shared (2.8 GB). Such a graph is written with its tensors in
ONNX external data beside it, `<file>.data`; a smaller one stays a single file. `onnx.load` and ONNX
Runtime read either by path, and packing (export/weights.py) moves the weights into the bundle's data
file and removes the sidecar, so a bundle never holds one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import onnx
from onnx import AttributeProto, TensorProto
from onnx.external_data_helper import load_external_data_for_model

PROTOBUF_LIMIT = 2**31  # bytes: the largest message protobuf parses is one byte less
SIDECAR_SUFFIX = ".data"  # `<graph file>.data`: a large graph's tensors
EXTERNAL_THRESHOLD = 1024  # bytes: a large graph's smaller tensors stay inline (onnx's default)


def sidecar(path: Path) -> Path:
    """Where a large graph written to `path` keeps its tensors."""
    return path.with_name(path.name + SIDECAR_SUFFIX)


def initializers(graph: onnx.GraphProto, path: str = "") -> Iterator[tuple[str, TensorProto]]:
    """(graph path, tensor) of every initializer of graph and of its subgraphs, depth first."""
    for tensor in graph.initializer:
        yield path, tensor
    for node in graph.node:
        for attr in node.attribute:
            subgraphs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
            for i, sub in enumerate(subgraphs):
                yield from initializers(sub, f"{path}/{node.name or node.op_type}.{attr.name}[{i}]")


def save_graph(proto: onnx.ModelProto, path: Path, check: bool = True) -> None:
    """Write proto to path (one file below PROTOBUF_LIMIT bytes, else with its tensors in `sidecar(path)`),
    then, if `check`, run onnx's full check on the file written. proto is left as it was, data in memory."""
    path = Path(path)
    side = sidecar(path)
    side.unlink(missing_ok=True)  # onnx appends to an existing data file
    if not is_large(proto):
        onnx.save_model(proto, path, save_as_external_data=False)
    else:
        onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=side.name, size_threshold=EXTERNAL_THRESHOLD, convert_attribute=False)
        load_external_data_for_model(proto, str(path.parent))  # the save moved the data out of proto
        for _, tensor in initializers(proto.graph):  # and marked where it went: unmarked as before
            if tensor.data_location == TensorProto.DEFAULT:
                tensor.ClearField("data_location")
    if check:
        onnx.checker.check_model(str(path), full_check=True)


def is_large(proto: onnx.ModelProto) -> bool:
    """Whether proto is too large for one file (`save_graph` gives it a sidecar)."""
    return proto.ByteSize() >= PROTOBUF_LIMIT
