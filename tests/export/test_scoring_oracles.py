"""Score (service/runtime/decoding/scoring.py) against its oracles: the teacher-forced log-probs of the tiny
model in PyTorch, and of tiny imported Marian and M2M100 checkpoints in transformers (log_softmax of the
logits with decoder_input_ids = [decoder start, (forced language), target ids], labels = target ids + eos),
within 1e-5 in fp32, in both KV-cache layouts; the target ids are the checkpoint tokenizer's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from service.domain.types import ScoreOptions
from service.runtime.runner import Runner
from tests.support.hf_models import Shape, language_id, m2m100_dir, marian_dir, parallel

# float32 against float32 over different kernels: each log-prob within 1e-5 + 1e-5 * |reference| (a
# target far from the model's output has log-probs of several nats; a wrong token differs by whole units)
TOL = 1e-5


def scored(runner: Runner, sources: list[str], targets: list[str], options: ScoreOptions) -> list[list]:
    """The pairs' scores by the runner's default scorer, and by one whose decoder runs cover windows of two
    positions after a cache (the runs a long target takes)."""
    requests = runner.score_requests(sources, targets, options)
    return [runner.new_scorer().score(requests),
            runner.new_scorer(run_tokens=2 * len(requests)).score(requests)]


@pytest.fixture(scope="module")
def hf(tmp_path_factory) -> dict[str, tuple[Path, dict[str, Path]]]:
    """name -> (a tiny HF checkpoint directory, its bundles by KV-cache layout)."""
    import torch

    from export.build import BuildOptions
    from export.pretrained import import_pretrained

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("score-hf")
    dirs = {"marian": marian_dir(root / "marian", Shape(), seed=3),
            "m2m100": m2m100_dir(root / "m2m100", Shape(activation="relu"), seed=5)}
    layouts = (("inplace", {}), ("concat", {"attention": "fused"}))
    return {name: (d, {layout: import_pretrained(d, root / f"{name}-{layout}", BuildOptions(**o)).bundle_dir
                       for layout, o in layouts})
            for name, d in dirs.items()}


def hf_teacher_forced(model, source_ids: list[int], decoder_ids: list[int]) -> np.ndarray:
    """transformers' log_softmax(logits) (len(decoder_ids), V) of one pair."""
    import torch

    with torch.no_grad():
        out = model(input_ids=torch.tensor([source_ids]), decoder_input_ids=torch.tensor([decoder_ids]))
        return torch.log_softmax(out.logits.float(), dim=-1)[0].numpy()


PAIRS = parallel(6, 11)


@pytest.mark.parametrize("layout", ["inplace", "concat"])
def test_marian_scores_are_transformers_teacher_forced_log_probs(hf, layout):
    from transformers import MarianMTModel, MarianTokenizer

    path, bundles = hf["marian"]
    tok, model = MarianTokenizer.from_pretrained(path), MarianMTModel.from_pretrained(path).eval()
    runner = Runner(bundles[layout], providers=["CPUExecutionProvider"])
    sources, targets = [s for s, _ in PAIRS], [t for _, t in PAIRS]
    for got in scored(runner, sources, targets, ScoreOptions()):
        for s, t, r in zip(sources, targets, got, strict=True):
            src = tok(s).input_ids
            labels = tok(text_target=t).input_ids  # target ids + eos
            assert r.source_ids == src and r.target_ids == labels
            logp = hf_teacher_forced(model, src, [model.config.decoder_start_token_id, *labels[:-1]])
            want = logp[np.arange(len(labels)), labels]
            np.testing.assert_allclose(r.log_probs, want, rtol=TOL, atol=TOL)
            assert r.log_prob == pytest.approx(float(want.sum()), rel=TOL, abs=TOL * len(labels))


@pytest.mark.parametrize("layout", ["inplace", "concat"])
def test_m2m100_scores_skip_the_forced_language_token(hf, layout):
    from transformers import AutoTokenizer, M2M100ForConditionalGeneration

    path, bundles = hf["m2m100"]
    tok = AutoTokenizer.from_pretrained(path, src_lang="en", tgt_lang="de")
    model = M2M100ForConditionalGeneration.from_pretrained(path).eval()
    runner = Runner(bundles[layout], providers=["CPUExecutionProvider"])
    sources, targets = [s for s, _ in PAIRS], [t for _, t in PAIRS]
    de = language_id(tok, "de")
    for got in scored(runner, sources, targets, ScoreOptions(source_language="en", target_language="de")):
        for s, t, r in zip(sources, targets, got, strict=True):
            src = tok(s).input_ids  # [__en__, pieces, eos]
            labels = tok(text_target=t).input_ids  # [__de__, pieces, eos]
            assert labels[0] == de and r.source_ids == src and r.target_ids == labels[1:]
            logp = hf_teacher_forced(model, src, [model.config.decoder_start_token_id, *labels[:-1]])
            want = logp[np.arange(1, len(labels)), labels[1:]]  # the language token's own log-prob left out
            np.testing.assert_allclose(r.log_probs, want, rtol=TOL, atol=TOL)


def test_the_tiny_models_scores_are_pytorch_teacher_forced_log_probs(tiny_bundle, tiny_concat_bundle,
                                                                   tiny_model, texts):
    import torch

    cfg = tiny_model.cfg
    for bundle in (tiny_bundle, tiny_concat_bundle):
        runner = Runner(bundle, providers=["CPUExecutionProvider"])
        targets = [texts[-1 - i] for i in range(len(texts))]  # any target, not the model's output
        for r in runner.score(texts, targets):
            with torch.no_grad():
                src = torch.tensor([r.source_ids])
                mask = src.ne(cfg.pad_id).unsqueeze(1)
                tgt = torch.tensor([[cfg.bos_id, *r.target_ids[:-1]]])
                cross = tiny_model.cross_kv(tiny_model.encode(src, mask))
                logp = tiny_model.decode(tgt, cross, mask)[0][0].numpy()
            want = logp[np.arange(len(r.target_ids)), r.target_ids]
            np.testing.assert_allclose(r.log_probs, want, rtol=TOL, atol=TOL)
