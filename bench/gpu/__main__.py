"""GPU benchmark of `make gpu-check`: the engine and the server on CUDA (or, `--device cpu`, the same path
on the CPU); the last line is one JSON object.

Model (bench/gpu/models.py): `--model opus-mt` (default), the random-weight opus-mt-shaped model
materialized from the GPU kit's skeleton (`--skeleton DIR`; made here when absent and torch is installed),
decoded for a fixed 32 tokens; or `--model default`, the shipped bundle, greedy to eos.
Engine (bench/gpu/engine.py): ours fp16 / fp32 and CTranslate2 float16 / float32 at batch 1, 32, 128,
tokens compared, ours' host <-> device bytes per step. Server (bench/gpu/serve.py): default flags,
concurrency 1, 32, 128, beside CTranslate2 in process at the same batch size. Footprint
(bench/gpu/footprint.py): the device's copy bandwidth, each variant's batch-1 step against its bandwidth
floor, and each engine's memory in a fresh process.

    python -m bench.gpu [--quick] [--device cuda|cpu] [--model opus-mt|default] [--skeleton DIR] [--work DIR]

Time targets on one H100 (not measured yet): the whole run under 8 minutes with the GPU tier, `--quick`
under 4.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.gpu.engine import BATCHES, ENGINES, VARIANT, engine, model_job
from bench.gpu.footprint import copy_bandwidth, engine_memory, floors
from bench.gpu.models import Model, default_model, make_skeleton, opus_model
from bench.gpu.serve import server


def device_name() -> str:
    """The GPU's name as nvidia-smi prints it ("" without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return ""


def memory(model: Model, device: str, ids: list[list[int]]) -> dict[str, Any]:
    """Each engine's memory in a fresh process (warm, then a batch of 32), and ours' weights bytes."""
    out: dict[str, Any] = {}
    manifest = json.loads((model.bundle / "bundle.json").read_text(encoding="utf-8"))
    for name in ENGINES[device]:
        if name.startswith("ct2") and not model.ct2_dir:
            continue
        out[name] = engine_memory(name, model_job(model), device, (ids * 32)[:32])
        if name in VARIANT:
            data = "weights.data" if VARIANT[name] == "base" else f"weights.{VARIANT[name]}.data"
            out[name]["weights_mib"] = round(manifest["files"].get(data, {}).get("bytes", 0) / 2**20, 1)
    ours, theirs = out.get(ENGINES[device][0], {}), out.get(ENGINES[device][2 if device == "cuda" else 1], {})
    key = "device_mib" if device == "cuda" else "rss_added_mib"
    if ours.get("batch", {}).get(key) and theirs.get("batch", {}).get(key):
        out["ours_vs_ct2"] = round(ours["batch"][key] / theirs["batch"][key], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: model, engine, server and footprint; print the JSON line."""
    ap = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer sentences, requests and repeats")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--model", choices=("opus-mt", "default"), default="opus-mt")
    ap.add_argument("--skeleton", type=Path, help="the opus-mt skeleton (the GPU kit's opus-mt/)")
    ap.add_argument("--work", type=Path, help="where models are materialized (default: a temporary folder)")
    ap.add_argument("--parts", default="engine,server,footprint", help="comma-separated parts to run")
    ap.add_argument("--sizes", default=",".join(map(str, BATCHES)),
                    help="the engine's batch sizes and the server's concurrencies, comma-separated")
    args = ap.parse_args(argv)
    sizes = tuple(int(n) for n in args.sizes.split(","))
    start = time.perf_counter()
    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        if args.model == "opus-mt":
            skeleton = args.skeleton or work / "skeleton"
            if args.skeleton is None and not (skeleton / "skeleton.json").is_file():
                make_skeleton(skeleton, args.quick)
            model = opus_model(skeleton, work, log=lambda line: print(line, file=sys.stderr))
        else:
            model = default_model(work)
        report: dict[str, Any] = {"device": device_name() if args.device == "cuda" else "cpu",
                                  "model": model.name, "quick": args.quick}
        from service.runtime.runner import Runner

        ids = Runner(model.bundle, providers=["CPUExecutionProvider"]).encode_texts(model.texts[:256])
        if "engine" in parts:
            report["engine"] = engine(model, args.device, ids, args.quick, sizes)
            print(json.dumps(report["engine"]), file=sys.stderr)
        if "server" in parts:
            report["server"] = server(model, args.device, ids, args.quick, sizes)
        if "footprint" in parts:
            step_ms = report.get("engine", {}).get("step_ms_b1", {})
            gbps = copy_bandwidth(args.device, 256 if args.quick else 1024)
            report["floor"] = floors(model.step_bytes, gbps, step_ms)
            report["memory"] = memory(model, args.device, ids)
    report["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
