"""Length groups of the encoder runs (service/runtime/decoding/encode_groups.py): the grouping is the cheapest
of every partition (brute force), and a batch that encodes its new requests in groups decodes each of them
exactly as alone."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from service.domain.types import DecodeOptions
from service.runtime.decoding.batch import DecodeBatch
from service.runtime.decoding.encode_groups import EncodeGrouping, rows_by_group
from tests.support.decoding import MAX_NEW, assert_same_hypotheses, drain, reference


def partitions(items: list[int]):
    """Every set partition of items (Bell number many)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in partitions(rest):
        yield [[first], *part]
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1:]]


def cost(groups, lengths, overhead: int) -> int:
    """Padded tokens plus the overhead of each run."""
    return sum(overhead + len(g) * max(lengths[i] for i in g) for g in groups)


@pytest.mark.parametrize("overhead", [0, 5, 32, 1000])
def test_groups_are_the_cheapest_partition(overhead):
    rng = random.Random(overhead)
    for _ in range(40):
        lengths = [rng.randint(1, 60) for _ in range(rng.randint(1, 7))]
        got = EncodeGrouping(overhead).groups(lengths)
        flat = sorted(int(i) for g in got for i in g)
        assert flat == list(range(len(lengths)))  # every source in exactly one group
        assert all(list(g) == sorted(g) for g in got)
        best = min(cost(p, lengths, overhead) for p in partitions(list(range(len(lengths)))))
        assert cost([list(g) for g in got], lengths, overhead) == best


def test_no_overhead_groups_equal_lengths_and_a_large_one_keeps_one_run():
    lengths = [7, 30, 7, 12, 30, 12, 7]
    assert [list(g) for g in EncodeGrouping(0).groups(lengths)] == [[0, 2, 6], [3, 5], [1, 4]]
    assert [list(g) for g in EncodeGrouping(10_000).groups(lengths)] == [list(range(7))]
    assert EncodeGrouping().groups([]) == []
    with pytest.raises(ValueError, match="overhead_tokens"):
        EncodeGrouping(-1)


def test_rows_by_group_maps_each_row_to_its_request_within_the_group():
    encoded = [(np.array([1, 3]), ["k13"]), (np.array([0, 2]), ["k02"])]
    rows = np.array([10, 11, 12, 13, 14, 15])
    owner = np.array([0, 1, 1, 2, 3, 3])  # request 1 and 3 hold two beam rows each
    got = [(r.tolist(), enc, local.tolist()) for r, enc, local in rows_by_group(encoded, rows, owner)]
    assert got == [([11, 12, 14, 15], ["k13"], [0, 0, 1, 1]), ([10, 13], ["k02"], [0, 1])]


def test_a_batch_encoding_in_groups_decodes_every_request_as_alone(layout_runner, texts):
    ids = sorted(layout_runner.encode_texts(texts), key=len)
    long_ = (ids[-1][:-1] * 4)[: layout_runner.max_len - 1] + [ids[-1][-1]]
    sources = [long_, ids[0], ids[-1], ids[0][:], long_[:]]
    opts = [DecodeOptions(max_output_tokens=MAX_NEW),
            DecodeOptions(beam_size=3, n_best=2, max_output_tokens=MAX_NEW)]
    runs: list[int] = []
    encode = layout_runner.backend.encode
    layout_runner.backend.encode = lambda feeds: runs.append(feeds["input_ids"].shape[0]) or encode(feeds)
    try:
        batch = DecodeBatch(layout_runner.spec, layout_runner.backend, layout_runner.tokenizer, 16,
                            grouping=EncodeGrouping(0))
        reqs = [layout_runner.make_request(s, opts[i % 2]) for i, s in enumerate(sources)]
        batch.add(reqs)
        assert sorted(runs) == [1, 2, 2]  # one run per distinct length
        got = drain(batch)
    finally:
        layout_runner.backend.encode = encode
    for r, s, o in zip(reqs, sources, itertools.cycle(opts), strict=False):
        assert_same_hypotheses(got[r.id], reference(layout_runner, s, o))
