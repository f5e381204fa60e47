"""The installed onnxruntime's CUDA provider library: the kernel classes it instantiates, read from the
RTTI type names in the binary (no GPU, no CUDA libraries needed to read them)."""

from __future__ import annotations

import mmap
import re
from pathlib import Path

import onnxruntime

LIBRARY = Path(onnxruntime.__file__).parent / "capi" / "libonnxruntime_providers_cuda.so"
_BUILTIN = {"f": "float", "d": "double", "a": "int8", "h": "uint8", "s": "int16", "t": "uint16",
            "i": "int32", "j": "uint32", "l": "int64", "m": "uint64", "b": "bool"}
_NAMED = {"MLFloat16": "float16", "BFloat16": "bfloat16", "Float8E4M3FN": "float8e4m3fn",
          "Float8E5M2": "float8e5m2", "Float4E2M1x2": "float4e2m1"}
_CLASS = re.compile(rb"N11onnxruntime(7contrib)?4cuda(\d+)")


_ARG = re.compile(rb"NS_(\d+)|S\d*_|L[a-z]-?\d+E|([a-z])")


def _template_args(text: bytes) -> tuple[str, ...] | None:
    """Mangled template arguments ("NS_9MLFloat16EfEE") -> type names ("S3_" repeats the first), or None."""
    args: list[str] = []
    i = 0
    while text[i : i + 1] != b"E":
        m = _ARG.match(text, i)
        if m is None:
            return None
        i = m.end()
        if m.group(1):  # onnxruntime::<name>
            length = int(m.group(1))
            name = text[i : i + length].decode(errors="replace")
            args.append(_NAMED.get(name, name))
            i += length + 1  # past the closing "E"
        elif m.group(2):
            args.append(_BUILTIN.get(m.group(2).decode(), m.group(2).decode()))
        elif m.group(0).startswith(b"S"):
            args.append(args[0] if args else "?")
    return tuple(args)


def kernel_classes(library: Path = LIBRARY) -> dict[tuple[str, str], set[tuple[str, ...]]]:
    """("contrib" | "core", class name) -> the template arguments of its instantiations (() if none)."""
    found: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    with library.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for match in _CLASS.finditer(data):
            start, length = match.end(), int(match.group(2))
            name = data[start : start + length]
            if not re.fullmatch(rb"[A-Za-z_][A-Za-z0-9_]*", name):
                continue
            rest = data[start + length : start + length + 120].split(b"\0", 1)[0]
            args = _template_args(rest[1:]) if rest[:1] == b"I" else ()
            if args is None:
                continue
            namespace = "contrib" if match.group(1) else "core"
            found.setdefault((namespace, name.decode()), set()).add(args)
    return found


def first_arguments(classes: dict[tuple[str, str], set[tuple[str, ...]]], namespace: str, name: str,
                    position: int = 0) -> set[str]:
    """The types a kernel class template is instantiated with at one argument position."""
    return {args[position] for args in classes.get((namespace, name), ()) if len(args) > position}
