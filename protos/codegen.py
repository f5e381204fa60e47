"""Code generation of every .proto under protos/ (the CLI is `python -m protos.generate`).

Files are compiled with `-I <repo root>`, so `protos/translator/v1/translator.proto` becomes the
importable `protos.translator.v1.translator_pb2` (+ `_pb2_grpc`, `.pyi`), written next to its
source. Generation is skipped while every output is newer than every input; outputs are written to
a temporary directory first and moved into place file by file, so concurrent runs are harmless.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

import google.protobuf

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos"
# Generated modules of these directories register in protos.inference.POOL (see its docstring).
PRIVATE_POOL_DIRS = {"protos/inference": "protos.inference"}
_DEFAULT_POOL_CALL = "_descriptor_pool.Default().AddSerializedFile("
_GENCODE_VERSION = re.compile(r"^# Protobuf Python Version: (\d+)\.(\d+)\.(\d+)", re.MULTILINE)
_SERVICE = re.compile(r"^\s*service\s+\w+", re.MULTILINE)


def proto_files() -> list[Path]:
    """Every .proto file under protos/, sorted."""
    return sorted(PROTO_DIR.rglob("*.proto"))


def outputs(proto: Path) -> list[Path]:
    """Generated files of one .proto: _pb2.py, _pb2.pyi and, when it declares a service, _pb2_grpc.py."""
    stem = proto.with_suffix("")
    files = [stem.with_name(stem.name + "_pb2.py"), stem.with_name(stem.name + "_pb2.pyi")]
    if _SERVICE.search(proto.read_text(encoding="utf-8")):
        files.append(stem.with_name(stem.name + "_pb2_grpc.py"))
    return files


def is_stale() -> bool:
    """True when an output is missing or older than a .proto file or this generator."""
    inputs = [*proto_files(), Path(__file__).resolve()]
    produced = [out for proto in proto_files() for out in outputs(proto)]
    if not all(out.exists() for out in produced):
        return True
    newest_input = max(p.stat().st_mtime for p in inputs)
    return min(out.stat().st_mtime for out in produced) < newest_input


def _use_private_pool(source: str, package: str, name: str) -> str:
    """Make a generated _pb2 module add its file to `package`.POOL instead of the default pool."""
    if source.count(_DEFAULT_POOL_CALL) != 1:
        raise RuntimeError(f"{name}: expected one default-pool registration in the generated code")
    source = source.replace(_DEFAULT_POOL_CALL, "_PRIVATE_POOL.AddSerializedFile(")
    marker = "# @@protoc_insertion_point(imports)"
    if marker not in source:
        raise RuntimeError(f"{name}: import insertion point not found in the generated code")
    return source.replace(marker, f"{marker}\nfrom {package} import POOL as _PRIVATE_POOL", 1)


def _check_gencode(source: str, name: str) -> None:
    """Fail clearly when protoc emitted code the installed protobuf runtime cannot load."""
    match = _GENCODE_VERSION.search(source)
    if match is None:
        return
    gencode = tuple(int(x) for x in match.groups())
    runtime = tuple(int(x) for x in google.protobuf.__version__.split(".")[:3])
    if gencode[0] != runtime[0] or gencode > runtime:
        raise RuntimeError(
            f"{name}: grpcio-tools emitted protobuf {'.'.join(map(str, gencode))} code but the runtime is "
            f"protobuf {google.protobuf.__version__}; install a grpcio-tools whose bundled protoc matches"
        )


def _run_protoc(protos: Sequence[Path], out_dir: Path) -> None:
    """Compile `protos` into out_dir with the protoc bundled in grpcio-tools."""
    try:
        from grpc_tools import protoc
    except ImportError as exc:  # serving images ship pre-generated modules
        raise ImportError("grpcio-tools is needed to generate the proto modules (make protos)") from exc
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    args = [
        "grpc_tools.protoc", f"-I{ROOT}", f"-I{well_known}",
        f"--python_out={out_dir}", f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}",
        *(str(p) for p in protos),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed (see the messages above)")


def generate(force: bool = False) -> bool:
    """Regenerate every module when stale (or when forced); return whether anything was written."""
    if not force and not is_stale():
        return False
    protos = proto_files()
    with tempfile.TemporaryDirectory(dir=PROTO_DIR, prefix=".gen-") as tmp:
        _run_protoc(protos, Path(tmp))
        for proto in protos:
            rel_dir = proto.parent.relative_to(ROOT).as_posix()
            for out in outputs(proto):
                rel = out.relative_to(ROOT)
                staged = Path(tmp) / rel
                if out.name.endswith("_pb2.py"):
                    source = staged.read_text(encoding="utf-8")
                    _check_gencode(source, rel.as_posix())
                    if rel_dir in PRIVATE_POOL_DIRS:
                        source = _use_private_pool(source, PRIVATE_POOL_DIRS[rel_dir], rel.as_posix())
                    staged.write_text(source, encoding="utf-8")
                os.replace(staged, out)
    return True


def ensure_generated() -> None:
    """Generate the modules if missing or stale; cheap when up to date.

    Stale but complete outputs are kept as they are when grpcio-tools is not installed (a serving
    image ships pre-generated modules and no code generator).
    """
    if not is_stale():
        return
    complete = all(out.exists() for proto in proto_files() for out in outputs(proto))
    if complete and importlib.util.find_spec("grpc_tools") is None:
        return
    generate(force=True)
