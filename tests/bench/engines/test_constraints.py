"""The required-phrases benchmark's phrases (bench/engines/constraints.py): 1-3 distinct words of another
sentence's plain translation, each short enough to fit (as the service tokenizes it)."""

from __future__ import annotations

import pytest

from bench.engines import constraints
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner


@pytest.mark.parametrize("max_pieces", [1, 8])
def test_phrases_fit(runner: Runner, texts: list[str], monkeypatch, max_pieces: int) -> None:
    """With a bound that some words of the translations exceed (1 token), none of those is chosen."""
    monkeypatch.setattr(constraints, "MAX_PIECES", max_pieces)
    plain = runner.translate(texts, DecodeOptions(beam_size=constraints.BEAM,
                                                 max_output_tokens=constraints.cap(runner)))
    words = [set(h[0].text.split()) for h in plain]
    lengths = {w: constraints.pieces(runner, w) for ws in words for w in ws}
    assert any(n > 1 for n in lengths.values()) and any(n == 1 for n in lengths.values())
    chosen = constraints.phrases_for(runner, texts)
    assert len(chosen) == len(texts)
    for i, phrases in enumerate(chosen):
        assert 1 <= len(phrases) <= 3 and len(set(phrases)) == len(phrases)
        assert all(lengths[p] <= max_pieces for p in phrases), phrases
        source = next(j for j in range(1, len(texts) + 1)
                      if any(lengths[w] <= max_pieces for w in words[(i + j) % len(texts)]))
        assert set(phrases) <= words[(i + source) % len(texts)]
