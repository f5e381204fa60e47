"""Benchmark inputs (bench/common/workload.py): mixed-length texts and sources of exact lengths, counted
with the bundle's own tokenizer."""

from __future__ import annotations

from pathlib import Path

from bench.common.workload import Lengths, mixed_texts, sources_of_length


def test_workloads_follow_the_bundle_tokenizer(tiny_bundle: Path, sources: list[str]) -> None:
    lengths = Lengths(tiny_bundle)
    mixed = mixed_texts(sources, 40, lengths, seed=1)
    assert mixed == mixed_texts(sources, 40, lengths, seed=1) and len(mixed) == 40
    assert all(lengths(t) <= lengths.max_len for t in mixed)
    assert max(lengths(t) for t in mixed) > max(lengths(s) for s in sources)  # some joined sentences
    for tokens in (2, 17, lengths.max_len):
        ids = sources_of_length(sources, tokens, 3, lengths)
        assert [len(x) for x in ids] == [tokens] * 3 and all(x[-1] == lengths.eos for x in ids)
