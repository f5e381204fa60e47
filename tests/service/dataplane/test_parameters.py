"""The one vocabulary of options (service/dataplane/parameters.py): every decoding option has one wire name,
the same in translator.v1 and KServe v2, and reaches DecodeOptions; unknown names are refused with the
nearest known one; the names Triton's and KServe's clients send on their own pass."""

from __future__ import annotations

import dataclasses

import pytest

from protos.translator.v1 import translator_pb2 as pb
from service.dataplane import parameters
from service.domain.errors import InvalidTensor
from service.domain.types import DecodeOptions

RESULT_FIELDS = {"n_best", "return_alternatives", "return_alignment",
                 "stream"}  # asked per call, not decoding


def test_every_decoding_option_has_a_wire_name_in_both_protocol_families():
    """Each DecodeOptions field is a parameter of the same name, and translator.v1's field of that name; the
    other spellings name a field."""
    fields = {f.name for f in dataclasses.fields(DecodeOptions)} - RESULT_FIELDS
    assert fields == set(parameters.DECODING) - set(parameters.ALIASES)
    assert set(parameters.ALIASES.values()) <= fields
    translator = set(pb.TranslateOptions.DESCRIPTOR.fields_by_name)
    assert set(parameters.DECODING) <= translator
    assert set(parameters.RESULTS) <= translator


@pytest.mark.parametrize(("name", "nearest"), [
    ("min_length", "min_output_tokens"), ("bem_size", "beam_size"), ("num_beams", "beam_size"),
    ("max_new_tokens", "max_output_tokens"), ("temprature", "temperature"), ("top-p", "top_p"),
])
def test_an_unknown_name_is_refused_with_the_nearest_known_one(name, nearest):
    with pytest.raises(InvalidTensor) as refused:
        parameters.read({name: 3})
    assert f"unknown parameter {name!r}; did you mean {nearest}?" == str(refused.value)
    assert nearest in parameters.DECODING


def test_a_name_like_none_lists_the_known_ones():
    with pytest.raises(InvalidTensor) as refused:
        parameters.read({"xyzzy": 1})
    assert "known: " in str(refused.value) and "beam_size" in str(refused.value)


def test_results_are_known_only_where_the_call_offers_them():
    with pytest.raises(InvalidTensor, match="unknown parameter 'return_scores'"):
        parameters.read({"return_scores": True})
    assert parameters.read({"return_scores": True}, results=parameters.RESULTS).return_scores


@pytest.mark.parametrize("name", [*parameters.RESERVED, "triton_enable_empty_final_response",
                                  "triton_anything"])
def test_names_clients_send_on_their_own_pass(name):
    """Reserved names change no decoding option (timeout sets the deadline alone)."""
    value = {parameters.TIMEOUT: 5_000_000, parameters.EMPTY_FINAL: True}.get(name, 1)
    asked = parameters.read({name: value, "beam_size": 2})
    assert asked.options == parameters.read({"beam_size": 2}).options


def test_values_read_as_their_kinds():
    """Numbers as decimal strings, lists as JSON strings or arrays, both spellings of a length."""
    asked = parameters.read({"max_tokens": "12", "min_output_tokens": 2, "length_penalty": "0.5", "top_k": 3,
                             "target_prefix_ids": "[5, 6]", "suppress_sequences": ["a", [7, 8]],
                             "disable_unk": "true", "source_language": "en"})
    o = asked.options
    assert (o.max_output_tokens, o.min_output_tokens, o.length_penalty, o.top_k) == (12, 2, 0.5, 3)
    assert (tuple(o.target_prefix), o.suppress_sequences, o.disable_unk) == ((5, 6), ("a", (7, 8)), True)
    assert o.source_language == "en" and o.target_language is None


@pytest.mark.parametrize(("given", "phrase"), [
    ({"beam_size": "wide"}, "parameter beam_size must be a whole number"),
    ({"beam_size": 2.5}, "parameter beam_size must be an integer"),
    ({"temperature": "hot"}, "parameter temperature must be a finite number"),
    ({"disable_unk": 1}, "parameter disable_unk must be a boolean"),
    ({"target_prefix_ids": "[1, 2"}, "parameter target_prefix_ids must be a JSON array"),
    ({"suppress_sequences": []}, "is an empty array"),
    ({"max_tokens": 3, "max_output_tokens": 4}, "not both"),
    ({"beam_size": "9" * 30}, "at most 20 digits"),
])
def test_a_value_of_the_wrong_kind_is_refused_naming_it(given, phrase):
    with pytest.raises(InvalidTensor, match=phrase):
        parameters.read(given)
