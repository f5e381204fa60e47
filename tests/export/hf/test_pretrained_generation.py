"""An imported checkpoint decodes as its checkpoint says: the bundle carries the generation config's defaults
(OPUS-MT: num_beams 4,
 max_length) and transformers' own beam search (service/runtime/decoding/pooled_beam.py), so
that a request that leaves the options unset gets what transformers' pipeline / generate gives: the same
tokens, and generate's sequences_scores as the hypothesis's score. The oracle is always transformers.

The tiny Marian checkpoint has OPUS-MT's generation_config.json (tests/support/hf_models.py) and pad's
output bias high, so that the rules matter too (tests/export/hf/test_pretrained_rules.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from export.build import BuildOptions
from export.hf.generation import generation_search
from export.hf.mapping import UnsupportedModel, load_pretrained
from export.pretrained import import_pretrained
from interface.generation import GenerationDefaults, parse_generation
from service.domain.errors import BundleError
from service.domain.types import BatchingMode, DecodeOptions, FinishReason, ModelDefaults, ResolvedOptions
from service.runtime.decoding.pooled_beam import PooledBeamSearch
from service.runtime.runner import Runner
from service.scheduling.scheduler import make_scheduler
from tests.support.hf_generate import SyntheticScores, hf_generate, synthetic_logp
from tests.support.hf_models import Shape, language_id, marian_dir, parallel
from tests.support.pretrained import restated
from tests.support.scheduling import run

PAD_BIAS = 9.0
MAX_LENGTH = 64  # the checkpoint's max_length: our max_new_tokens 63
RULE_KEYS = ("bad_words_ids", "forced_eos_token_id", "renormalize_logits")
SCORE_TOL = 1e-4
EARLY = [False, True, "never"]  # transformers' early_stopping values


@pytest.fixture(scope="module")
def opus_dir(tmp_path_factory) -> Path:
    """A tiny Marian checkpoint with OPUS-MT's generation_config.json (num_beams 4, max_length 64)."""
    import torch

    torch.set_num_threads(1)
    return marian_dir(tmp_path_factory.mktemp("hf-gen") / "opus", Shape(), seed=4, pad_bias=PAD_BIAS,
                      opus_rules=True)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory, opus_dir) -> dict[str, Path]:
    """"opus": the bundle export.pretrained writes; the others restate its search."""
    root = tmp_path_factory.mktemp("gen-bundles")
    opus = import_pretrained(opus_dir, root / "opus", BuildOptions()).bundle_dir
    return {"opus": opus, "gnmt": restated(opus, root / "gnmt", beam_search="gnmt"),
            **{f"early-{e}": restated(opus, root / f"early-{e}", early_stopping=e) for e in (True, "never")}}


@pytest.fixture(scope="module")
def hf(opus_dir):
    """(model, tokenizer, the checkpoint's rules as generate's settings)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    settings = json.loads((opus_dir / "generation_config.json").read_text(encoding="utf-8"))
    model = AutoModelForSeq2SeqLM.from_pretrained(opus_dir).eval()
    return model, AutoTokenizer.from_pretrained(opus_dir), {k: settings[k] for k in RULE_KEYS}


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [s for s, _ in parallel(24, 7)]


def runner_of(bundle: Path) -> Runner:
    return Runner(bundle, providers=["CPUExecutionProvider"])


def assert_generated(served, theirs) -> None:
    """Our best hypotheses (one list per source) equal generate's: tokens, and score within SCORE_TOL."""
    assert [h[0].tokens for h in served] == [g[0].tokens for g in theirs]
    for hyps, gen in zip(served, theirs, strict=True):
        for h, g in zip(hyps, gen, strict=True):
            assert h.tokens == g.tokens
            assert h.score == pytest.approx(g.score, abs=SCORE_TOL)
            assert h.log_prob == pytest.approx(g.log_prob, rel=SCORE_TOL, abs=10 * SCORE_TOL)


def after(served, n: int):
    """Served hypotheses without their first n tokens (a prompt)."""
    return [[dataclasses.replace(h, tokens=h.tokens[n:]) for h in hyps] for hyps in served]


def test_the_bundle_states_the_checkpoints_search_and_defaults(bundles, hf):
    _, tok, _ = hf
    manifest = json.loads((bundles["opus"] / "bundle.json").read_text(encoding="utf-8"))
    gen = manifest["generation"]
    assert (gen["beam_search"], gen["early_stopping"], gen["begin_suppress_ids"]) == ("transformers", False,
                                                                                       [])
    assert gen["defaults"] == {"num_beams": 4, "max_length": MAX_LENGTH}
    assert manifest["pretrained"]["generation_defaults"]["num_beams"] == 4  # the record stays
    runner = runner_of(bundles["opus"])
    assert runner.defaults == ModelDefaults(beam_size=4, max_output_tokens=MAX_LENGTH - 1)
    assert runner.spec.beam_search == "transformers"
    resolved = runner.limits().resolve(DecodeOptions())  # what GetModelInfo reports as the defaults
    assert (resolved.beam_size, resolved.max_output_tokens, resolved.length_penalty) == (4, MAX_LENGTH - 1,
                                                                                         None)
    assert runner.limits(max_beam=2).resolve(DecodeOptions()).beam_size == 2  # --max-beam bounds it
    assert runner.resolve(DecodeOptions(beam_size=1, max_output_tokens=5)).beam_size == 1  # a request's wins


def test_default_options_decode_as_generate_with_the_checkpoints_config(bundles, hf, texts):
    """DecodeOptions() on the imported bundle == model.generate(**tok(texts)) with the checkpoint's own
    generation config, decoded (what transformers 4's translation pipeline did; 5 removed it)."""
    import torch

    model, tok, _ = hf
    runner = runner_of(bundles["opus"])
    served = runner.translate(texts, DecodeOptions())
    with torch.no_grad():
        out = model.generate(**tok(texts, return_tensors="pt", padding=True))
    assert [h[0].text for h in served] == tok.batch_decode(out, skip_special_tokens=True)
    sources = [tok(t)["input_ids"] for t in texts]
    theirs = hf_generate(model, sources, 4, inherit=True)  # the checkpoint's config: beam 4, its rules
    assert_generated(served, theirs)
    assert sum(h[0].finish_reason == FinishReason.EOS for h in served) >= 20
    greedy = runner.translate(texts, DecodeOptions(beam_size=1))
    assert sum(a[0].tokens != b[0].tokens for a, b in zip(served, greedy, strict=True)) >= 5  # beam 4 it was
    gnmt = runner_of(bundles["gnmt"]).translate(texts, DecodeOptions())  # our own search finds others
    assert sum(a[0].tokens != b[0].tokens for a, b in zip(served, gnmt, strict=True)) >= 1


@pytest.mark.parametrize(("bundle", "beam", "alpha", "early"), [
    ("opus", 2, None, False), ("opus", 4, 2.0, False), ("early-True", 4, None, True),
    ("early-True", 2, 2.0, True), ("early-never", 4, None, "never"), ("early-never", 4, 2.0, "never"),
    ("early-never", 3, 0.0, "never"), ("opus", 5, 0.5, False)])
def test_length_penalty_and_early_stopping_as_generate(bundles, hf, texts, bundle, beam, alpha, early):
    model, tok, rules = hf
    runner = runner_of(bundles[bundle])
    served = runner.translate(texts, DecodeOptions(beam_size=beam, length_penalty=alpha, n_best=2))
    lp = {} if alpha is None else {"length_penalty": alpha}
    theirs = hf_generate(model, [tok(t)["input_ids"] for t in texts], beam, MAX_LENGTH - 1, rules, n_best=2,
                         early_stopping=early, **lp)
    assert_generated(served, theirs)
    if early is not False and alpha != 0.0:  # the setting matters here: False would find others
        plain = runner_of(bundles["opus"]).translate(texts, DecodeOptions(beam_size=beam,
                                                                          length_penalty=alpha))
        assert any(a[0].tokens != b[0].tokens for a, b in zip(served, plain, strict=True))


def test_every_default_of_a_generation_config_as_generate(bundles, hf, texts, tmp_path):
    """A checkpoint config's num_beams, max_length, min_length, no_repeat_ngram_size, repetition_penalty
    and length_penalty as defaults: DecodeOptions() decodes as generate with those settings (min_length
    and max_length count the decoder start there); a request's own values win; a default that is no valid
    option is refused when the bundle loads."""
    model, tok, rules = hf
    given = {"num_beams": 3, "max_length": 12, "min_length": 6, "no_repeat_ngram_size": 2,
             "repetition_penalty": 1.4, "length_penalty": 0.5}
    runner = runner_of(restated(bundles["opus"], tmp_path / "config", defaults=given))
    assert runner.defaults == ModelDefaults(3, 11, 0.5, 5, 2, 1.4)
    served = runner.translate(texts, DecodeOptions())
    theirs = hf_generate(model, [tok(t)["input_ids"] for t in texts], 3, None, rules, **given)
    assert_generated(served, theirs)
    assert all(len(h[0].tokens) >= 5 for h in served)
    plain = runner.translate(texts, DecodeOptions(beam_size=3, max_output_tokens=11, length_penalty=0.5,
                                                  min_output_tokens=0,
                                                  no_repeat_ngram_size=0, repetition_penalty=1.0))
    assert sum(a[0].tokens != b[0].tokens for a, b in zip(served, plain, strict=True)) >= 5  # they matter
    assert plain == runner_of(bundles["opus"]).translate(texts, DecodeOptions(beam_size=3,
                                                                              max_output_tokens=11,
                                                                              length_penalty=0.5))
    bad = restated(bundles["opus"], tmp_path / "bad", defaults={"no_repeat_ngram_size": 99})
    with pytest.raises(BundleError, match="generation defaults .* not valid options: no_repeat_ngram_size"):
        runner_of(bad)


@pytest.mark.parametrize("beam", [2, 4])
def test_the_length_limit_forces_eos_as_generate(bundles, hf, texts, beam):
    model, tok, rules = hf
    served = runner_of(bundles["opus"]).translate(texts, DecodeOptions(beam_size=beam, max_output_tokens=4))
    theirs = hf_generate(model, [tok(t)["input_ids"] for t in texts], beam, 4, rules)
    assert_generated(served, theirs)
    limited = [h[0].finish_reason == FinishReason.LENGTH for h in served]
    assert sum(limited) >= 5
    assert all(len(h[0].tokens) == 3 for h, hit in zip(served, limited, strict=True) if hit)  # eos forced 4th


def test_a_target_prefix_is_generates_decoder_prompt(bundles, hf, texts):
    """A target prefix is forced, unscored and outside generated_len, as decoder_input_ids are to generate."""
    model, tok, rules = hf
    runner = runner_of(bundles["opus"])
    prefix = tok(text_target="die katze")["input_ids"][:-1]
    served = runner.translate(texts, DecodeOptions(target_prefix=prefix, max_output_tokens=len(prefix) + 20))
    theirs = hf_generate(model, [tok(t)["input_ids"] for t in texts], 4, 20, rules, prompt=prefix)
    assert all(h[0].tokens[: len(prefix)] == prefix for h in served)
    assert_generated(after(served, len(prefix)), theirs)


@pytest.mark.parametrize("mode", [m.value for m in BatchingMode])
def test_the_scheduler_serves_the_checkpoints_defaults(bundles, hf, texts, mode):
    """Requests with their options unset, alone or beside greedy ones, through every batching mode."""
    model, tok, _ = hf
    runner = runner_of(bundles["opus"])
    opts = [DecodeOptions(beam_size=1) if i % 3 == 2 else DecodeOptions() for i in range(len(texts))]

    async def main():
        s = make_scheduler(mode, runner, max_batch_size=12, max_queue_delay_ms=2.0)
        assert s.limits.resolve(DecodeOptions()).beam_size == 4  # GetModelInfo's defaults read these limits
        await s.start()
        got = await asyncio.gather(*(s.submit([t], o) for t, o in zip(texts, opts, strict=True)))
        await s.drain(5)
        return [r.hypotheses for (r,) in got]

    served = run(main())
    sources = [tok(t)["input_ids"] for t in texts]
    for beam in (4, 1):
        picked = [i for i, o in enumerate(opts) if (o.beam_size or 4) == beam]
        theirs = hf_generate(model, [sources[i] for i in picked], beam, inherit=True)
        assert [served[i][0].tokens for i in picked] == [g[0].tokens for g in theirs]
        if beam > 1:
            assert_generated([served[i] for i in picked], theirs)


def test_a_many_to_many_model_searches_as_generate(hf_bundles, hf_dirs):
    """M2M100: the target language forced first (ForcedBOSTokenLogitsProcessor, generated), beam 4; with a
    target prefix the language and the prefix are generate's decoder_input_ids."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(hf_dirs["m2m100"]).eval()
    tok = AutoTokenizer.from_pretrained(hf_dirs["m2m100"])
    runner = runner_of(hf_bundles["m2m100"])
    assert runner.spec.beam_search == "transformers" and runner.defaults == ModelDefaults()  # no config
    texts = [s for s, _ in parallel(16, 5)]
    de = language_id(tok, "de")
    langs = {"source_language": "en", "target_language": "de"}
    sources = [tok(t)["input_ids"] for t in texts]
    for beam, alpha in ((4, None), (2, 2.0)):
        options = DecodeOptions(beam_size=beam, length_penalty=alpha, max_output_tokens=20, **langs)
        served = runner.translate(texts, options)
        lp = {} if alpha is None else {"length_penalty": alpha}
        theirs = hf_generate(model, sources, beam, 20, forced_bos_token_id=de, **lp)
        assert all(h[0].tokens[0] == de for h in served)
        assert_generated(served, theirs)  # the language is generate's first generated token too
    prefix = [de, *tok(text_target="die katze")["input_ids"][1:-1]]  # the target language, then pieces
    served = runner.translate(texts, DecodeOptions(beam_size=3, max_output_tokens=20,
                                                   target_prefix=prefix[1:], **langs))
    theirs = hf_generate(model, sources, 3, 20 - len(prefix), prompt=prefix)
    assert_generated(after(served, len(prefix)), theirs)


def test_sources_are_encoded_as_marian_tokenizer_without_punctuation_normalization(bundles, hf):
    """transformers 5's MarianTokenizer sets up sacremoses' MosesPunctNormalizer when it is installed but
    never applies it when it encodes (its `normalize` is called by neither `__call__` nor `_tokenize`), so
    neither does the runtime: curly quotes, guillemets and non-breaking spaces reach SentencePiece as they
    are, and the served translations of such texts are generate's."""
    import torch

    model, tok, _ = hf
    texts = ["the cat \u201csaw\u201d anna", "\u00ab the big dog \u00bb", "we\u00a0eat bread",
             "it\u2019s the day\u2026", "the cat \u2013 a dog"]
    runner = runner_of(bundles["opus"])
    ids = [tok(t)["input_ids"] for t in texts]
    assert runner.encode_texts(texts) == ids
    assert sum(tok.unk_token_id in i for i in ids) >= 3  # what a normalizer would have changed
    with torch.no_grad():
        out = model.generate(**tok(texts, return_tensors="pt", padding=True))
    served = runner.translate(texts, DecodeOptions())
    assert [h[0].text for h in served] == tok.batch_decode(out, skip_special_tokens=True)


# ----- the search alone, on a synthetic distribution -------------------------------------------------
@pytest.mark.parametrize("early", [False, True, "never"])
@pytest.mark.parametrize("alpha", [0.0, 0.7, 1.0, 2.5])
def test_the_search_alone_is_generates_beam_search(hf, early, alpha):
    """Our search and generate's beam search on one synthetic next-token distribution (a function of the
    history, eos likely): the n best hypotheses, tokens and scores, over beams, lengths and prompts."""
    model, tok, _ = hf
    cfg = model.config
    vocab, eos, start = cfg.vocab_size, cfg.eos_token_id, cfg.decoder_start_token_id
    rng = np.random.default_rng(int(alpha * 10) + 100 * EARLY.index(early))
    differs = 0
    for case in range(16):
        beam, max_new = int(rng.integers(2, 6)), int(rng.integers(2, 20))
        n_best, boost = int(rng.integers(1, beam + 1)), float(rng.uniform(3.0, 6.0))  # eos often likely
        prompt = [int(t) for t in rng.integers(2, vocab - 1, int(rng.integers(0, 3)))] if case % 3 else []
        seed = 1000 * case + int(alpha * 10)
        theirs = hf_generate(model, [tok("the cat")["input_ids"]], beam, max_new, prompt=prompt,
                             n_best=n_best, length_penalty=alpha, early_stopping=early,
                             processors=[SyntheticScores(vocab, eos, seed, boost)])[0]
        options = ResolvedOptions(beam_size=beam, n_best=n_best, length_penalty=alpha,
                                  max_output_tokens=len(prompt) + max_new, target_prefix=tuple(prompt))
        search = PooledBeamSearch(options, 1, eos, model.config.pad_token_id, prompt=len(prompt),
                                  early_stopping=early)
        rows = [[start] for _ in range(beam)]
        while not search.done:
            logp = np.stack([synthetic_logp(r, vocab, eos, seed, boost) for r in rows])
            parent, word = search.advance(logp, None)
            rows = [rows[p] + [int(w)] for p, w in zip(parent.tolist(), word.tolist(), strict=True)]
        ours = search.results()
        assert [h.tokens[len(prompt):] for h in ours] == [g.tokens for g in theirs], case
        for h, g in zip(ours, theirs, strict=True):
            assert h.score == pytest.approx(g.score, abs=SCORE_TOL), case
            assert h.finish_reason == (FinishReason.EOS if g.ended else FinishReason.LENGTH)
        for other in ({"length_penalty": alpha + 1.0, "early_stopping": early},
                      {"length_penalty": alpha, "early_stopping": EARLY[(EARLY.index(early) + 1) % 3]}):
            again = hf_generate(model, [tok("the cat")["input_ids"]], beam, max_new, prompt=prompt,
                                n_best=n_best, processors=[SyntheticScores(vocab, eos, seed, boost)], **other)
            differs += [g.tokens for g in again[0]] != [g.tokens for g in theirs]
    assert differs >= 3  # the settings matter on this distribution


# ----- what the exporter writes and refuses ----------------------------------------------------------
def test_generation_search_of_transformers_settings(opus_dir):
    cfg = load_pretrained(opus_dir)[0].cfg
    assert generation_search({}, cfg) == {"beam_search": "transformers", "early_stopping": False,
                                          "begin_suppress_ids": [], "defaults": {}}
    settings = {"num_beams": 5, "max_new_tokens": 100, "max_length": 20, "min_length": 3,
                "length_penalty": 0.6, "no_repeat_ngram_size": 3, "repetition_penalty": 1.2,
                "early_stopping": "never", "begin_suppress_tokens": [cfg.eos_id, 5], "temperature": 0.7}
    got = generation_search(settings, cfg)
    assert got == {"beam_search": "transformers", "early_stopping": "never",
                   "begin_suppress_ids": [cfg.eos_id, 5],
                   "defaults": {"num_beams": 5, "max_length": 101, "min_length": 3, "length_penalty": 0.6,
                                "no_repeat_ngram_size": 3, "repetition_penalty": 1.2}}
    defaults = parse_generation(got).defaults
    assert defaults == GenerationDefaults(5, 101, 3, 3, 0.6, 1.2)
    assert (defaults.max_new_tokens, defaults.min_new_tokens) == (100, 2)  # the decoder start not counted
    refused = [({"early_stopping": "sometimes"}, "early_stopping 'sometimes'"),
               ({"length_penalty": -1.0}, "length_penalty' must be a finite number >= 0"),
               ({"num_beams": 0}, "num_beams' must be an integer >= 1"),
               ({"begin_suppress_tokens": [cfg.vocab_size]}, "not an id of the model's vocabulary")]
    for bad, message in refused:
        with pytest.raises(UnsupportedModel, match=message):
            generation_search(bad, cfg)


def test_bundles_without_the_keys_keep_our_search(bundles, tmp_path):
    assert parse_generation({}).beam_search == "gnmt"
    assert parse_generation(None).defaults == GenerationDefaults()
    manifest = json.loads((bundles["opus"] / "bundle.json").read_text(encoding="utf-8"))
    for key in ("beam_search", "early_stopping", "begin_suppress_ids", "defaults"):
        del manifest["generation"][key]
    old = shutil.copytree(bundles["opus"], tmp_path / "old")
    (old / "bundle.json").write_text(json.dumps(manifest), encoding="utf-8")
    runner = runner_of(old)
    assert (runner.spec.beam_search, runner.defaults) == ("gnmt", ModelDefaults())
    for value, message in (({"beam_search": "best"}, "beam_search' must be one of gnmt, transformers"),
                           ({"early_stopping": 1}, "early_stopping' must be true, false or"),
                           ({"defaults": {"num_beam": 4}}, "holds 'num_beam'"),
                           ({"defaults": {"max_length": 1}}, "max_length' must be an integer >= 2"),
                           ({"begin_suppress_ids": [-1]}, "begin_suppress_ids' must be a list of token ids")):
        with pytest.raises(ValueError, match=message):
            parse_generation(value)
