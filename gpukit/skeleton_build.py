"""Make the opus-mt-shaped model's skeleton (gpukit/skeleton.py) on a machine with torch, for the GPU kit.

1. The random-weight Marian checkpoint of opus-mt-en-de's shape (bench/families/marian.py), imported with
   `python -m export.pretrained --fp16` (the fp32 files and the CUDA provider's fp16 variant) and converted by
   CTranslate2's `ct2-transformers-converter --quantization float32` (CTranslate2 converts to float16 when
   it loads); cached under `work`.
2. The holes: every region of the bundle's fp32 weights file holding a 2-D float32 initializer that a
   MatMul, Gemm or Attention reads as its weight (the weight matrices; the position table, biases and
   norms are carried as they are) is "random" with the region's own mean and std; the fp16 variant's
   initializer of the same name is its "fp16" cast (checked: the exported fp16 bytes are the fp32 ones
   cast); each 2-D variable of CTranslate2's model.bin whose rows are rows of those matrices (found by
   matching, transposed and scaled as needed, checked value by value) is made of
   "pieces" of them. Everything else is carried.
3. The files are materialized once here from the drawn weights; their sha256 (and the bundle.json that
   lists the new weights files' sha256) go into skeleton.json.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from gpukit.skeleton import CARRIED, SKELETON, Arrays, file_sha256, fp16_cast, materialize

REPO_ROOT = Path(__file__).resolve().parent.parent
MATCH_COS = 0.9999  # a CTranslate2 row is a (scaled) row of a weight matrix at this cosine or more
WEIGHT_READERS = ("MatMul", "Gemm", "Attention")  # ops whose input 1 is a weight (Attention's: fused QKV)
TEXTS = "texts.json"
N_TEXTS = 1024


def convert(hf_dir: Path, work: Path, log=print) -> tuple[Path, Path]:
    """Our bundle (fp32 + fp16) and CTranslate2's float32 model of hf_dir, made unless already there."""
    bundle, ct2 = work / "bundle", work / "ct2"
    converter = str(Path(sys.executable).parent / "ct2-transformers-converter")
    jobs = {bundle: [sys.executable, "-m", "export.pretrained", "--model", str(hf_dir), "--out", str(bundle),
                     "--fp16", "--force"],
            ct2: [converter, "--model", str(hf_dir), "--output_dir", str(ct2), "--quantization", "float32",
                  "--force"]}
    for out, command in jobs.items():
        if (out / ("bundle.json" if out == bundle else "model.bin")).is_file():
            continue
        log(f"skeleton: {' '.join(command[1:4])} ...")
        run = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"{command[0]} failed ({run.returncode}):\n{run.stderr[-3000:]}")
    return bundle, ct2


def onnx_regions(bundle: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """(weights file, offset) -> name, dtype, shape, length, whether it is a weight (WEIGHT_READERS) and
    its uses (graph without its variant suffix, initializer name), over every graph of the bundle."""
    import onnx
    from onnx import helper

    manifest = json.loads((bundle / "bundle.json").read_text(encoding="utf-8"))
    regions: dict[tuple[str, int], dict[str, Any]] = {}
    for data, graphs in manifest["weights"].items():
        for graph_file in graphs:
            graph = onnx.load(bundle / graph_file, load_external_data=False).graph
            matmul = {node.input[1] for node in graph.node if node.op_type in WEIGHT_READERS}
            for t in graph.initializer:
                ext = {e.key: e.value for e in t.external_data}
                if not ext:
                    continue
                if ext["location"] != data:
                    raise RuntimeError(f"{graph_file}: {t.name} in {ext['location']}, expected {data}")
                key = (data, int(ext.get("offset", 0)))
                region = regions.setdefault(key, {
                    "name": t.name, "dtype": np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).name,
                    "shape": list(t.dims), "length": int(ext["length"]), "matmul": False, "uses": []})
                region["matmul"] |= t.name in matmul
                region["uses"].append((graph_file.split(".")[0], t.name))
    return regions


def read_region(bundle: Path, data: str, offset: int, region: dict[str, Any]) -> np.ndarray:
    """The array a region of a weights file holds."""
    with (bundle / data).open("rb") as f:
        f.seek(offset)
        raw = f.read(region["length"])
    return np.frombuffer(raw, dtype=region["dtype"]).reshape(region["shape"])


def ct2_variables(model_bin: Path) -> list[dict[str, Any]]:
    """CTranslate2's model.bin variables: name, shape, type id, data offset and bytes (its own format:
    ctranslate2/specs/model_spec.py `_serialize`)."""
    raw = model_bin.read_bytes()
    position = 0

    def take(fmt: str) -> int:
        nonlocal position
        value = np.frombuffer(raw, dtype=np.dtype(fmt).newbyteorder("<"), count=1, offset=position)[0]
        position += np.dtype(fmt).itemsize
        return int(value)

    def string() -> str:
        nonlocal position
        n = take("u2")
        text = raw[position:position + n - 1].decode("utf-8")
        position += n
        return text

    take("u4")
    string()
    take("u4")
    out = []
    for _ in range(take("u4")):
        name = string()
        shape = [take("u4") for _ in range(take("u1"))]
        type_id, nbytes = take("u1"), take("u4")
        out.append({"name": name, "shape": shape, "type": type_id, "offset": position, "bytes": nbytes})
        position += nbytes
    return out


def _run(v: np.ndarray, p: int, m: np.ndarray, j: int, scale: float) -> int:
    """How many rows of v from p on equal scale * the rows of m from j on."""
    k = min(len(v) - p, len(m) - j)
    tol = 1e-6 * float(np.abs(v).max() or 1.0)
    close = np.isclose(v[p:p + k], np.float32(scale) * m[j:j + k], rtol=1e-5, atol=tol).all(axis=1)
    return int(k if close.all() else np.argmin(close))


def match_rows(v: np.ndarray, candidates: dict[int, np.ndarray]) -> list[list[Any]] | None:
    """v as pieces [key, transpose, start, stop, scale] of the candidates' rows (or their transposes'), or
    None when its first row is none of theirs. A row matched after the first but not all: RuntimeError."""
    pieces, p = [], 0
    while p < len(v):
        row = v[p].astype(np.float64)
        best = None
        for key, array in candidates.items():
            for transpose, m in ((False, array), (True, array.T)):
                if m.shape[1] != v.shape[1] or not row.any():
                    continue
                dots = m.astype(np.float64) @ row
                norms = np.linalg.norm(m, axis=1) * np.linalg.norm(row)
                cos = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
                j = int(np.argmax(cos))
                if cos[j] < MATCH_COS:
                    continue
                scale = float(dots[j] / float(np.dot(m[j].astype(np.float64), m[j])))
                run = _run(v, p, m, j, scale)
                if run and (best is None or run > best[-1]):
                    best = (key, transpose, j, scale, run)
        if best is None:
            if p == 0:
                return None
            raise RuntimeError(f"rows {p}.. of a CTranslate2 variable match no weight matrix")
        key, transpose, j, scale, run = best
        pieces.append([key, transpose, j, j + run, 1.0 if abs(scale - 1.0) < 1e-6 else scale])
        p += run
    return pieces


def _carried_file(name: str, path: Path) -> dict[str, Any]:
    """A file with no holes."""
    return {"name": name, "bytes": path.stat().st_size, "holes": []}


def plan(bundle: Path, ct2: Path) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]], dict[str, Path]]:
    """The files (holes without sha256 yet), the fills and each file's original path."""
    regions = onnx_regions(bundle)
    fills: dict[int, dict[str, Any]] = {}
    originals: dict[int, np.ndarray] = {}
    by_name: dict[tuple[str, str], int] = {}
    holes: dict[str, list[list[Any]]] = {}
    for (data, offset), region in sorted(regions.items()):
        if region["dtype"] != "float32" or len(region["shape"]) != 2 or not region["matmul"]:
            continue
        array = read_region(bundle, data, offset, region)
        key = len(fills)
        zero = [int(i) for i in np.flatnonzero(~array.any(axis=1))]
        fills[key] = {"kind": "random", "shape": region["shape"], "mean": float(array.mean()),
                      "std": float(array.std()), "zero_rows": zero, "name": region["name"]}
        originals[key] = array
        by_name |= dict.fromkeys(region["uses"], key)
        holes.setdefault(data, []).append([offset, region["length"], key])
    for (data, offset), region in sorted(regions.items()):
        source = next((by_name[u] for u in region["uses"] if u in by_name), None)
        if region["dtype"] != "float16" or source is None:
            continue
        if not np.array_equal(read_region(bundle, data, offset, region), fp16_cast(originals[source])):
            raise RuntimeError(f"{data}: {region['name']} is not its fp32 initializer cast to fp16")
        key = len(fills)
        fills[key] = {"kind": "fp16", "of": source, "name": region["name"]}
        holes.setdefault(data, []).append([offset, region["length"], key])
    carried = [read_region(bundle, data, offset, r) for (data, offset), r in regions.items()
               if r["dtype"] == "float32" and len(r["shape"]) == 2 and not r["matmul"]]
    model_bin = ct2 / "model.bin"
    raw = model_bin.read_bytes()
    for var in ct2_variables(model_bin):
        if var["type"] != 0 or len(var["shape"]) != 2:  # float32 matrices only
            continue
        count = var["bytes"] // 4
        v = np.frombuffer(raw, np.float32, count=count, offset=var["offset"]).reshape(var["shape"])
        pieces = match_rows(v, originals)
        if pieces is None:
            if not any(v.shape[1:] == c.shape[1:] and len(c) >= len(v) and np.array_equal(v, c[:len(v)])
                       for c in carried):  # e.g. the position table, carried on both sides
                raise RuntimeError(f"CTranslate2's {var['name']} is neither weight rows nor carried")
            continue
        key = len(fills)
        fills[key] = {"kind": "pieces", "pieces": pieces, "name": var["name"]}
        holes.setdefault("ct2/model.bin", []).append([var["offset"], var["bytes"], key])
    paths = {f"bundle/{p.name}": p for p in sorted(bundle.iterdir()) if p.is_file()}
    paths |= {f"ct2/{p.name}": p for p in sorted(ct2.iterdir()) if p.is_file()}
    files = []
    for name, path in paths.items():
        entry = _carried_file(name, path)
        entry["holes"] = sorted(holes.get(name.removeprefix("bundle/"), holes.get(name, [])))
        files.append(entry)
    return files, fills, paths


def write_carried(files: list[dict[str, Any]], paths: dict[str, Path], dest: Path) -> None:
    """carried.bin: each file's bytes outside its holes, in order; sets each entry's carried_offset."""
    with dest.open("wb") as out:
        for entry in files:
            entry["carried_offset"] = out.tell()
            raw = paths[entry["name"]].read_bytes()
            position = 0
            for offset, length, _ in entry["holes"]:
                out.write(raw[position:offset])
                position = offset + length
            out.write(raw[position:])


def build_skeleton(out: Path, work: Path, quick: bool = False, seed: int = 0, log=print) -> Path:
    """The opus-mt-shaped (or, quick, a small Marian-shaped) model's skeleton in out; returns out."""
    from bench.families.footprint import step_bytes
    from bench.families.marian import FULL, QUICK
    from bench.families.registry import STAMP, family_dir
    from bench.families.text import source_texts

    shape = QUICK if quick else FULL
    hf_dir = family_dir(work / "hf", "marian", shape, seed, log=log)
    bundle, ct2 = convert(hf_dir, work, log)
    files, fills, paths = plan(bundle, ct2)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    staging = Path(tempfile.mkdtemp(prefix=".skeleton-", dir=out.parent))
    try:
        bundle_json = json.loads((bundle / "bundle.json").read_text(encoding="utf-8"))
        for pass_ in ("weights", "final"):  # the weights first: bundle.json lists their sha256
            write_carried(files, paths, out / CARRIED)
            for entry in files:
                entry["sha256"] = ""
            info = {"shape": asdict(shape), "seed": seed, "hf_build": json.loads(
                        (hf_dir / STAMP).read_text()),
                    "step_bytes": {"base": step_bytes(bundle, None), "fp16": step_bytes(bundle, "fp16")},
                    "texts": TEXTS}
            manifest = {"seed": seed, "files": files, "fills": {str(k): v for k, v in fills.items()},
                        "info": info}
            (out / SKELETON).write_text(json.dumps(manifest), encoding="utf-8")
            shutil.rmtree(staging / "files", ignore_errors=True)
            _materialize_unchecked(out, staging / "files")
            for entry in files:
                made = staging / "files" / entry["name"]
                entry["sha256"], entry["bytes"] = file_sha256(made), made.stat().st_size
            if pass_ == "weights":
                for data in bundle_json["weights"]:
                    entry = next(e for e in files if e["name"] == f"bundle/{data}")
                    bundle_json["files"][data] = {"sha256": entry["sha256"], "bytes": entry["bytes"]}
                patched = staging / "bundle.json"
                patched.write_text(json.dumps(bundle_json, indent=2) + "\n", encoding="utf-8")
                paths["bundle/bundle.json"] = patched
                next(e for e in files if e["name"] == "bundle/bundle.json")["bytes"] = patched.stat().st_size
        (out / SKELETON).write_text(json.dumps(manifest), encoding="utf-8")
        texts = source_texts(shape, N_TEXTS)
        (out / TEXTS).write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
        materialize(out, staging / "check", log=lambda _: None)  # every sha256 as recorded
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    size = sum(p.stat().st_size for p in out.iterdir()) / 2**20
    log(f"skeleton: {len(files)} files, {sum(len(e['holes']) for e in files)} holes, {size:.1f} MiB in {out}")
    return out


def _materialize_unchecked(skeleton: Path, dest: Path) -> None:
    """The files of a skeleton whose sha256 are not known yet."""
    from gpukit.skeleton import write_file

    manifest = json.loads((skeleton / SKELETON).read_text(encoding="utf-8"))
    carried = memoryview((skeleton / CARRIED).read_bytes())
    arrays = Arrays(int(manifest["seed"]), {int(k): v for k, v in manifest["fills"].items()})
    for entry in manifest["files"]:
        write_file(dest / entry["name"], entry, carried, arrays)
