"""A request's languages resolved against a model's (service/domain/languages.py): ids of a many-to-many
model, and every refusal with a message that says what to send."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.domain.errors import InvalidInput
from service.domain.languages import Languages
from service.domain.limits import RequestLimits
from service.domain.types import DecodeOptions
from tests.support import hostile
from tests.support.properties import FAST, MAX_BEAM, MAX_LEN

CODES = {"en": 128022, "de": 128020, "fr": 128028, "es": 128025, "ja": 128046, "zh": 128102, "pt": 128084}
M2M = Languages(CODES, source_prefix=True, forced_target=True)


def test_a_pair_resolves_to_the_source_prefix_and_the_forced_first_token():
    assert M2M.resolve("de", "fr") == ((128020,), 128028)
    assert Languages(CODES, source_prefix=False, forced_target=True).resolve("de", "fr") == ((), 128028)
    assert Languages(CODES, source_prefix=True, forced_target=False).resolve("de", None) == ((128020,), None)
    assert Languages().resolve(None, None) == ((), None)  # a model of one pair, asked nothing


@pytest.mark.parametrize(("languages", "source", "target", "message"), [
    (Languages(), None, "de", "target_language 'de' given, but this model translates one language pair"),
    (M2M, "auto", "de", "source_language auto is detected only for a translation's texts"),  # Score's
    (Languages(), "en", None, "source_language 'en' given, but this model translates one language pair"),
    (M2M, "en", None, "set target_language, the language to translate into (e.g. de, en, es, fr, ja)"),
    (M2M, None, "de", "set source_language, the language of the texts (e.g. de, en, es, fr, ja)"),
    (M2M, "en", "eng", "unknown target_language 'eng'; this model knows 7 languages, e.g. en, "),
    (M2M, "xx", "de", "unknown source_language 'xx'; this model knows 7 languages, e.g. de, en, es, fr, ja"),
    (M2M, "en", "x" * 1000, "unknown target_language 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...; "),
    (M2M, "en", 7, "target_language must be a language code (a string), got int"),
])
def test_refusals_say_what_to_send(languages, source, target, message):
    with pytest.raises(InvalidInput) as err:
        languages.resolve(source, target)
    assert message in str(err.value)
    assert len(str(err.value)) < 300


def test_options_resolve_languages_once_with_the_model_limits():
    limits = RequestLimits.of(MAX_LEN, 4, MAX_BEAM, languages=M2M)
    resolved = limits.resolve(DecodeOptions(beam_size=2, source_language="ja", target_language="en"))
    assert (resolved.source_prefix, resolved.forced_first) == ((CODES["ja"],), CODES["en"])
    assert (resolved.source_language, resolved.target_language, resolved.beam_size) == ("ja", "en", 2)
    assert resolved.resolved(MAX_LEN, MAX_BEAM) is resolved
    plain = RequestLimits.of(MAX_LEN, 4, MAX_BEAM).resolve(DecodeOptions())
    assert (plain.source_prefix, plain.forced_first) == ((), None)
    with pytest.raises(InvalidInput, match="set target_language"):
        limits.resolve(DecodeOptions(source_language="ja"))
    with pytest.raises(InvalidInput, match="one language pair"):
        RequestLimits.of(MAX_LEN, 4, MAX_BEAM).resolve(DecodeOptions(target_language="ja"))


def test_an_example_pair_is_valid():
    for languages in (M2M, Languages(CODES, True, False), Languages(CODES, False, True), Languages()):
        languages.resolve(*languages.example())


@FAST
@given(source=st.one_of(st.none(), st.text(max_size=60), st.sampled_from(list(CODES))),
       target=st.one_of(st.none(), st.text(max_size=60), st.sampled_from(list(CODES)), st.integers()))
def test_any_codes_resolve_or_are_refused_cleanly(source, target):
    try:
        prefix, forced = M2M.resolve(source, target)
    except InvalidInput as exc:
        hostile.check_message(str(exc), echoed=[c for c in (source, target) if isinstance(c, str)])
        assert "language" in str(exc)
    else:
        assert prefix == (CODES[source],) and forced == CODES[target]
