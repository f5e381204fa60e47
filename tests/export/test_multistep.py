"""The multi-step decoder: a Loop around the in-place decoder, checked against PyTorch's greedy decoding."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch

from export.multistep import greedy_tokens, multistep_decoder, verify_multistep
from export.verify import ParityError, open_session
from interface import names
from model.checkpoint import load_checkpoint
from model.decoding import greedy_decode
from model.transformer import Transformer
from tests.support.corpus import tiny_pairs


@pytest.fixture(scope="module")
def model(tiny_checkpoint) -> Transformer:
    """The tiny checkpoint's PyTorch model."""
    m, _ = load_checkpoint(tiny_checkpoint)
    return m.eval()


@pytest.fixture(scope="module")
def sources(tiny_bundle) -> list[list[int]]:
    """Token ids (+ eos) of sentences of different lengths, through the bundle's tokenizer."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny_bundle / names.TOKENIZER_FILE))
    eos = json.loads((tiny_bundle / names.BUNDLE_FILE).read_text())["special_tokens"]["eos"]
    texts = [p[0] for p in tiny_pairs(9, 31)]
    texts[2] = f"{texts[2]} {texts[3]} {texts[4]}"
    return [tok.encode(t).ids + [eos] for t in texts]


def test_bundle_ships_a_multistep_file_per_decoder(tiny_bundle):
    """Each in-place decoder file (base and fp16) has its multi-step file, hashed in bundle.json, with
    the I/O interface/names.py declares; verification records how many sources matched."""
    manifest = json.loads((tiny_bundle / names.BUNDLE_FILE).read_text())
    n = manifest["model"]["n_decoder_layers"]
    for decoder in (names.DECODER_FILE, "decoder.fp16.onnx"):
        steps = names.steps_file(decoder)
        assert steps in manifest["files"]
        graph = onnx.load(tiny_bundle / steps).graph
        assert [i.name for i in graph.input] == names.multistep_inputs(n)
        assert [o.name for o in graph.output] == names.multistep_outputs(n)
        assert [node.op_type for node in graph.node] == ["Constant", "Loop"]
    assert manifest["io"]["steps"]["outputs"] == names.multistep_outputs(n)
    assert manifest["verification"]["multistep_sources"] >= 1
    assert manifest["verification"]["fp16"]["multistep_sources"] >= 1  # the fp16 file ran (CPU) too


def test_the_fp16_multistep_files_host_nodes_are_its_decoders_and_the_loops_integer_bookkeeping(tiny_bundle):
    """bundle.json's host_nodes of the fp16 multi-step file (what CUDA may keep on the host) hold the
    fp16 decoder's, as the loop body names them, and the loop's own integer nodes; every node is named."""
    manifest = json.loads((tiny_bundle / names.BUNDLE_FILE).read_text())
    host, steps = manifest["host_nodes"], names.steps_file("decoder.fp16.onnx")
    assert {f"step/{n}" for n in host["decoder.fp16.onnx"]} < set(host[steps])
    body = onnx.load(tiny_bundle / steps, load_external_data=False).graph.node[1].attribute[0].g
    by_name = {n.name: n for n in body.node}
    assert "" not in by_name and len(by_name) == len(body.node)
    bookkeeping = {n.name for n in body.node if n.op_type in ("Equal", "Or", "Not", "ReduceMax")} | {
        n.name for n in body.node if n.op_type == "Add" and n.output[0].startswith("out_")}
    assert len(bookkeeping) == 7 and bookkeeping <= set(host[steps])
    assert "" not in host[steps] and "loop_cond" in host[steps]  # the main graph's Constant
    ops = {by_name[n].op_type for n in host[steps] if n in by_name}
    assert not ops & {"MatMul", "GroupQueryAttention", "ArgMax"}


@pytest.mark.parametrize("steps", [1, 2, 5, 64])
def test_multistep_tokens_equal_pytorch_greedy(tiny_bundle, model, sources, steps):
    """Decoding every source in one batch, `steps` tokens per run (rows of different lengths, a run
    stopping early once all rows ended), gives PyTorch's greedy tokens for each source decoded alone."""
    cfg = model.cfg

    enc = open_session(tiny_bundle / names.ENCODER_FILE)
    loop = open_session(tiny_bundle / names.steps_file(names.DECODER_FILE))
    presents = list(names.self_cache_io(cfg.n_decoder_layers).values())
    runs = []

    def run(feeds, done, k):
        runs.append(1)
        tokens, *caches = loop.run([names.TOKENS, *presents],
                                   feeds | {names.MAX_STEPS: np.array(k, np.int64), names.FINISHED: done})
        assert 1 <= len(tokens) <= k <= steps
        return tokens, caches

    got = greedy_tokens(enc, run, sources, cfg.n_decoder_layers, cfg.bos_id, cfg.eos_id, 40, steps)
    with torch.no_grad():
        want = [greedy_decode(model, torch.tensor([s]), max_new_tokens=40)[0].tokens for s in sources]
    assert got == want
    assert len({tuple(w) for w in want}) > 1  # the sources decode differently
    assert len(runs) <= -(-max(len(w) + 1 for w in want) // steps)  # several tokens per run


@pytest.mark.parametrize("variant", [None, "fp16"])
def test_verification_catches_a_wrong_loop(tiny_bundle, model, sources, tmp_path, variant):
    """A multi-step file that chooses tokens differently fails verify_multistep, run on the CPU (the fp16
    variant's too, which the server only runs on CUDA)."""
    cfg = model.cfg
    encoder, decoder = (f"{g}.fp16.onnx" if variant else f"{g}.onnx" for g in ("encoder", "decoder"))
    proto = multistep_decoder(onnx.load(tiny_bundle / decoder), cfg.n_decoder_layers, cfg.eos_id)
    body = proto.graph.node[1].attribute[0].g
    argmax = next(n for n in body.node if n.op_type == "ArgMax")
    argmax.op_type = "ArgMin"
    for f in (encoder, decoder, names.weights_file(variant)):  # the graphs and their weights
        (tmp_path / f).write_bytes((tiny_bundle / f).read_bytes())
    onnx.save(proto, tmp_path / names.steps_file(decoder))
    with pytest.raises(ParityError, match="decodes source"):
        verify_multistep(tmp_path, decoder, encoder, sources, cfg.n_decoder_layers, cfg.bos_id, cfg.eos_id)
    # the untouched file passes
    n = verify_multistep(tiny_bundle, decoder, encoder, sources, cfg.n_decoder_layers, cfg.bos_id, cfg.eos_id)
    assert n == len(sources)


def test_only_inplace_decoders_are_composed(tiny_concat_bundle, model):
    """A concat decoder has no multi-step file and is refused by the composer."""
    manifest = json.loads((tiny_concat_bundle / names.BUNDLE_FILE).read_text())
    assert names.steps_file(names.DECODER_FILE) not in manifest["files"]
    with pytest.raises(ValueError, match="not an in-place decoder"):
        multistep_decoder(onnx.load(tiny_concat_bundle / names.DECODER_FILE), model.cfg.n_decoder_layers, 2)
