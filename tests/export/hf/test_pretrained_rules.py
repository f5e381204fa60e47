"""OPUS-MT's generation rules carried by an imported bundle and applied by the runtime: pad never generated
(bad_words_ids [[pad]]), eos forced as the last token the length limit allows (forced_eos_token_id), log-probs
renormalized after both (renormalize_logits); served token- and score-identical to transformers' generate with
the checkpoint's own settings, greedy and beam (the bundle's beam search is generate's own:
service/runtime/decoding/pooled_beam.py; a beam hypothesis's score is its sequences_scores), in every batching
mode.

The tiny Marian checkpoint's pad has an output bias that makes its logit the largest at many steps,
so that without the rules generate (and the runtime) emit pad."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from export.build import BuildOptions
from export.hf.generation import generation_rules
from export.hf.mapping import UnsupportedModel, load_pretrained
from export.pretrained import import_pretrained
from export.pretrained import main as cli_main
from interface.generation import GenerationDefaults, GenerationSpec
from service.domain.types import BatchingMode, DecodeOptions, FinishedEvent, FinishReason
from service.runtime.model.bundle import load_bundle
from service.runtime.runner import Runner
from service.scheduling.scheduler import make_scheduler
from tests.support.bundle_search import right_pad
from tests.support.hf_generate import hf_generate
from tests.support.hf_models import Shape, marian_dir, parallel
from tests.support.pretrained import restated
from tests.support.scheduling import run

PAD_BIAS = 9.0  # above the best other logit at about a third of the steps
MAX_NEW = 20
LIMIT = 4  # a max_new_tokens most sources reach
RULE_KEYS = ("bad_words_ids", "forced_eos_token_id", "renormalize_logits")
NO_RULES = {"suppress_ids": [], "forced_eos_at_limit": False, "renormalize": False}


@pytest.fixture(scope="module")
def opus_dir(tmp_path_factory) -> Path:
    """A tiny Marian checkpoint with pad's bias high and OPUS-MT's generation_config.json."""
    import torch

    torch.set_num_threads(1)
    return marian_dir(tmp_path_factory.mktemp("hf-rules") / "opus", Shape(), seed=4, pad_bias=PAD_BIAS,
                      opus_rules=True)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory, opus_dir) -> dict[str, Path]:
    """"opus": the bundle export.pretrained writes; "plain": it without the rules; "unnormalized": it
    without renormalize; "unforced": it without eos at the limit."""
    root = tmp_path_factory.mktemp("rules-bundles")
    opus = import_pretrained(opus_dir, root / "opus", BuildOptions()).bundle_dir
    return {"opus": opus, "plain": restated(opus, root / "plain", **NO_RULES),
            "unnormalized": restated(opus, root / "unnormalized", renormalize=False),
            "unforced": restated(opus, root / "unforced", forced_eos_at_limit=False)}


@pytest.fixture(scope="module")
def hf(opus_dir):
    """(model, tokenizer, the checkpoint's rules as generate's settings)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    settings = json.loads((opus_dir / "generation_config.json").read_text(encoding="utf-8"))
    rules = {k: settings[k] for k in RULE_KEYS}
    model = AutoModelForSeq2SeqLM.from_pretrained(opus_dir).eval()
    return model, AutoTokenizer.from_pretrained(opus_dir), rules


@pytest.fixture(scope="module")
def sources(hf) -> list[list[int]]:
    """Source ids of the tokenizer (text -> ids parity is tested elsewhere)."""
    return [hf[1](s)["input_ids"] for s, _ in parallel(12, 7)]


def served(bundle: Path, sources, beam: int, max_new: int
           ) -> list[tuple[list[int], float, FinishReason, float]]:
    """(tokens, score, finish reason, log_prob) of the best hypothesis of each source, served by the runner
    (greedy: the score is the log_prob)."""
    runner = Runner(bundle, providers=["CPUExecutionProvider"])
    hyps = runner.translate(sources, DecodeOptions(beam_size=beam, max_output_tokens=max_new))
    return [(h[0].tokens, h[0].score, h[0].finish_reason, h[0].log_prob) for h in hyps]


def hf_scored_search(model, sources, beam: int, max_new: int, rules=None) -> list[tuple[list[int], float]]:
    """generate's best hypothesis of each source and its score (beam search: sequences_scores; greedy: the
    processed log-probs of its tokens summed)."""
    return [(g[0].tokens, g[0].score) for g in hf_generate(model, sources, beam, max_new, rules)]


def assert_same(ours, theirs) -> None:
    """Our (tokens, score, ...) equal generate's (tokens, score)."""
    assert [o[0] for o in ours] == [t for t, _ in theirs]
    for o, (_, score) in zip(ours, theirs, strict=True):
        assert o[1] == pytest.approx(score, abs=2e-4)


def test_the_manifest_states_the_checkpoints_rules(bundles, hf):
    _, tok, rules = hf
    pad, eos = tok.pad_token_id, tok.eos_token_id
    manifest = json.loads((bundles["opus"] / "bundle.json").read_text(encoding="utf-8"))
    assert manifest["generation"] == {"decoder_start_id": pad, "source_suffix": [eos], "suppress_ids": [pad],
                                      "forced_eos_at_limit": True, "renormalize": True,
                                      "beam_search": "transformers", "early_stopping": False,
                                      "begin_suppress_ids": [],
                                      "defaults": {"num_beams": 4, "max_length": 64}}
    assert rules == {"bad_words_ids": [[pad]], "forced_eos_token_id": eos, "renormalize_logits": True}
    assert manifest["pretrained"]["generation_defaults"] == {**rules, "num_beams": 4, "max_length": 64}
    defaults = GenerationDefaults(num_beams=4, max_length=64)
    assert load_bundle(bundles["opus"]).generation == GenerationSpec(pad, (eos,), (pad,), True, True,
                                                                     "transformers", defaults=defaults)
    assert manifest["verification"]["greedy_identical"] == 8  # verified with the rules


@pytest.mark.parametrize("beam", [1, 4])
def test_without_the_rules_pad_wins(bundles, hf, sources, beam):
    """What the test below would see if suppression did nothing: generate and the runtime emit pad."""
    model, tok, _ = hf
    theirs = hf_scored_search(model, sources, beam, MAX_NEW)
    ours = served(bundles["plain"], sources, beam, MAX_NEW)
    assert_same(ours, theirs)
    assert sum(tok.pad_token_id in t for t, _ in theirs) >= 6


@pytest.mark.parametrize("beam", [1, 4])
def test_served_as_generate_with_the_checkpoints_rules(bundles, hf, sources, beam):
    model, tok, rules = hf
    theirs = hf_scored_search(model, sources, beam, MAX_NEW, rules)
    ours = served(bundles["opus"], sources, beam, MAX_NEW)
    assert_same(ours, theirs)
    assert not any(tok.pad_token_id in o[0] for o in ours)
    assert sum(o[2] == FinishReason.EOS for o in ours) >= 6  # most stop at their own eos
    plain = served(bundles["plain"], sources, beam, MAX_NEW)
    assert sum(a[0] != b[0] for a, b in zip(ours, plain, strict=True)) >= 6  # the rules matter


@pytest.mark.parametrize("beam", [1, 4])
def test_eos_is_forced_at_the_limit(bundles, hf, sources, beam):
    model, _, rules = hf
    theirs = hf_scored_search(model, sources, beam, LIMIT, rules)
    ours = served(bundles["opus"], sources, beam, LIMIT)
    assert_same(ours, theirs)
    limited = [len(o[0]) == LIMIT - 1 and o[2] == FinishReason.LENGTH for o in ours]  # the eos was forced
    assert sum(limited) >= 6
    unforced = served(bundles["unforced"], sources, beam, LIMIT)
    assert all(len(u[0]) == LIMIT for u, hit in zip(unforced, limited, strict=True) if hit)


def test_renormalization_changes_beam_scores(bundles, hf, sources):
    model, _, rules = hf
    theirs = hf_scored_search(model, sources, 4, MAX_NEW, {**rules, "renormalize_logits": False})
    ours = served(bundles["unnormalized"], sources, 4, MAX_NEW)
    assert_same(ours, theirs)
    renormalized = served(bundles["opus"], sources, 4, MAX_NEW)  # pad's probability given back to the others
    assert sum(b[3] > a[3] + 0.01 for a, b in zip(ours, renormalized, strict=True)) >= 10  # log-probs


def test_rows_joining_a_batch_at_different_steps_follow_their_own_limits(bundles, hf, sources):
    """Requests of different beams and limits joining one DecodeBatch at different steps (what continuous
    batching does): each request's rows get eos at its own limit, and every row is suppressed."""
    model, _, rules = hf
    runner = Runner(bundles["opus"], providers=["CPUExecutionProvider"])
    plan = [(0, 1, LIMIT), (0, 3, MAX_NEW), (1, 1, MAX_NEW), (2, 2, LIMIT + 1), (2, 1, 2), (4, 4, LIMIT)]
    requests = [runner.make_request(sources[i], DecodeOptions(beam_size=b, max_output_tokens=n))
                for i, (_, b, n) in enumerate(plan)]
    batch, results = runner.new_batch(16), {}
    for step in range(MAX_NEW + 5):
        batch.add([r for r, (at, _, _) in zip(requests, plan, strict=True) if at == step])
        results |= {e.request.id: e.hypotheses[0] for e in batch.step() if isinstance(e, FinishedEvent)}
    assert len(results) == len(plan)
    for i, (request, (_, beam, limit)) in enumerate(zip(requests, plan, strict=True)):
        ((tokens, score),) = hf_scored_search(model, [sources[i]], beam, limit, rules)
        hyp = results[request.id]
        assert hyp.tokens == tokens and hyp.score == pytest.approx(score, abs=2e-4)


@pytest.mark.parametrize("mode", [m.value for m in BatchingMode])
def test_every_batching_mode_applies_the_rules(bundles, hf, mode):
    model, tok, rules = hf
    texts = [s for s, _ in parallel(6, 8)]
    opts = [DecodeOptions(beam_size=1 + 2 * (i % 2), max_output_tokens=LIMIT if i < 3 else MAX_NEW)
            for i in range(len(texts))]
    runner = Runner(bundles["opus"], providers=["CPUExecutionProvider"])

    async def main():
        s = make_scheduler(mode, runner, max_batch_size=8, max_queue_delay_ms=2.0)
        await s.start()
        got = await asyncio.gather(*(s.submit([t], o) for t, o in zip(texts, opts, strict=True)))
        await s.drain(5)
        return [r.hypotheses[0] for (r,) in got]

    for text, o, hyp in zip(texts, opts, run(main()), strict=True):
        ((tokens, score),) = hf_scored_search(model, [tok(text)["input_ids"]], o.beam_size,
                                              o.max_output_tokens,
                                              rules)
        assert hyp.tokens == tokens and hyp.score == pytest.approx(score, abs=2e-4)


# ----- what the exporter verifies, writes and refuses ------------------------------------------------
def test_verification_decodes_under_the_rules(bundles, opus_dir, sources):
    """export/verify/base.py's greedy decoders (ONNX and PyTorch) apply the rules the runtime applies."""
    import torch

    from export.verify.base import greedy_onnx, open_session
    from model.decoding import greedy_decode

    model = load_pretrained(opus_dir)[0]
    cfg = model.cfg
    enc, dec = (open_session(bundles["opus"] / f) for f in ("encoder.onnx", "decoder.onnx"))
    src = right_pad(sources, cfg.pad_id)
    opus, plain = load_bundle(bundles["opus"]).generation, GenerationSpec()
    for name, rules, limit in (("opus", opus, MAX_NEW), ("opus", opus, LIMIT), ("plain", plain, MAX_NEW)):
        suppress, at_limit = rules.suppress_ids, rules.forced_eos_at_limit
        ours = greedy_onnx(enc, dec, src, cfg.start_id, cfg.eos_id, cfg.pad_id, limit, suppress, at_limit)
        ref = [h.tokens for h in greedy_decode(model, torch.from_numpy(src), limit, suppress, at_limit)]
        assert ours == ref == [o[0] for o in served(bundles[name], sources, 1, limit)]
        assert any(cfg.pad_id in t for t in ours) == (name == "plain")


def test_generation_rules_of_transformers_settings(opus_dir):
    cfg = load_pretrained(opus_dir)[0].cfg
    pad, eos = cfg.pad_id, cfg.eos_id
    assert generation_rules({}, cfg) == NO_RULES
    both = {"bad_words_ids": [[pad], [eos], [5]], "suppress_tokens": [7, 5], "forced_eos_token_id": [eos]}
    assert generation_rules(both, cfg) == {"suppress_ids": [pad, 5, 7], "forced_eos_at_limit": True,  # [eos]
                                           "renormalize": False}  # dropped, as NoBadWordsLogitsProcessor does
    refused = [({"bad_words_ids": [[pad], [5, 6]]}, r"bad_words_ids holds \[5, 6\], not a single token"),
               ({"suppress_tokens": [eos]}, "suppress_tokens holds the eos id"),
               ({"forced_eos_token_id": pad}, f"forced_eos_token_id {pad} is not the eos id {eos}"),
               ({"bad_words_ids": [[cfg.vocab_size]]}, "not an id of the model's vocabulary")]
    for settings, message in refused:
        with pytest.raises(UnsupportedModel, match=message):
            generation_rules(settings, cfg)


def test_a_multi_token_bad_word_is_refused(opus_dir, tmp_path, capsys):
    model_dir = shutil.copytree(opus_dir, tmp_path / "hf")
    path = model_dir / "generation_config.json"
    settings = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**settings, "bad_words_ids": [[settings["pad_token_id"]], [5, 6]]}))
    assert cli_main(["--model", str(model_dir), "--out", str(tmp_path / "b")]) == 2
    assert "bad_words_ids holds [5, 6], not a single token" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
