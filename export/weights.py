"""Packing the initializers of a variant's graphs into one shared ONNX external-data file.

A group is the graphs one session set reads: the base files (encoder, decoder) or one variant's.
Every initializer of at least `THRESHOLD` bytes, in every graph of the group and in its subgraphs
(Loop / If bodies, should a graph have them), is written once per distinct content (element type,
dims, bytes) into the group's data file (interface/names.py `weights_file`) at an `ALIGN`-byte
aligned offset, and each graph refers to it as ONNX external data (location, offset, length);
smaller tensors stay inline. The tied embedding of the encoder and the decoder is thus stored once.
ONNX Runtime resolves the data file relative to the model file it opens by path
(service/runtime/model/sessions.py).

`verify_packed` reloads every packed graph with its external data, compares each initializer with
the graph before packing (graph, name, type, dims, sha256 of the bytes) and opens each file in an
ONNX Runtime CPU session; the export refuses a bundle that fails it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
from onnx import TensorProto, numpy_helper
from onnx.external_data_helper import load_external_data_for_model, set_external_data, uses_external_data

from export.export import ExportError
from export.graph_file import initializers, sidecar
from export.verify.base import open_session
from interface import names

THRESHOLD = 1024  # bytes: smaller tensors stay inline (onnx's own default size_threshold)
ALIGN = 64  # every stored tensor starts at a multiple of this offset in the data file
# Initializer fields as errors name them
FIELDS = {"graph": "graph", "name": "name", "data_type": "type", "dims": "dims", "sha256": "bytes"}
# where a TensorProto may hold its content inline
DATA_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data")


class WeightsError(ExportError):
    """A packed graph does not read back the initializers it had before packing."""


@dataclass(frozen=True)
class Initializer:
    """What packing must preserve of one initializer: where it is, its name, type, dims and bytes."""

    graph: str  # "" for the main graph, else the path of the subgraph (node name / attribute)
    name: str
    data_type: int
    dims: tuple[int, ...]
    sha256: str  # of its content as little-endian raw bytes


@dataclass
class PackReport:
    """One group's data file, its graphs as they were before packing, and what was stored."""

    data_file: str
    before: dict[str, list[Initializer]] = field(default_factory=dict)  # graph file -> its initializers
    references: int = 0  # initializers of the group's graphs that now point into the data file
    stored: int = 0  # distinct tensors written
    bytes: int = 0  # size of the data file, alignment padding included

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (bundle.json `verification.weights`)."""
        return {"files": list(self.before), "references": self.references, "stored": self.stored,
                "bytes": self.bytes}


def raw_bytes(tensor: TensorProto) -> bytes:
    """The tensor's content as little-endian raw bytes, whichever field holds it (an fp16 tensor the
    converter left in int32_data included)."""
    if tensor.HasField("raw_data"):
        return tensor.raw_data
    return numpy_helper.from_array(numpy_helper.to_array(tensor)).raw_data


def describe(model: onnx.ModelProto) -> list[Initializer]:
    """Every initializer of a model (with its data loaded), in `initializers` order."""
    return [Initializer(path, t.name, t.data_type, tuple(t.dims), hashlib.sha256(raw_bytes(t)).hexdigest())
            for path, t in initializers(model.graph)]


def _point_to(tensor: TensorProto, data_file: str, offset: int, length: int) -> None:
    """Make tensor ONNX external data at data_file[offset : offset + length], its inline data removed."""
    for name in DATA_FIELDS:
        tensor.ClearField(name)
    tensor.raw_data = b""  # set_external_data wants the field present; it is cleared again below
    set_external_data(tensor, data_file, offset, length)
    tensor.ClearField("raw_data")


def pack(bundle_dir: Path, files: list[str], data_file: str, threshold: int = THRESHOLD) -> PackReport:
    """Move the initializers (>= threshold bytes) of bundle_dir's `files` into bundle_dir/data_file,
    each distinct tensor once, and rewrite the files to read them from there."""
    bundle_dir, report = Path(bundle_dir), PackReport(data_file)
    target = bundle_dir / data_file
    if target.exists():
        raise WeightsError(f"{data_file} already exists in {bundle_dir}")
    stored: dict[tuple[int, tuple[int, ...], str], tuple[int, int]] = {}  # content -> (offset, length)
    with open(target, "wb") as out:
        for file in files:  # one graph in memory at a time
            model = onnx.load(bundle_dir / file)  # any external data of its own is read in
            report.before[file] = describe(model)
            for _, tensor in initializers(model.graph):
                data = raw_bytes(tensor)
                if len(data) < threshold:
                    continue
                key = (tensor.data_type, tuple(tensor.dims), hashlib.sha256(data).hexdigest())
                if key not in stored:
                    out.write(b"\0" * (-out.tell() % ALIGN))
                    stored[key] = (out.tell(), len(data))
                    out.write(data)
                _point_to(tensor, data_file, *stored[key])
                report.references += 1
            onnx.save_model(model, bundle_dir / file)  # no raw data left to write: the graph alone
            sidecar(bundle_dir / file).unlink(missing_ok=True)  # a large graph's own data, now read in
        report.bytes = out.tell()
    report.stored = len(stored)
    return report


def _read_packed(bundle_dir: Path, file: str, data_file: str) -> onnx.ModelProto:
    """A packed graph with its external data loaded; WeightsError naming the file and tensor if a
    reference leaves data_file or cannot be read."""
    model = onnx.load(bundle_dir / file, load_external_data=False)
    for _, tensor in initializers(model.graph):
        if not uses_external_data(tensor):
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), None)
        if location != data_file:
            raise WeightsError(f"{file}: initializer {tensor.name} is stored in {location}, not {data_file}")
    try:
        load_external_data_for_model(model, str(bundle_dir))
    except (OSError, ValueError) as e:
        raise WeightsError(f"{file}: cannot read its weights from {data_file}: {e}") from e
    return model


def verify_packed(bundle_dir: Path, report: PackReport) -> None:
    """Check every graph of a packed group: its initializers, read back through the data file, equal
    those it had before packing (graph, name, type, dims, bytes), and ONNX Runtime (CPU) opens it by
    path. WeightsError names the file and the first tensor that differs."""
    bundle_dir = Path(bundle_dir)
    for file, want in report.before.items():
        got = describe(_read_packed(bundle_dir, file, report.data_file))
        for a, b in zip(want, got, strict=False):
            if a != b:
                what = [label for key, label in FIELDS.items() if getattr(a, key) != getattr(b, key)]
                raise WeightsError(f"{file}: initializer {a.name} reads back from {report.data_file} with "
                                   f"other {', '.join(what)} than before packing")
        if len(want) != len(got):
            raise WeightsError(f"{file}: {len(got)} initializers after packing, {len(want)} before")
        try:
            open_session(bundle_dir / file)
        except Exception as e:  # noqa: BLE001 - ORT raises its own exception types
            raise WeightsError(f"{file}: ONNX Runtime cannot open it with {report.data_file}: {e}") from e


def weight_groups(variants: Mapping[str, Mapping[str, str]]) -> dict[str, list[str]]:
    """data file -> the graph files that share it: the base files, then each variant's (its encoder and
    decoder)."""
    groups = {None: {"encoder": names.ENCODER_FILE, "decoder": names.DECODER_FILE}, **variants}
    return {names.weights_file(variant): [parts["encoder"], parts["decoder"]]
            for variant, parts in groups.items()}


def pack_bundle(bundle_dir: Path, variants: Mapping[str, Mapping[str, str]],
                threshold: int = THRESHOLD) -> dict[str, PackReport]:
    """Pack and verify every weight group of a bundle directory; data file -> its report."""
    reports = {}
    for data_file, files in weight_groups(variants).items():
        reports[data_file] = pack(bundle_dir, files, data_file, threshold)
        verify_packed(bundle_dir, reports[data_file])
    return reports
