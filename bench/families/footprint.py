"""What each engine of bench/families/compare.py costs besides time: bytes on disk, memory added by loading,
and the memory-bandwidth floor of a batch-1 decoder step.

- Disk: a bundle variant's own files (its graphs and its weights file, as bundle.json's `weights` lists
  them) against CTranslate2's `model.bin` + `config.json` of the same precision; both engines'
  vocabularies (our `vocab.json` and SentencePiece files, CTranslate2's `shared_vocabulary.json`) are
  left out on both sides and reported apart.
- Memory: each engine built in a fresh process (`python -c`, its libraries imported first); what it
  adds to the process's resident memory (Rss of /proc/self/smaps_rollup, after minus before), of that
  the anonymous part (heap, arenas, prepacked weights: what no other process can share) and the
  proportional share (Pss: a page mapped twice counts once), once loaded, after a warm-up (one source,
  greedy: the model's memory, which the goals compare) and after a batch of `batch` sources (plus what
  decoding 32 rows at once keeps: caches, ONNX Runtime's arena).
- Floor: the bytes a batch-1 decoder step reads (every initializer of the variant's decoder graph but
  those only gathered: the embedding and position tables, of which a step reads one row) over the
  machine's read bandwidth, measured as ONNX Runtime's own fp32 MatMul of one row by a 512 MiB matrix
  on `threads` threads (the kernel a step's largest MatMuls run, its packed matrix in huge pages as the
  service's are: service/ops/hugepages.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common.workload import REPO_ROOT
from interface import names

CT2_MODEL_FILES = ("model.bin", "config.json")  # what CTranslate2 loads besides its vocabulary
BANDWIDTH_MIB = 512  # the matrix read to measure bandwidth: well past the last-level cache
_CHILD = """
import json, sys
import ctranslate2, onnxruntime, sentencepiece  # noqa: F401 - the libraries' own memory before "before"
from service.runtime.runner import Runner  # noqa: F401
from bench.families.engines import family_engine

from bench.memory.proc import smaps_rollup

def memory():
    return {f"{k}_mib": v for k, v in smaps_rollup().items()}

def added(before):
    now = memory()
    return {k: round(now[k] - before[k], 1) for k in now}

job = json.loads(sys.stdin.read())
before = memory()
decode = family_engine(*job["engine"])
out = {"load": added(before)}
decode(job["batch"][:1])
out["warm"] = added(before)
decode(job["batch"])
out["batch"] = added(before)
print(json.dumps(out))
"""


def variant_bytes(bundle: Path, variant: str | None) -> int:
    """Bytes of a bundle variant's own files: its graphs and their weights file (None: the base files)."""
    manifest = json.loads((bundle / names.BUNDLE_FILE).read_text(encoding="utf-8"))
    data = names.weights_file(variant)
    return sum(manifest["files"][f]["bytes"] for f in [data, *manifest["weights"][data]])


def shared_bytes(bundle: Path) -> int:
    """Bytes of the bundle's files no variant owns: bundle.json and the tokenizer's files."""
    manifest = json.loads((bundle / names.BUNDLE_FILE).read_text(encoding="utf-8"))
    owned = {f for data, graphs in manifest["weights"].items() for f in [data, *graphs]}
    return (bundle / names.BUNDLE_FILE).stat().st_size + sum(
        entry["bytes"] for f, entry in manifest["files"].items() if f not in owned)


def ct2_bytes(model_dir: Path) -> int:
    """Bytes of a CTranslate2 model directory without its vocabulary."""
    return sum((model_dir / f).stat().st_size for f in CT2_MODEL_FILES)


def load_memory(engine: tuple[Any, ...], batch: list[list[int]]) -> dict[str, dict[str, float]]:
    """MiB a fresh process adds by building `family_engine(*engine)` ("load"), then decoding the first
    source of `batch` alone ("warm"), then all of `batch` at once ("batch")."""
    job = json.dumps({"engine": [str(e) if isinstance(e, Path) else e for e in engine], "batch": batch})
    out = subprocess.run([sys.executable, "-c", _CHILD], input=job, capture_output=True, text=True,
                         cwd=REPO_ROOT, timeout=1200, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"measuring the memory of {engine[0]} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def step_bytes(bundle: Path, variant: str | None) -> int:
    """Bytes of the initializers a batch-1 step of the variant's decoder reads: all but those only
    gathered."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    manifest = json.loads((bundle / names.BUNDLE_FILE).read_text(encoding="utf-8"))
    decoder = manifest["variants"][variant]["decoder"] if variant else names.DECODER_FILE
    graph = onnx.load(bundle / decoder, load_external_data=False).graph
    readers: dict[str, set[str]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            readers.setdefault(name, set()).add("gather" if node.op_type == "Gather" and i == 0 else "read")
    total = 0
    for t in graph.initializer:
        if "read" not in readers.get(t.name, set()):
            continue
        if uses_external_data(t):
            total += int(next(e.value for e in t.external_data if e.key == "length"))
        else:
            total += len(t.raw_data) or onnx.numpy_helper.to_array(t).nbytes
    return total


def read_bandwidth(threads: int, mib: int = BANDWIDTH_MIB) -> float:
    """GB/s ONNX Runtime's fp32 MatMul reads at one row by a `mib` MiB matrix, in a fresh process (whose
    own thread pool ONNX Runtime lets it size; `measure_bandwidth`)."""
    code = ("from bench.families.footprint import measure_bandwidth; "
            f"print(measure_bandwidth({threads}, {mib}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                         timeout=600, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def measure_bandwidth(threads: int, mib: int = BANDWIDTH_MIB, repeats: int = 10) -> float:
    """GB/s ONNX Runtime's fp32 MatMul reads at one row by a `mib` MiB matrix (median of `repeats`), in
    this process."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from service.ops.hugepages import huge_pages_for

    k = 1024
    n = mib * 2**20 // (4 * k)
    weight = np.ones((k, n), np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "read",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
                              [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    serialized = model.SerializeToString()
    with huge_pages_for():  # the packed matrix in huge pages, as the service's (service/ops/hugepages.py)
        session = ort.InferenceSession(serialized, options, providers=["CPUExecutionProvider"])
    x = np.ones((1, k), np.float32)
    for _ in range(3):
        session.run(None, {"x": x})
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(None, {"x": x})
        seconds.append(time.perf_counter() - start)
    return weight.nbytes / float(np.median(seconds)) / 1e9
