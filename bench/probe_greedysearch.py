"""Probe: ONNX Runtime's com.microsoft.GreedySearch (encoder-decoder, model_type=1) on the default model.

    .venv/bin/python -m bench.probe_greedysearch [--bundle DIR] [--checkpoint PT] [--sources 64]

Exports the checkpoint again with a concat KV cache (the "fused" lowering: MultiHeadAttention with
past/present), wraps encoder + first decoder step and the decoder step into the two subgraphs that
ORT's T5 code path validates (see `encoder_subgraph` / `decoder_subgraph`), then builds a GreedySearch
model. If ORT refuses it, the exact error is printed and the same subgraphs are run under
BeamSearch with num_beams=1, early_stopping=1 (ORT's only encoder-decoder generation loop in C++).
Measures: greedy tokens against `Runner.translate` on the first held-out sources
(artifacts/default/test_sample.tsv), then sentences/s of both in static batches of 1 and 32, 2
intra-op threads (ORT's global pool), interleaved, best of 3 repeats. Last line: JSON with the
speed ratios (C++ loop / Runner, higher = C++ loop faster).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto, helper

import export.fused  # noqa: F401  (registers the "fused" lowering: concat KV cache)
from bench.workload import HELD_OUT
from export.attention import get_lowering
from export.export import export_graphs
from interface import names
from model.checkpoint import load_checkpoint
from model.data import read_tsv
from service.runtime.runner import Runner
from service.runtime.sessions import disabled_optimizers

INT32, INT64, FLOAT = TensorProto.INT32, TensorProto.INT64, TensorProto.FLOAT
THREADS, BATCHES, REPEATS = 2, (1, 32), 3


def vi(name: str, dtype: int, shape: list[str | int]) -> onnx.ValueInfoProto:
    """A typed graph input/output."""
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name: str, values: list[int], dtype: int = INT64) -> onnx.NodeProto:
    """A Constant node holding a 1-D tensor."""
    return helper.make_node("Constant", [], [name],
                            value=helper.make_tensor(name, dtype, [len(values)], values))


def inline(graph: onnx.GraphProto, prefix: str, wiring: dict[str, str]
           ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Copies of graph's nodes and initializers, every name prefixed except those renamed by wiring."""
    def name(n: str) -> str:
        return n if not n else wiring.get(n, prefix + n)

    nodes, inits = [onnx.NodeProto() for _ in graph.node], [onnx.TensorProto() for _ in graph.initializer]
    for new, node in zip(nodes, graph.node, strict=True):
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            raise ValueError(f"node {node.name} has a subgraph; inline() does not rename inside it")
        new.CopyFrom(node)
        new.name = prefix + node.name
        new.input[:], new.output[:] = map(name, node.input), map(name, node.output)
    for new, init in zip(inits, graph.initializer, strict=True):
        new.CopyFrom(init)
        new.name = name(init.name)
    return nodes, inits


def prune(nodes: list[onnx.NodeProto], outputs: list[str]) -> list[onnx.NodeProto]:
    """Drop nodes nothing in outputs depends on (the decoder's cross_attentions branch), and unused
    trailing outputs (the last cross-attention's optional scores output, whose type ORT cannot infer)."""
    needed, kept = set(outputs), []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            while node.output[-1] not in needed:
                node.output.pop()
            kept.append(node)
            needed.update(node.input)
    return kept[::-1]


def cache_names(n: int, kind: str, io: str) -> list[str]:
    """ORT's T5 cache names: {io}_key_{kind}_i, {io}_value_{kind}_i for every layer, io past/present."""
    return [f"{io}_{kv}_{kind}_{i}" for i in range(n) for kv in ("key", "value")]


def decoder_wiring(n: int, self_past: list[str], cross: list[str], presents: list[str]) -> dict[str, str]:
    """Our decoder's names -> the wrapper's: caches in, logits and self-attention presents out."""
    ours_self = [names.past_name(i, "decoder", kv) for i in range(n) for kv in ("key", "value")]
    ours_cross = [names.past_name(i, "encoder", kv) for i in range(n) for kv in ("key", "value")]
    ours_out = [names.present_name(i, "decoder", kv) for i in range(n) for kv in ("key", "value")]
    wiring = {names.INPUT_IDS: "ids64", names.POSITION_IDS: "positions", names.ATTENTION_MASK: "self_mask",
              names.ENCODER_ATTENTION_MASK: "source_mask64", names.LOGPROBS: "logits"}
    return wiring | dict(zip(ours_self + ours_cross + ours_out, self_past + cross + presents, strict=True))


def encoder_subgraph(enc: onnx.GraphProto, dec: onnx.GraphProto, n: int, h: int, dh: int, v: int
                     ) -> onnx.GraphProto:
    """(encoder_input_ids, encoder_attention_mask, decoder_input_ids) int32 -> logits, a dummy
    encoder_hidden_states, present_{key,value}_self_i (B,H,1,Dh), present_{key,value}_cross_i:
    the encoder and the first decoder step (empty self cache, position 0)."""
    cross, selfs = cache_names(n, "cross", "present"), cache_names(n, "self", "present")
    nodes = [
        helper.make_node("Cast", ["encoder_input_ids"], ["source64"], to=INT64),
        helper.make_node("Cast", ["encoder_attention_mask"], ["source_mask64"], to=INT64),
        helper.make_node("Cast", ["decoder_input_ids"], ["ids64"], to=INT64),
        helper.make_node("Shape", ["encoder_input_ids"], ["batch"], start=0, end=1),
        const("empty_tail", [h, 0, dh]), const("one", [1]),
        helper.make_node("Concat", ["batch", "empty_tail"], ["empty_shape"], axis=0),
        helper.make_node("ConstantOfShape", ["empty_shape"], ["empty"],
                         value=helper.make_tensor("z", FLOAT, [1], [0.0])),
        helper.make_node("Concat", ["batch", "one"], ["b1"], axis=0),
        helper.make_node("ConstantOfShape", ["b1"], ["positions"],
                         value=helper.make_tensor("z", INT64, [1], [0])),
        helper.make_node("ConstantOfShape", ["b1"], ["self_mask"],
                         value=helper.make_tensor("o", INT64, [1], [1])),
        helper.make_node("Cast", ["encoder_attention_mask"], ["mask_f"], to=FLOAT), const("two", [2]),
        helper.make_node("Unsqueeze", ["mask_f", "two"], ["encoder_hidden_states"]),  # dummy (B, S, 1)
    ]
    enc_wiring = {names.INPUT_IDS: "source64", names.ATTENTION_MASK: "source_mask64"}
    enc_wiring |= dict(zip(names.encoder_outputs(n), cross, strict=True))
    e_nodes, e_inits = inline(enc, "enc/", enc_wiring)
    d_nodes, d_inits = inline(dec, "dec/", decoder_wiring(n, ["empty"] * 2 * n, cross, selfs))
    outs = ["logits", "encoder_hidden_states", *selfs, *cross]
    return helper.make_graph(
        prune(nodes + e_nodes + d_nodes, outs), "encoder_and_first_step",
        [vi("encoder_input_ids", INT32, ["B", "S"]), vi("encoder_attention_mask", INT32, ["B", "S"]),
         vi("decoder_input_ids", INT32, ["B", 1])],
        [vi("logits", FLOAT, ["B", 1, v]), vi("encoder_hidden_states", FLOAT, ["B", "S", 1]),
         *[vi(s, FLOAT, ["B", h, 1, dh]) for s in selfs], *[vi(c, FLOAT, ["B", h, "S", dh]) for c in cross]],
        e_inits + d_inits)


def decoder_subgraph(dec: onnx.GraphProto, n: int, h: int, dh: int, v: int) -> onnx.GraphProto:
    """(input_ids (B,1), encoder_attention_mask, past_{key,value}_self_i..., past_{key,value}_cross_i...)
    -> logits, present_{key,value}_self_i (B,H,P+1,Dh); position P and the all-ones mask built in-graph."""
    past, cross = cache_names(n, "self", "past"), cache_names(n, "cross", "past")
    presents = cache_names(n, "self", "present")
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids64"], to=INT64),
        helper.make_node("Cast", ["encoder_attention_mask"], ["source_mask64"], to=INT64),
        helper.make_node("Shape", ["input_ids"], ["batch"], start=0, end=1),
        helper.make_node("Shape", [past[0]], ["past_len"], start=2, end=3),
        const("one", [1]), const("one_one", [1, 1]),
        helper.make_node("Add", ["past_len", "one"], ["total_len"]),
        helper.make_node("Concat", ["batch", "one"], ["b1"], axis=0),
        helper.make_node("Reshape", ["past_len", "one_one"], ["past_11"]),
        helper.make_node("Expand", ["past_11", "b1"], ["positions"]),
        helper.make_node("Concat", ["batch", "total_len"], ["mask_shape"], axis=0),
        helper.make_node("ConstantOfShape", ["mask_shape"], ["self_mask"],
                         value=helper.make_tensor("o", INT64, [1], [1])),
    ]
    d_nodes, d_inits = inline(dec, "dec/", decoder_wiring(n, past, cross, presents))
    outs = ["logits", *presents]
    return helper.make_graph(
        prune(nodes + d_nodes, outs), "decoder_step",
        [vi("input_ids", INT32, ["B", 1]), vi("encoder_attention_mask", INT32, ["B", "S"]),
         *[vi(p, FLOAT, ["B", h, "P", dh]) for p in past], *[vi(c, FLOAT, ["B", h, "S", dh]) for c in cross]],
        [vi("logits", FLOAT, ["B", 1, v]), *[vi(p, FLOAT, ["B", h, "P1", dh]) for p in presents]],
        d_inits)


def generation_model(op: str, enc: onnx.GraphProto, dec: onnx.GraphProto, special: dict[str, int],
                     max_length: int) -> onnx.ModelProto:
    """A model around one GreedySearch or BeamSearch (num_beams 1) node: input_ids, attention_mask int32 (B,S)
    -> sequences int32 (B[, 1], max_length)."""
    ints = {"max_length": max_length, "min_length": 0, "num_beams": 1, "num_return_sequences": 1}
    floats = {"length_penalty": 1.0, "repetition_penalty": 1.0}
    if op == "GreedySearch":
        inputs = ["input_ids", "max_length", "min_length", "repetition_penalty"]
        shape, extra = ["B", max_length], {}
    else:  # BeamSearch requires length_penalty at run time
        inputs, shape = ["input_ids", *ints, *floats], ["B", 1, max_length]
        extra = {"early_stopping": 1}
    # no vocab_mask, prefix_vocab_mask; an explicit attention_mask: ORT's default masks only left padding
    inputs += ["", "", "attention_mask"]
    inits = [helper.make_tensor(k, INT32, [1], [val]) for k, val in ints.items() if k in inputs]
    inits += [helper.make_tensor(k, FLOAT, [1], [val]) for k, val in floats.items() if k in inputs]
    node = helper.make_node(op, inputs, ["sequences"], domain="com.microsoft", model_type=1,
                            eos_token_id=special["eos"], pad_token_id=special["pad"],
                            decoder_start_token_id=special["bos"], no_repeat_ngram_size=0,
                            encoder=enc, decoder=dec, **extra)
    sources = [vi(k, INT32, ["B", "S"]) for k in ("input_ids", "attention_mask")]
    graph = helper.make_graph([node], f"{op}_t5", sources, [vi("sequences", INT32, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


def open_session(model: onnx.ModelProto, path: Path) -> ort.InferenceSession:
    """A CPU session on ORT's global pool (the Runner's), with the Runner's disabled optimizers."""
    onnx.save_model(model, path)
    so = ort.SessionOptions()
    so.use_per_session_threads = False
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"],
                                disabled_optimizers=disabled_optimizers("CPUExecutionProvider"))


def generator(session: ort.InferenceSession, runner: Runner) -> Callable[[list[str]], list[list[int]]]:
    """texts -> greedy tokens (no start token, no eos), through the session; tokenization included.

    Sequences start with the decoder start token; a finished row continues with pad (BeamSearch
    writes no eos, GreedySearch would write it and pad after it)."""
    special = runner.special

    def run(texts: list[str]) -> list[list[int]]:
        ids = runner.encode_texts(texts)
        batch = np.full((len(ids), max(map(len, ids))), special.pad, np.int32)
        for row, src in zip(batch, ids, strict=True):
            row[: len(src)] = src
        feeds = {"input_ids": batch, "attention_mask": (batch != special.pad).astype(np.int32)}
        seqs = session.run(None, feeds)[0].reshape(len(ids), -1)
        out = []
        for seq in seqs.tolist():
            seq = seq[1:] if seq and seq[0] == special.bos else seq
            ends = [k for k, t in enumerate(seq) if t in (special.eos, special.pad)]  # beams: no eos, pads
            out.append(seq[: ends[0]] if ends else seq)
        for toks in out:
            runner.decode_tokens(toks)  # the Runner returns texts too
        return out
    return run


def runner_tokens(runner: Runner, texts: list[str], b: int) -> list[list[int]]:
    """Runner.translate in static batches of b: the best hypothesis' tokens, eos stripped."""
    eos, out = runner.special.eos, []
    for i in range(0, len(texts), b):
        hyps = runner.translate(texts[i:i + b], max_rows=b)
        out += [[t for t in h[0].tokens if t != eos] for h in hyps]
    return out


def best_rate(fn: Callable[[], object], n: int, times: list[float]) -> float:
    """Run fn once, append its seconds to times, return n / the best time so far."""
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
    return n / min(times)


def main(argv: list[str] | None = None) -> int:
    """Build, verify and time; prints what failed if ORT refuses the GreedySearch model."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, default=Path("artifacts/default/bundle"))
    ap.add_argument("--checkpoint", type=Path, default=Path("artifacts/default/model.pt"))
    ap.add_argument("--test", type=Path, default=HELD_OUT)
    ap.add_argument("--sources", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=256, help="incl. the decoder start token")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    runner = Runner(a.bundle, providers=["CPUExecutionProvider"], intra_op_threads=THREADS)
    texts = [s for s, _ in read_tsv(a.test)[: a.sources]]
    model, _ = load_checkpoint(a.checkpoint)
    cfg = model.cfg
    n, h, dh, v = cfg.n_decoder_layers, cfg.n_heads, cfg.d_model // cfg.n_heads, cfg.vocab_size
    special = {"eos": runner.special.eos, "pad": runner.special.pad, "bos": runner.special.bos}
    with tempfile.TemporaryDirectory(prefix="probe_gs-") as tmp:
        export_graphs(model, Path(tmp), get_lowering("fused"))
        enc = onnx.load(Path(tmp) / names.ENCODER_FILE).graph
        dec = onnx.load(Path(tmp) / names.DECODER_FILE).graph
        sub_enc, sub_dec = encoder_subgraph(enc, dec, n, h, dh, v), decoder_subgraph(dec, n, h, dh, v)
        for g in (sub_enc, sub_dec):
            print(f"subgraph {g.name}: {[i.name for i in g.input]} -> {[o.name for o in g.output]}")
        session, label, failures = None, "", {}
        for op, name in (("GreedySearch", "greedysearch"), ("BeamSearch", "beamsearch1")):
            try:
                session = open_session(generation_model(op, sub_enc, sub_dec, special, a.max_length),
                                       Path(tmp) / f"{op}.onnx")
                label = name
                break
            except Exception as e:  # the probe reports whatever ORT raises
                failures[op] = f"{type(e).__name__}: {e}".strip()
                print(f"{op} (model_type=1) FAILED: {failures[op]}")
                if "kModelTypeGpt" in failures[op]:
                    print("  why: GreedySearch::Init enforces model_type == 0 (GPT-2, decoder-only); its T5 "
                          "branch is not implemented (convert_generation.py: greedy search is gpt2-only)")
        if session is None:
            print(json.dumps({"failed": failures}))
            return 1
        if failures:
            print(f"measuring BeamSearch(num_beams=1, early_stopping=1) instead, as '{label}'")
        gen = generator(session, runner)
        ref, got = runner_tokens(runner, texts, 32), gen(texts)
        same = sum(r == g for r, g in zip(ref, got, strict=True))
        print(f"tokens identical: {same} / {len(texts)} ({label} vs Runner.translate)")
        ratios: dict[str, float | None] = {f"greedysearch_vs_runner_b{b}": None for b in BATCHES}
        for b in BATCHES:
            chunks = [texts[i:i + b] for i in range(0, len(texts), b)]
            t_run: list[float] = []
            t_gen: list[float] = []
            for _ in range(REPEATS):
                x = best_rate(lambda c=chunks, b=b: [runner.translate(t, max_rows=b) for t in c],
                              len(texts), t_run)
                y = best_rate(lambda c=chunks: [gen(t) for t in c], len(texts), t_gen)
            print(f"b={b} runner {x:.1f}/s {label} {y:.1f}/s ratio {y / x:.3f}")
            ratios[f"{label}_vs_runner_b{b}"] = round(y / x, 3)
        print(json.dumps({**ratios, "tokens_identical": same, "sources": len(texts), "failed": failures}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
