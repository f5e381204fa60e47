"""Controlled decoding on imported tiny Marian and M2M100 bundles, served by the torch-free runner, against
transformers' `generate` with the same logits processors: repetition penalty, no-repeat n-grams,
minimum length, bad words (suppressed sequences), a target prefix (generate's decoder_input_ids), each
alone and together, greedy and beam, rows of different options in one batch; alternatives against
transformers' top-n after the prefix; sampling with top_k 1 against greedy and seeds across batch
compositions.

Ours counts lengths in generated tokens (prefix included, eos excluded from min_length), transformers in
input_ids (the decoder start included): our min_length m is its min_length m + 1, our max_new_tokens n
with a prefix of p tokens is its max_new_tokens n - p."""

from __future__ import annotations

import pytest

from service.domain.types import DecodeOptions
from tests.support.bundle_search import cut, right_pad
from tests.support.hf_models import language_id, parallel

torch = pytest.importorskip("torch")

MAX_NEW = 20
NAMES = ["marian", "m2m100"]
TARGET = {"m2m100": "de"}
# (our options, generate's settings): each processor alone, then together
CASES = {
    "repetition 1.6": ({"repetition_penalty": 1.6}, {"repetition_penalty": 1.6}),
    "repetition 0.7": ({"repetition_penalty": 0.7}, {"repetition_penalty": 0.7}),
    "no repeat 2": ({"no_repeat_ngram_size": 2}, {"no_repeat_ngram_size": 2}),
    "no repeat 3": ({"no_repeat_ngram_size": 3}, {"no_repeat_ngram_size": 3}),
    "min length 9": ({"min_output_tokens": 9}, {"min_length": 10}),
    "together": ({"repetition_penalty": 1.3, "no_repeat_ngram_size": 2, "min_output_tokens": 6},
                 {"repetition_penalty": 1.3, "no_repeat_ngram_size": 2, "min_length": 7}),
}


@pytest.fixture(scope="module")
def setups(hf_dirs, hf_bundles):
    """name -> (model, tokenizer, runner, source ids, our language options, forced first token)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from service.runtime.runner import Runner

    out = {}
    for name in NAMES:
        model = AutoModelForSeq2SeqLM.from_pretrained(hf_dirs[name]).eval()
        tok = AutoTokenizer.from_pretrained(hf_dirs[name])
        many = name in TARGET
        languages = {"source_language": tok.src_lang, "target_language": TARGET[name]} if many else {}
        forced = language_id(tok, TARGET[name]) if name in TARGET else None
        sources = [tok(s)["input_ids"] for s, _ in parallel(10, 13)]
        out[name] = (model, tok, Runner(hf_bundles[name], providers=["CPUExecutionProvider"]), sources,
                     languages, forced)
    return out


def generate(model, sources, beam: int, max_new: int, forced: int | None, prefix=(), **settings
             ) -> list[list[int]]:
    """transformers' own greedy or beam search, one source at a time (no padding effects); tokens after the
    decoder start, up to eos."""
    from transformers import GenerationConfig

    cfg = model.config
    start = [cfg.decoder_start_token_id, *(() if forced is None else (forced,))] if prefix else None
    config = GenerationConfig(num_beams=beam, do_sample=False, max_new_tokens=max_new,
                              decoder_start_token_id=cfg.decoder_start_token_id,
                              pad_token_id=cfg.pad_token_id, eos_token_id=cfg.eos_token_id,
                              length_penalty=1.0, early_stopping=False,
                              forced_bos_token_id=None if prefix else forced, **settings)
    model.generation_config = GenerationConfig(decoder_start_token_id=cfg.decoder_start_token_id)
    found = []
    with torch.no_grad():
        for source in sources:
            src = torch.from_numpy(right_pad([source], cfg.pad_token_id))
            extra = {} if start is None else {"decoder_input_ids": torch.tensor([[*start, *prefix]])}
            out = model.generate(input_ids=src, attention_mask=torch.ones_like(src), generation_config=config,
                                 **extra)
            found.append(cut(out[0, 1:].tolist(), cfg.eos_token_id))
    return found


def served(runner, sources, options) -> list[list[int]]:
    """Our best hypothesis's tokens per source."""
    return [h[0].tokens for h in runner.translate(sources, options)]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", NAMES)
def test_greedy_controls_equal_generate(setups, name, case):
    model, _, runner, sources, languages, forced = setups[name]
    ours_options, theirs_settings = CASES[case]
    asked = DecodeOptions(beam_size=1, max_output_tokens=MAX_NEW, **languages, **ours_options)
    ours = served(runner, sources, asked)
    assert ours == generate(model, sources, 1, MAX_NEW, forced, **theirs_settings)
    assert ours != served(runner, sources, DecodeOptions(beam_size=1, max_output_tokens=MAX_NEW, **languages))


@pytest.mark.parametrize("case", ["repetition 1.6", "no repeat 2", "min length 9", "together"])
@pytest.mark.parametrize("name", NAMES)
def test_beam_controls_equal_generate(setups, name, case):
    model, _, runner, sources, languages, forced = setups[name]
    ours_options, theirs_settings = CASES[case]
    asked = DecodeOptions(beam_size=4, max_output_tokens=MAX_NEW, **languages, **ours_options)
    ours = served(runner, sources, asked)
    assert ours == generate(model, sources, 4, MAX_NEW, forced, **theirs_settings)


@pytest.mark.parametrize("name", NAMES)
def test_suppressed_sequences_are_generates_bad_words(setups, name):
    model, _, runner, sources, languages, forced = setups[name]
    plain = served(runner, sources, DecodeOptions(max_output_tokens=MAX_NEW, **languages))
    first = next(t for t in plain if len(t) > 3)
    at = 1 if forced is not None else 0  # a forced language token cannot be suppressed
    bad = [[first[at]], first[at + 1 : at + 3]]
    ours = served(runner, sources, DecodeOptions(max_output_tokens=MAX_NEW, suppress_sequences=bad,
                                                 **languages))
    assert ours == generate(model, sources, 1, MAX_NEW, forced, bad_words_ids=bad)
    assert all(first[at] not in t[at:] for t in ours) and ours != plain


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("name", NAMES)
def test_a_target_prefix_is_generates_decoder_input(setups, name, beam):
    model, _, runner, sources, languages, forced = setups[name]
    plain = served(runner, sources, DecodeOptions(max_output_tokens=MAX_NEW, **languages))
    skip = 1 if forced is not None else 0
    prefix = next(t for t in plain if len(t) > 4)[skip + 1 : skip + 4][::-1]  # unlikely as it stands
    ours = served(runner, sources, DecodeOptions(beam_size=beam, max_output_tokens=MAX_NEW,
                                                 target_prefix=prefix,
                                                 **languages))
    theirs = generate(model, sources, beam, MAX_NEW - len(prefix) - skip, forced, prefix=prefix)
    assert ours == theirs
    assert all(t[skip : skip + len(prefix)] == prefix for t in ours)


@pytest.mark.parametrize("name", NAMES)
def test_rows_of_different_options_in_one_batch(setups, name):
    """Every request decodes in one batch as it decodes alone."""
    _, _, runner, sources, languages, _ = setups[name]
    options = [DecodeOptions(max_output_tokens=MAX_NEW, **languages, **CASES[c][0]) for c in CASES]
    options += [DecodeOptions(beam_size=3, max_output_tokens=MAX_NEW, no_repeat_ngram_size=2, **languages),
                DecodeOptions(max_output_tokens=MAX_NEW, temperature=0.9, top_p=0.9, seed=5, **languages),
                DecodeOptions(max_output_tokens=MAX_NEW, **languages)]
    chosen = [sources[i % len(sources)] for i in range(len(options))]
    together = [h[0].tokens for h in runner.translate(chosen, options)]
    alone = [served(runner, [s], o)[0] for s, o in zip(chosen, options, strict=True)]
    assert together == alone


@pytest.mark.parametrize("name", NAMES)
def test_alternatives_are_transformers_top_n_after_the_prefix(setups, name):
    model, _, runner, sources, languages, forced = setups[name]
    n, prefix = 4, served(runner, sources[:1], DecodeOptions(max_output_tokens=MAX_NEW, **languages))[0][:3]
    prefix = prefix[1:] if forced is not None else prefix
    hyps = runner.translate(sources[:1], DecodeOptions(max_output_tokens=MAX_NEW, target_prefix=prefix,
                                                       n_best=n,
                                                       return_alternatives=True, **languages))[0]
    start = [model.config.decoder_start_token_id, *(() if forced is None else (forced,)), *prefix]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(sources[:1]), decoder_input_ids=torch.tensor([start])).logits
    top = torch.log_softmax(logits[0, -1], -1).topk(n).indices.tolist()
    at = len(start) - 1
    eos = model.config.eos_token_id  # an alternative that is eos ends there: no token at `at`
    assert [h.tokens[at] if len(h.tokens) > at else eos for h in hyps] == top
    assert all(h.tokens[:at] == start[1:] for h in hyps)


@pytest.mark.parametrize("name", NAMES)
def test_sampling_top_k_1_is_greedy_and_a_seed_ignores_the_batch(setups, name):
    _, _, runner, sources, languages, _ = setups[name]
    greedy = served(runner, sources, DecodeOptions(max_output_tokens=MAX_NEW, **languages))
    top_1 = DecodeOptions(max_output_tokens=MAX_NEW, top_k=1, seed=1, **languages)
    assert served(runner, sources, top_1) == greedy
    hot = DecodeOptions(max_output_tokens=MAX_NEW, temperature=1.5, seed=99, **languages)
    alone = served(runner, sources[2:3], hot)[0]
    others = [DecodeOptions(max_output_tokens=MAX_NEW, temperature=1.5, seed=s,
                            **languages) for s in range(5)]
    mixed = served(runner, [sources[0], sources[1], sources[2], sources[3], sources[4], sources[5]],
                   [others[0], others[1], hot, others[2], others[3], others[4]])
    assert mixed[2] == alone
    unseeded = {tuple(served(runner, sources[2:3], DecodeOptions(max_output_tokens=MAX_NEW, temperature=1.5,
                                                                 **languages))[0]) for _ in range(6)}
    assert len(unseeded) > 1  # sampling does sample
