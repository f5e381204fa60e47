"""The multi-step decoder: an ONNX `Loop` around the verified in-place decoder, greedy, K steps per run.

The loop body is the decoder graph itself, its values renamed into the body's scope (its weights
stay initializers of the outer graph, which the body reads from there), less the nodes of the
outputs the loop does not read (the log-normalizer), followed by the greedy choice: argmax of the
step's log-probs, the chosen token's log-prob, the finished flags (eos
emitted, or a row the caller marked finished), and the next step's inputs (the chosen token,
positions and `seqlens_k` one further). The cross-attention K/V and source lengths are read from
the outer scope: they do not change within a run. The loop stops after `max_steps` steps or once
every row is finished. I/O names: interface/names.py (`multistep_inputs` / `multistep_outputs`).

Why it is composed rather than traced: the decoder step is what `export/verify.py` checks against
PyTorch, and the composition adds only integer bookkeeping and an argmax, so the multi-step file
decodes exactly what the step file decodes (tests/export/test_multistep.py checks the tokens).
The caches are loop-carried: ONNX Runtime kernels that cannot write in place inside a loop body
(the CPU provider's GroupQueryAttention) copy the cache once per step; docs/performance.md has the
measured trade.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from interface import names

BODY = "step/"  # prefix of the body's own values


def _renamed(node: onnx.NodeProto, outer: set[str]) -> onnx.NodeProto:
    """A copy of node with every value not in `outer` moved into the body's scope."""
    new = onnx.NodeProto()
    new.CopyFrom(node)
    new.name = BODY + node.name
    for field in (new.input, new.output):
        renamed = [x if x == "" or x in outer else BODY + x for x in field]
        del field[:]
        field.extend(renamed)
    return new


def _const(name: str, dtype: int, value: int | list[int]) -> onnx.NodeProto:
    """A Constant node: a scalar, or a 1-D tensor for a list."""
    dims, vals = ([len(value)], value) if isinstance(value, list) else ([], [value])
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dtype, dims, vals))


def _live(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """The nodes that `outputs` need, in order: the decoder's outputs the loop does not read (its
    log-normalizer) are not computed in the body."""
    while True:
        used = {x for node in nodes for x in node.input} | outputs
        kept = [node for node in nodes if any(o in used for o in node.output if o)]
        if len(kept) == len(nodes):
            return nodes
        nodes = kept


def _value(name: str, elem: int, shape: list | None = None) -> onnx.ValueInfoProto:
    """A value info of the given element type (shape None: unknown rank)."""
    return helper.make_tensor_value_info(name, elem, shape)


def multistep_decoder(decoder: onnx.ModelProto, n_layers: int, eos_id: int) -> onnx.ModelProto:
    """The Loop model around an in-place decoder (names.decoder_inputs(n, "inplace") in, its outputs out)."""
    g = decoder.graph
    inputs = {i.name: i for i in g.input}
    want = names.decoder_inputs(n_layers, "inplace")
    if sorted(inputs) != sorted(want):
        raise ValueError(f"not an in-place decoder: inputs {sorted(inputs)}")
    caches = list(names.self_cache_io(n_layers))  # past names, loop-carried
    presents = list(names.self_cache_io(n_layers).values())
    carried = [names.INPUT_IDS, names.POSITION_IDS, names.SEQLENS_K, names.TOTAL_SEQUENCE_LENGTH]
    outer = {n for n in want if n not in carried and n not in caches} | {t.name for t in g.initializer}
    logp_type = next(o.type.tensor_type.elem_type for o in g.output if o.name == names.LOGPROBS)
    b = BODY
    nodes = [_renamed(n, outer) for n in g.node]
    nodes += [
        _const(b + "one64", TensorProto.INT64, 1), _const(b + "one32", TensorProto.INT32, 1),
        _const(b + "eos", TensorProto.INT64, eos_id), _const(b + "axis1", TensorProto.INT64, [1]),
        helper.make_node("Squeeze", [b + names.LOGPROBS, b + "axis1"], [b + "logp"]),  # (B, V)
        helper.make_node("ArgMax", [b + "logp"], [b + "next_ids"], axis=1, keepdims=1),  # (B, 1)
        helper.make_node("GatherElements", [b + "logp", b + "next_ids"], [b + "chosen"], axis=1),
        helper.make_node("Squeeze", [b + "next_ids", b + "axis1"], ["scan_tokens"]),  # (B,)
        helper.make_node("Squeeze", [b + "chosen", b + "axis1"], [b + "chosen_b"]),
        helper.make_node("Cast", [b + "chosen_b"], ["scan_logprobs"], to=TensorProto.FLOAT),
        helper.make_node("Squeeze", [b + names.CROSS_ATTENTIONS, b + "axis1"], ["scan_cross"]),  # (B, S)
        helper.make_node("Equal", ["scan_tokens", b + "eos"], [b + "is_eos"]),
        helper.make_node("Or", [b + names.FINISHED, b + "is_eos"], ["out_finished"]),
        helper.make_node("Not", ["out_finished"], [b + "running"]),
        helper.make_node("Cast", [b + "running"], [b + "running_i"], to=TensorProto.INT32),
        helper.make_node("ReduceMax", [b + "running_i"], [b + "any_i"], keepdims=0),
        helper.make_node("Cast", [b + "any_i"], ["out_cond"], to=TensorProto.BOOL),
        helper.make_node("Identity", [b + "next_ids"], ["out_" + names.INPUT_IDS]),
        helper.make_node("Add", [b + names.POSITION_IDS, b + "one64"], ["out_" + names.POSITION_IDS]),
        helper.make_node("Add", [b + names.SEQLENS_K, b + "one32"], ["out_" + names.SEQLENS_K]),
        helper.make_node("Add", [b + names.TOTAL_SEQUENCE_LENGTH, b + "one32"],
                         ["out_" + names.TOTAL_SEQUENCE_LENGTH]),
    ]
    nodes += [helper.make_node("Identity", [b + p], ["out_" + p]) for p in presents]
    for node in nodes:  # the added nodes, named after their output (placement reports name nodes)
        node.name = node.name or b + node.output[0].removeprefix(b)

    def body_input(name: str) -> onnx.ValueInfoProto:
        """The body's copy of a decoder input."""
        v = onnx.ValueInfoProto()
        v.CopyFrom(inputs[name])
        v.name = b + name
        return v

    body_inputs = [_value(b + "iteration", TensorProto.INT64, []), _value(b + "cond", TensorProto.BOOL, []),
                   *(body_input(n) for n in carried), _value(b + names.FINISHED, TensorProto.BOOL, None),
                   *(body_input(n) for n in caches)]
    cache_type = inputs[caches[0]].type.tensor_type.elem_type
    body_outputs = [_value("out_cond", TensorProto.BOOL, []),
                    *(_value("out_" + n, inputs[n].type.tensor_type.elem_type) for n in carried),
                    _value("out_finished", TensorProto.BOOL),
                    *(_value("out_" + p, cache_type) for p in presents),
                    _value("scan_tokens", TensorProto.INT64), _value("scan_logprobs", TensorProto.FLOAT),
                    _value("scan_cross", logp_type)]
    nodes = _live(nodes, {v.name for v in body_outputs})
    body = helper.make_graph(nodes, "decoder_step", body_inputs, body_outputs)
    loop = helper.make_node(
        "Loop", [names.MAX_STEPS, "loop_cond", *carried, names.FINISHED, *caches],
        [*(f"final_{n}" for n in carried), "final_finished", *presents,
         names.TOKENS, names.TOKEN_LOGPROBS, names.STEP_CROSS_ATTENTIONS],
        name="decoder_loop", body=body)
    graph_inputs = [*(inputs[n] for n in want), _value(names.MAX_STEPS, TensorProto.INT64, []),
                    _value(names.FINISHED, TensorProto.BOOL, ["batch"])]
    cache_shape = ["batch", inputs[caches[0]].type.tensor_type.shape.dim[1].dim_value, "max_cache",
                   inputs[caches[0]].type.tensor_type.shape.dim[3].dim_value]
    graph_outputs = [_value(names.TOKENS, TensorProto.INT64, ["steps", "batch"]),
                     _value(names.TOKEN_LOGPROBS, TensorProto.FLOAT, ["steps", "batch"]),
                     _value(names.STEP_CROSS_ATTENTIONS, logp_type, ["steps", "batch", "src_len"]),
                     *(_value(p, cache_type, cache_shape) for p in presents)]
    start = helper.make_node("Constant", [], ["loop_cond"], name="loop_cond",
                             value=helper.make_tensor("true", TensorProto.BOOL, [], [1]))
    read = {x for node in nodes for x in node.input}  # the decoder's weights the body still reads
    graph = helper.make_graph([start, loop], "multistep_decoder", graph_inputs, graph_outputs,
                              initializer=[t for t in g.initializer if t.name in read])
    model = helper.make_model(graph, opset_imports=list(decoder.opset_import), ir_version=decoder.ir_version,
                              producer_name="translator export.multistep")
    assert [i.name for i in model.graph.input] == names.multistep_inputs(n_layers)
    assert [o.name for o in model.graph.output] == names.multistep_outputs(n_layers)
    return model


def write_multistep(bundle_dir: Path, decoder_file: str, n_layers: int, eos_id: int) -> str:
    """Write the multi-step file of `decoder_file` in bundle_dir; returns its name."""
    out = names.steps_file(decoder_file)
    model = multistep_decoder(onnx.load(bundle_dir / decoder_file), n_layers, eos_id)
    onnx.save(model, bundle_dir / out)
    return out


def greedy_tokens(enc: ort.InferenceSession, run: Callable[..., tuple[np.ndarray, ...]],
                  sources: list[list[int]], n_layers: int, start_id: int, eos_id: int, max_new: int,
                  steps: int) -> list[list[int]]:
    """Greedy tokens of every source, all rows in one batch, up to `steps` tokens per call of
    `run(feeds, finished, k)` and at most max_new in all."""
    b, s = len(sources), max(map(len, sources))
    ids, mask = np.zeros((b, s), np.int64), np.zeros((b, s), np.int64)
    for i, x in enumerate(sources):
        ids[i, : len(x)], mask[i, : len(x)] = x, 1
    cross = enc.run(None, {names.INPUT_IDS: ids, names.ATTENTION_MASK: mask})
    heads, d_head = cross[0].shape[1], cross[0].shape[3]
    caches = {p: np.zeros((b, heads, max_new + steps + 1, d_head), cross[0].dtype)
              for p in names.self_cache_io(n_layers)}
    cross_names = [names.past_name(i, "encoder", kv) for i in range(n_layers) for kv in ("key", "value")]
    feeds = {names.ENCODER_SEQLENS_K: mask.sum(1).astype(np.int32) - 1,
             names.ENCODER_TOTAL_LENGTH: np.array(s, np.int32), **dict(zip(cross_names, cross, strict=True))}
    out, last, done = [[] for _ in sources], np.full(b, start_id, np.int64), np.zeros(b, bool)
    while not done.all() and len(out[0]) < max_new:
        n = len(out[0])
        feeds |= {names.INPUT_IDS: last[:, None], names.POSITION_IDS: np.full((b, 1), n, np.int64),
                  names.SEQLENS_K: np.full(b, n, np.int32),
                  names.TOTAL_SEQUENCE_LENGTH: np.array(n + 1, np.int32)}
        tokens, new_caches = run(feeds | caches, done, min(steps, max_new - n))
        caches = dict(zip(caches, new_caches, strict=True))
        for row in tokens:  # (B,) per step
            for i, t in enumerate(row.tolist()):
                out[i].append(t)
            done |= row == eos_id
        last = tokens[-1]
    return [o[: o.index(eos_id)] if eos_id in o else o[:max_new] for o in out]


def verify_multistep(bundle_dir: Path, decoder_file: str, encoder_file: str, sources: list[list[int]],
                     n_layers: int, start_id: int, eos_id: int, max_new: int = 64, steps: int = 3) -> int:
    """Greedy tokens of the multi-step file (`steps` per run) against its decoder's, one step per run, on
    the CPU provider, at most max_new tokens (< the model's max_len); ParityError unless every source
    decodes the same. Returns how many were compared."""
    from export.verify import ParityError, open_session

    enc, dec, loop = (open_session(bundle_dir / f)
                      for f in (encoder_file, decoder_file, names.steps_file(decoder_file)))
    presents = list(names.self_cache_io(n_layers).values())

    def one(feeds: dict[str, np.ndarray], done: np.ndarray, k: int) -> tuple[np.ndarray, list[np.ndarray]]:
        """One step: the argmax of the decoder's log-probs."""
        logp, *caches = dec.run([names.LOGPROBS, *presents], feeds)
        return logp[:, -1].argmax(-1)[None], caches

    def several(feeds: dict[str, np.ndarray], done: np.ndarray, k: int
                ) -> tuple[np.ndarray, list[np.ndarray]]:
        """k steps in one run of the multi-step file."""
        tokens, *caches = loop.run([names.TOKENS, *presents],
                                   feeds | {names.MAX_STEPS: np.array(k, np.int64), names.FINISHED: done})
        return tokens, caches

    want = greedy_tokens(enc, one, sources, n_layers, start_id, eos_id, max_new, 1)
    got = greedy_tokens(enc, several, sources, n_layers, start_id, eos_id, max_new, steps)
    wrong = [i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a != b]
    if wrong:
        raise ParityError(f"{names.steps_file(decoder_file)} decodes source {wrong[0]} as {got[wrong[0]]}, "
                          f"its decoder as {want[wrong[0]]} ({len(wrong)} of {len(sources)} differ)")
    return len(sources)
