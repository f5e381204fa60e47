"""Generation of format-2 bundles (runner.py, batch.py, search.py): the decoder starts from
generation.decoder_start_id, sources carry the language prefix and the source suffix, and the target
language is the first token of every greedy and beam hypothesis, adding 0 to its log-prob as
transformers' ForcedBOSTokenLogitsProcessor does; checked against the ONNX graphs run without a cache."""

from __future__ import annotations

import numpy as np
import pytest

from interface.names import INPUT_IDS
from service.domain.errors import InvalidInput
from service.domain.types import DecodeOptions, FinishedEvent, FinishReason, TokenEvent
from service.runtime.runner import Runner
from tests.support.pretrained import GraphReference

TEXTS = ["the cat saw 12 apples.", "Der Hund sah 4217 rote Äpfel!", "we 5", "Anna am Tag 90 café"]
PAIRS = [("en", "de"), ("de", "ja"), ("ja", "en"), ("zh", "cs")]
MAX_NEW = 12


@pytest.fixture(scope="module", params=["inplace", "concat"])
def m2m_layout_runner(request, m2m_bundles) -> Runner:
    """CPU runner of the M2M100-like bundle in each KV-cache layout."""
    return Runner(m2m_bundles[request.param], providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def m2m_reference(m2m_bundles) -> GraphReference:
    """The M2M100-like model's graphs, run without a cache."""
    return GraphReference(m2m_bundles["concat"])


@pytest.fixture
def decoder_inputs(monkeypatch):
    """spy(runner) -> the list that collects the input ids of every decoder run of that runner."""

    def spy(runner: Runner) -> list[list[int]]:
        seen: list[list[int]] = []
        run = runner.backend.decode

        def decode(feeds, past, inplace=False):
            seen.append(np.asarray(feeds[INPUT_IDS]).ravel().tolist())
            return run(feeds, past, inplace)

        monkeypatch.setattr(runner.backend, "decode", decode)
        return seen

    return spy


def options(pair: tuple[str, str], **more) -> DecodeOptions:
    """DecodeOptions of a language pair."""
    values = {"max_output_tokens": MAX_NEW, "source_language": pair[0], "target_language": pair[1]} | more
    return DecodeOptions(**values)


def test_the_decoder_starts_from_the_bundles_start_id(runner, marian_runner, m2m_runner, decoder_inputs):
    marian = marian_runner.spec
    assert marian.decoder_start == marian.special.pad != marian.special.bos  # Marian: pad, not bos
    cases = [(runner, DecodeOptions(max_output_tokens=3), runner.special.bos),  # format 1: bos, as before
             (marian_runner, DecodeOptions(max_output_tokens=3), marian.special.pad),
             (m2m_runner, options(PAIRS[0], max_output_tokens=3), m2m_runner.special.eos)]  # M2M100: eos
    for r, opts, start in cases:
        seen = decoder_inputs(r)
        r.translate([TEXTS[0]], opts)
        assert seen[0] == [start]
        assert len(seen) > 1 and seen[1] != [start]  # then the generated tokens


def test_sources_carry_the_language_prefix_and_the_source_suffix(runner, marian_runner, m2m_runner):
    codes = m2m_runner.languages.codes
    for source, target in PAIRS:
        request = m2m_runner.make_request(TEXTS[0], options((source, target)))
        assert request.source[0] == codes[source] and request.source[-1] == m2m_runner.special.eos == 2
        assert request.source[1:-1] == m2m_runner.tokenizer.encode([TEXTS[0]])[0]
        resolved = request.options
        assert (resolved.source_prefix, resolved.forced_first) == ((codes[source],), codes[target])
    assert marian_runner.make_request(TEXTS[0]).source == [*marian_runner.tokenizer.encode(TEXTS[:1])[0], 0]
    assert runner.make_request(TEXTS[0]).source[-1] == runner.special.eos


def test_marian_greedy_follows_the_graphs_from_pad(marian_runner, marian_bundle):
    reference = GraphReference(marian_bundle)
    spec = marian_runner.spec
    outputs = []
    for text in TEXTS:
        hyp = marian_runner.translate([text], DecodeOptions(max_output_tokens=MAX_NEW))[0][0]
        source = marian_runner.make_request(text).source
        want, log_prob = reference.greedy(source, spec.special.pad, spec.special.eos, MAX_NEW)
        assert hyp.tokens == [t for t in want if t != spec.special.eos]
        assert hyp.log_prob == pytest.approx(log_prob, abs=1e-4)
        outputs.append(want)
        from_bos, _ = reference.greedy(source, spec.special.bos, spec.special.eos, MAX_NEW)
        assert from_bos != want  # the start id matters: this test would see the wrong one
    assert len({tuple(o) for o in outputs}) > 1


def test_greedy_forces_the_target_language_first(m2m_layout_runner, m2m_reference):
    r = m2m_layout_runner
    codes, eos = r.languages.codes, r.special.eos
    forced_scores = []
    for text, pair in zip(TEXTS, PAIRS, strict=True):
        hyp = r.translate([text], options(pair))[0][0]
        source = r.make_request(text, options(pair)).source
        want, log_prob = m2m_reference.greedy(source, eos, eos, MAX_NEW, forced=codes[pair[1]])
        assert hyp.tokens[0] == codes[pair[1]] and hyp.tokens == [t for t in want if t != eos]
        assert hyp.log_prob == pytest.approx(log_prob, abs=1e-4)  # the forced token adds 0
        assert hyp.text == r.decode_tokens(hyp.tokens[1:])  # the language token has no text
        first = m2m_reference.logprobs(source, [eos])[0]
        forced_scores.append((int(first.argmax()), float(first[codes[pair[1]]])))
    wanted = [codes[target] for _, target in PAIRS]
    assert any(best != want for (best, _), want in zip(forced_scores, wanted, strict=True))  # forcing shows
    assert all(score < -0.01 for _, score in forced_scores)  # the model's own log-prob would show too


def test_every_beam_hypothesis_starts_with_the_target_language(m2m_layout_runner, m2m_reference):
    r = m2m_layout_runner
    codes, eos = r.languages.codes, r.special.eos
    for text, pair in zip(TEXTS, PAIRS, strict=True):
        hyps = r.translate([text], options(pair, beam_size=4, n_best=4))[0]
        source = r.make_request(text, options(pair)).source
        assert len(hyps) == 4 and len({tuple(h.tokens) for h in hyps}) == 4
        for h in hyps:
            assert h.tokens[0] == codes[pair[1]]
            ended = [eos] if h.finish_reason == FinishReason.EOS else []
            want = m2m_reference.score(source, [eos, *h.tokens, *ended], skip=1)  # all but the forced token
            assert h.log_prob == pytest.approx(want, abs=1e-4) and h.score == pytest.approx(h.log_prob)
        greedy = r.translate([text], options(pair))[0][0]
        assert r.translate([text], options(pair, beam_size=1))[0][0].tokens == greedy.tokens


def test_a_stream_starts_with_the_silent_language_token(m2m_runner):
    batch = m2m_runner.new_batch(4)
    batch.add([m2m_runner.make_request(TEXTS[1], options(PAIRS[1], stream=True))])
    events = []
    for _ in range(MAX_NEW + 1):
        events += batch.step()
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    (final,) = [e for e in events if isinstance(e, FinishedEvent)]
    assert tokens[0].token == m2m_runner.languages.codes[PAIRS[1][1]] and tokens[0].text == ""
    assert "".join(e.text for e in tokens) == final.hypotheses[0].text


def test_languages_are_checked_by_the_runner(runner, m2m_runner):
    with pytest.raises(InvalidInput, match="set target_language"):
        m2m_runner.translate([TEXTS[0]], DecodeOptions(source_language="en"))
    with pytest.raises(InvalidInput, match="set source_language"):
        m2m_runner.make_request(TEXTS[0], DecodeOptions(target_language="en"))
    with pytest.raises(InvalidInput, match="unknown target_language 'fr'"):
        m2m_runner.translate([TEXTS[0]], options(("en", "fr")))
    with pytest.raises(InvalidInput, match="one language pair"):
        runner.translate([TEXTS[0]], DecodeOptions(target_language="de"))
