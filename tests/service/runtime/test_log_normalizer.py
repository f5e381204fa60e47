"""The backends' log-normalizer (service/runtime/cache/backends.py): `decode` returns a 4th value, the
logsumexp of the step's logits (float32 (n_rows, new_len)), equal to PyTorch's for the rows the runner
decodes, in both KV-cache layouts and with both backends; a bundle whose decoder was exported before that
output loads, decodes exactly as before, and gets None."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from export.variants.cuda_form import drop_unused
from interface.names import DECODER_FILE, INPUT_IDS, LOG_NORMALIZER
from model.transformer import padding_mask
from service.runtime.model.bundle import file_sha256
from service.runtime.runner import Runner
from tests.support import tiny

CPU = ["CPUExecutionProvider"]


def spy(monkeypatch, runner: Runner) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """The list that collects (input ids, last log-probs, log-normalizer) of each decoder run of runner
    (copies: the in-place host backend returns buffers its next run overwrites)."""
    seen = []
    run = runner.backend.decode

    def decode(feeds, past, inplace=False):
        out = run(feeds, past, inplace)
        assert len(out) == 4
        lse = out[3]
        seen.append((np.array(feeds[INPUT_IDS]), np.array(out[0][:, -1], np.float32),
                     None if lse is None else np.array(lse)))
        return out

    monkeypatch.setattr(runner.backend, "decode", decode)
    return seen


@torch.inference_mode()
def torch_logits(model, source: list[int], prefix: list[int]) -> np.ndarray:
    """PyTorch's logits (len(prefix), V) after each decoder input: the generator's projection, before
    its log-softmax (read by a forward hook)."""
    seen = []
    hook = model.generator.proj.register_forward_hook(lambda _module, _inputs, out: seen.append(out))
    try:
        src = torch.tensor([source])
        mask = padding_mask(src, model.cfg.pad_id)
        model.decode(torch.tensor([prefix]), model.cross_kv(model.encode(src, mask)), mask)
    finally:
        hook.remove()
    return seen[0][0].double().numpy()


def logsumexp(x: np.ndarray) -> np.ndarray:
    """logsumexp over the last axis, in float64."""
    top = x.max(axis=-1, keepdims=True)
    return (top + np.log(np.exp(x - top).sum(axis=-1, keepdims=True)))[..., 0]


def test_decode_returns_the_logsumexp_of_pytorchs_logits(layout_runner, tiny_model, texts, monkeypatch):
    assert layout_runner.backend.has_normalizer
    for text in texts[:3]:  # one row per run: its decoder inputs are the greedy prefix
        seen = spy(monkeypatch, layout_runner)
        (hyp,) = layout_runner.translate([text])[0]
        assert len(seen) in (len(hyp.tokens), len(hyp.tokens) + 1)  # + the step that chose eos
        assert all(ids.shape == (1, 1) and lse.shape == (1, 1) and lse.dtype == np.float32
                   for ids, _, lse in seen)
        prefix = [int(ids[0, 0]) for ids, _, _ in seen]
        logits = torch_logits(tiny_model, layout_runner.make_request(text).source, prefix)
        lse = np.array([float(lse[0, 0]) for _, _, lse in seen])
        np.testing.assert_allclose(lse, logsumexp(logits), atol=1e-4)
        logp = np.stack([row[0] for _, row, _ in seen])
        np.testing.assert_allclose(logp + lse[:, None], logits, atol=2e-4)  # the logits back


def apart(values: dict[str, float], n: int, gap: float) -> list[str]:
    """The first n keys whose values lie at least `gap` from every one chosen before."""
    chosen: list[str] = []
    for key, value in values.items():
        if all(abs(value - values[c]) >= gap for c in chosen):
            chosen.append(key)
    return chosen[:n]


def test_each_row_of_a_batch_gets_its_own_normalizer(layout_runner, tiny_model, monkeypatch):
    start = layout_runner.spec.decoder_start
    first = {text: logsumexp(torch_logits(tiny_model, layout_runner.make_request(text).source, [start]))[0]
             for text, _ in tiny.valid_pairs()}
    texts = apart(first, 5, gap=1e-2)  # rows told apart far beyond the tolerance below
    assert len(texts) == 5, f"wanted: 5 sources whose first normalizers differ by 0.01, got {len(texts)}"
    seen = spy(monkeypatch, layout_runner)
    layout_runner.translate(texts)
    assert all(lse.shape == (len(ids), 1) for ids, _, lse in seen)
    ids, _, lse = seen[0]  # the first run: one row per text, each from the start token
    assert len(ids) == len(texts) and set(ids.ravel().tolist()) == {start}
    want = [first[t] for t in texts]
    np.testing.assert_allclose(sorted(lse.ravel()), sorted(want), atol=1e-4)  # whatever the rows' order


def without_normalizer(bundle: Path, out: Path) -> Path:
    """A copy of bundle whose decoder.onnx lacks log_normalizer (and the node computing it), as exported
    before that output existed; bundle.json's hash of it updated."""
    shutil.copytree(bundle, out)
    path = out / DECODER_FILE
    proto = onnx.load(str(path), load_external_data=False)  # the weights stay in weights.data
    outputs = [o for o in proto.graph.output if o.name != LOG_NORMALIZER]
    assert len(outputs) == len(proto.graph.output) - 1
    del proto.graph.output[:]
    proto.graph.output.extend(outputs)
    drop_unused(proto)
    assert "ReduceLogSumExp" not in {node.op_type for node in proto.graph.node}
    onnx.save(proto, str(path))
    manifest = json.loads((out / "bundle.json").read_text())
    manifest["files"][DECODER_FILE] = {"sha256": file_sha256(path), "bytes": path.stat().st_size}
    (out / "bundle.json").write_text(json.dumps(manifest))
    return out


@pytest.fixture(scope="module")
def old_bundles(tiny_bundle, tiny_concat_bundle, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """layout -> (the tiny bundle, its copy without the log-normalizer)."""
    root = tmp_path_factory.mktemp("before-normalizer")
    return {layout: (bundle, without_normalizer(bundle, root / layout))
            for layout, bundle in (("inplace", tiny_bundle), ("concat", tiny_concat_bundle))}


@pytest.mark.parametrize("layout", ["inplace", "concat"])
@pytest.mark.parametrize("bound", [False, True])
def test_a_bundle_without_the_output_decodes_as_before_and_gets_none(old_bundles, texts, layout, bound,
                                                                     monkeypatch):
    new, old = (Runner(b, providers=CPU, io_binding=bound) for b in old_bundles[layout])
    assert new.backend.has_normalizer and not old.backend.has_normalizer
    assert type(old.backend).__name__ == ("IoBindingBackend" if bound else "HostBackend")
    seen = spy(monkeypatch, old)
    before = old.translate(texts)
    assert seen and all(lse is None for _, _, lse in seen)
    after = new.translate(texts)
    for a, b in zip(before, after, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.log_prob for h in a] == pytest.approx([h.log_prob for h in b], abs=1e-6)
