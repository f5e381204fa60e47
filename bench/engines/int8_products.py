"""The int8 matrix-product forms of ONNX Runtime's CPU provider on this CPU, in isolation.

    python -m bench.engines.int8_products [--layers 12] [--d-model 1024] [--d-ff 4096] [--rows 1 4 32]
                                          [--nbits-blocks 128 256]

One graph per form: a chain of `layers` feed-forward pairs (d_model x d_ff, then d_ff x d_model; random
weights, past the CPU's caches at the default size, as a decoder step's weights are), run at each row count
on 2 threads:

- fp32: plain MatMul;
- int8: the int8 variant's own quantization (export/variants/int8.py `quantize_graph`: DynamicQuantizeMatMul
  once loaded), with the service's CPU session options (interface/sessions.py `cpu_session_config`);
- int8, exact U8U8: the same graph with `session.x64quantprecision` set, as on a CPU without VNNI;
- MatMulNBits: 8-bit weights in blocks of 128 (or of each `--nbits-blocks`), int8 compute
  (`accuracy_level` 4).

Prints ms per chain, each form's speed as a ratio to fp32 measured in the same run, and its largest error
relative to fp32's output; the last line is the JSON. docs/performance.md keeps what it showed.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from export.variants.int8 import quantize_graph
from export.verify.base import cpu_session
from interface.sessions import EXACT_INT8_PRODUCTS, cpu_flags, cpu_session_config

FORMS = ("fp32", "int8", "int8 exact U8U8")  # then one MatMulNBits form per block size
NBITS_BLOCKS = (16, 32, 64, 128, 256)  # the block sizes ONNX Runtime's 8-bit quantizer takes
OPSET, IR_VERSION = 18, 10


def nbits_form(block: int) -> str:
    """The name of the MatMulNBits form with blocks of `block`."""
    return f"MatMulNBits 8-bit, blocks of {block}"


def forms(blocks: Sequence[int]) -> list[str]:
    """Every form measured, in order."""
    return [*FORMS, *(nbits_form(b) for b in blocks)]


def chain(layers: int, d_model: int, d_ff: int, seed: int = 0) -> onnx.ModelProto:
    """x (rows, d_model) through `layers` pairs of MatMuls with random weights, scaled to keep unit size."""
    rng = np.random.default_rng(seed)
    nodes, weights, current = [], [], "x"
    for i in range(layers):
        for j, (k, n) in enumerate(((d_model, d_ff), (d_ff, d_model))):
            name = f"w{i}_{j}"
            weights.append(numpy_helper.from_array(
                (rng.standard_normal((k, n), dtype=np.float32) / np.float32(np.sqrt(k))), name))
            out = "y" if (i, j) == (layers - 1, 1) else f"h{i}_{j}"
            nodes.append(helper.make_node("MatMul", [current, name], [out]))
            current = out
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", d_model])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", d_model])],
                              weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def nbits(fp32: onnx.ModelProto, block: int = 128) -> onnx.ModelProto:
    """fp32's MatMuls as 8-bit MatMulNBits (blocks of `block`, symmetric, int8 compute) by ORT's quantizer."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    copy = onnx.ModelProto()
    copy.CopyFrom(fp32)
    quantizer = MatMulNBitsQuantizer(copy, bits=8, block_size=block, is_symmetric=True, accuracy_level=4)
    quantizer.process()
    return quantizer.model.model


def session(model: onnx.ModelProto, config: dict[str, str], threads: int) -> ort.InferenceSession:
    """A CPU session of `model` with these config entries and its own pool of `threads` (the process's
    global pool where a Runner made one: export/verify/base.py `cpu_session`)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    for key, value in config.items():
        so.add_session_config_entry(key, value)
    return cpu_session(model.SerializeToString(), so)


def seconds_per_run(sess: ort.InferenceSession, x: np.ndarray, budget_s: float) -> float:
    """Mean wall time of runs after a warm-up, for about budget_s seconds (at least 3 runs)."""
    sess.run(None, {"x": x})
    runs, start = 0, time.perf_counter()
    while runs < 3 or time.perf_counter() - start < budget_s:
        sess.run(None, {"x": x})
        runs += 1
    return (time.perf_counter() - start) / runs


def measure(layers: int, d_model: int, d_ff: int, rows: list[int], threads: int = 2,
            budget_s: float = 2.0, blocks: Sequence[int] = (128,)) -> dict:
    """Per form and row count: ms per chain, speed / fp32's, max |error| / max |fp32 output|."""
    fp32 = chain(layers, d_model, d_ff)
    int8 = quantize_graph(fp32)
    service = cpu_session_config(cpu_flags())
    models = {"fp32": (fp32, service), "int8": (int8, service),
              "int8 exact U8U8": (int8, EXACT_INT8_PRODUCTS),
              **{nbits_form(b): (nbits(fp32, b), service) for b in blocks}}
    rng = np.random.default_rng(1)
    inputs = {m: rng.standard_normal((m, d_model), dtype=np.float32) for m in rows}
    results: dict = {"layers": layers, "d_model": d_model, "d_ff": d_ff, "threads": threads,
                     "blocks": list(blocks), "service_config": service,
                     "ms": {}, "vs_fp32": {}, "rel_error": {}}
    reference = {}
    for form in forms(blocks):  # one session at a time: each holds its own prepacked weights
        model, config = models[form]
        sess = session(model, config, threads)
        for m, x in inputs.items():
            key = f"{form} {m}"
            results["ms"][key] = round(1e3 * seconds_per_run(sess, x, budget_s), 3)
            (y,) = sess.run(None, {"x": x})
            if form == "fp32":
                reference[m] = y
            results["rel_error"][key] = float(np.abs(y - reference[m]).max() / np.abs(reference[m]).max())
            results["vs_fp32"][key] = round(results["ms"][f"fp32 {m}"] / results["ms"][key], 3)
        del sess
    return results


def table(results: dict) -> str:
    """Markdown: one row per form, ms (speed / fp32, relative error) per row count."""
    rows = sorted({int(k.rsplit(" ", 1)[1]) for k in results["ms"]})
    lines = ["| form | " + " | ".join(f"{m} rows: ms (x fp32, error)" for m in rows) + " |",
             "|---" * (len(rows) + 1) + "|"]
    for form in forms(results["blocks"]):
        cells = [f"{results['ms'][f'{form} {m}']:.2f} ({results['vs_fp32'][f'{form} {m}']:.2f}x, "
                 f"{results['rel_error'][f'{form} {m}']:.3f})" for m in rows]
        lines.append(f"| {form} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI: the table, then the JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12, help="feed-forward pairs in the chain")
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--d-ff", type=int, default=4096)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 4, 32],
                    help="rows per run (a decoder step's batch)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=2.0, help="time per form and row count")
    ap.add_argument("--nbits-blocks", type=int, nargs="+", default=[128], choices=NBITS_BLOCKS,
                    metavar="BLOCK",
                    help=f"MatMulNBits block sizes, one form each (of {', '.join(map(str, NBITS_BLOCKS))})")
    a = ap.parse_args(argv)
    for flag, value in (("--layers", a.layers), ("--d-model", a.d_model), ("--d-ff", a.d_ff),
                        ("--threads", a.threads), ("--rows", min(a.rows))):
        if value < 1:
            ap.error(f"{flag} must be >= 1, not {value}")
    if not a.seconds > 0:
        ap.error(f"--seconds must be > 0, not {a.seconds}")
    blocks = sorted(set(a.nbits_blocks))  # each block size measured once
    results = measure(a.layers, a.d_model, a.d_ff, a.rows, a.threads, a.seconds, blocks)
    print(f"CPU session config here: {results['service_config'] or 'none'}")
    print(table(results))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
