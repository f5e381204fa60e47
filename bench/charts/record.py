"""A benchmark's chart record: JSON with its source (command, machine, date), its charts drawn beside it."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

from interface.sessions import cpu_flags, has_vnni


def vector_extensions(flags: frozenset[str]) -> str:
    """The x86 extensions that choose ONNX Runtime's and CTranslate2's kernels: the widest of AVX-512 and
    AVX2, with or without VNNI (int8 products differ with and without it); empty for neither."""
    width = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
    return f"{width} {'with' if has_vnni(flags) else 'without'} VNNI" if width else ""


def machine() -> str:
    """This machine in words: CPU cores, model and vector extensions, memory, no GPU named unless asked."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    extensions = vector_extensions(cpu_flags() or frozenset())
    model += f", {extensions}" if extensions else ""
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text(encoding="utf-8").split()[1])
        memory = f", {kib / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{os.cpu_count()} CPU cores ({model}){memory}"


def source(command: str | None = None) -> dict[str, str]:
    """Where data comes from: the command (default: this process's), the machine and the date (UTC)."""
    if command is None:
        module = getattr(sys.modules["__main__"], "__spec__", None)
        head = ["python", "-m", module.name.removesuffix(".__main__")] if module else ["python", sys.argv[0]]
        command = shlex.join([*head, *sys.argv[1:]])
    now = datetime.datetime.now(datetime.UTC)
    return {"command": command, "machine": machine(), "date": now.strftime("%Y-%m-%d %H:%M UTC")}


def write(out: Path, name: str, kind: str, data: dict[str, Any], command: str | None = None) -> list[Path]:
    """Write `<out>/<name>.json` ({"kind", "source", **data}) and draw its charts beside it."""
    from bench.charts.draw import draw

    out.mkdir(parents=True, exist_ok=True)
    record = {"kind": kind, "source": source(command), **data}
    path = out / f"{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return [path, *draw(record, out / name)]
