"""DecodeOptions.resolved for the controlled-decoding options: a model's defaults fill what a request
leaves unset, texts become target ids, and every bad value is InvalidInput naming the option."""

from __future__ import annotations

import math

import pytest

from service.domain.errors import InvalidInput
from service.domain.options import MAX_NGRAM, DecodeOptions, ModelDefaults

MAX_LEN, MAX_BEAM, VOCAB = 40, 8, 100
OPUS_LIKE = ModelDefaults(beam_size=4, max_output_tokens=20, length_penalty=1.0, min_output_tokens=2,
                          no_repeat_ngram_size=3,
                          repetition_penalty=1.1)


def words(texts):
    """A stand-in target tokenizer: one id per word, its length."""
    return [[len(w) for w in t.split()] for t in texts]


def resolve(**options):
    return DecodeOptions(**options).resolved(MAX_LEN, MAX_BEAM, defaults=OPUS_LIKE, vocab_size=VOCAB,
                                             encode_target=words)


def test_unset_options_take_the_models_defaults_and_set_ones_win():
    got = resolve()
    assert (got.beam_size, got.max_output_tokens, got.length_penalty, got.min_output_tokens,
            got.no_repeat_ngram_size,
            got.repetition_penalty) == (4, 20, 1.0, 2, 3, 1.1)
    mine = resolve(beam_size=2, max_output_tokens=9, length_penalty=0.0, min_output_tokens=0,
                   no_repeat_ngram_size=0,
                   repetition_penalty=1.0)
    assert (mine.beam_size, mine.max_output_tokens, mine.length_penalty, mine.min_output_tokens,
            mine.no_repeat_ngram_size,
            mine.repetition_penalty) == (2, 9, 0.0, 0, 0, 1.0)
    plain = DecodeOptions().resolved(MAX_LEN, MAX_BEAM)
    assert (plain.beam_size, plain.max_output_tokens, plain.length_penalty) == (1, MAX_LEN - 1, None)
    assert not plain.controlled


def test_sampling_and_alternatives_take_one_row_each_unless_a_beam_is_asked_for():
    sampled = resolve(temperature=0.7, seed=3)
    assert (sampled.beam_size, sampled.sampling, sampled.rows, sampled.temperature) == (1, True, 1, 0.7)
    assert resolve(top_k=1).sampling and resolve(top_p=0.5).sampling and not resolve(temperature=0).sampling
    # docs/api.md: temperature 0 is greedy, whatever top_k and top_p say
    assert not resolve(temperature=0, top_k=5).sampling and not resolve(temperature=0, top_p=0.5).sampling
    assert resolve(temperature=0, top_k=5).temperature is None
    alternatives = resolve(return_alternatives=True, n_best=5)
    assert (alternatives.beam_size, alternatives.rows) == (1, 5)
    with pytest.raises(InvalidInput, match="sampling .* needs beam_size 1"):
        resolve(temperature=0.7, beam_size=2)
    with pytest.raises(InvalidInput, match="return_alternatives .* beam_size must be 1"):
        resolve(return_alternatives=True, beam_size=3)


def test_texts_become_target_ids_and_ids_are_checked():
    got = resolve(target_prefix="ab cde", suppress_sequences=["x", [7, 8], [7, 8]], max_output_tokens=5)
    assert got.target_prefix == (2, 3) and got.forced == (2, 3)
    assert got.suppress_sequences == ((1,), (7, 8))  # duplicates once
    assert resolve(target_prefix=[5, 6]).target_prefix == (5, 6)


@pytest.mark.parametrize(("options", "message"), [
    ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
    ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
    ({"temperature": -0.1}, "temperature must be a finite number >= 0"),
    ({"temperature": math.nan}, "temperature must be a finite number >= 0"),
    ({"top_k": -1}, "top_k must be an integer >= 0"),
    ({"seed": -5}, "seed must be an integer between 0"),
    ({"repetition_penalty": 0.0}, "repetition_penalty must be a finite number > 0"),
    ({"no_repeat_ngram_size": MAX_NGRAM + 1}, "no_repeat_ngram_size must be between 0"),
    ({"min_output_tokens": -1}, "min_output_tokens must be an integer >= 0"),
    ({"max_length_ratio": -1.0}, "max_length_ratio must be a finite number >= 0"),
    ({"target_prefix": [1, 2, 3, 4, 5], "max_output_tokens": 5}, "target_prefix is 5 tokens long"),
    ({"target_prefix": " "}, "target_prefix is empty"),
    ({"target_prefix": [1, VOCAB]}, f"token ids must be integers in \\[0, {VOCAB}\\), got {VOCAB}"),
    ({"suppress_sequences": [[]]}, r"suppress_sequences\[0\] is empty"),
    ({"suppress_sequences": ["ok", [-1]]}, r"suppress_sequences\[1\]: token ids"),
    ({"suppress_sequences": "word"}, "suppress_sequences must be a list"),
    ({"n_best": 9, "return_alternatives": True}, "n_best must be between 1 and max_beam_size"),
])
def test_bad_values_say_which_option_and_why(options, message):
    with pytest.raises(InvalidInput, match=message):
        resolve(**options)


def test_a_length_ratio_caps_new_tokens_by_the_source_but_leaves_the_prefix_a_token():
    got = resolve(max_length_ratio=1.5, max_output_tokens=30)
    assert got.limited_to(4).max_output_tokens == 6 and got.limited_to(40).max_output_tokens == 30
    prefixed = resolve(max_length_ratio=0.1, target_prefix=[1, 2, 3], max_output_tokens=30)
    assert prefixed.limited_to(4).max_output_tokens == 4  # the 3 forced tokens and one free
    assert resolve(max_output_tokens=30).limited_to(1).max_output_tokens == 30  # no ratio: no cap
