"""inherit(): beams move into their parents' rows, and only a parent's later children are copied; checked
against the plain gather (every beam's row copied from its parent's) on every parent vector of small beams."""

import itertools

import numpy as np
import pytest

from service.runtime.decoding.rows import inherit


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_every_parent_vector_gives_the_gathered_contents_with_the_fewest_copies(k):
    """Each next beam's row holds its parent's contents, the rows are the request's own, and the copies
    are exactly the children beyond each parent's first, never reading a row they write."""
    rng = np.random.default_rng(k)
    rows = rng.choice(40, k, replace=False)  # a request's rows: anywhere in the batch, any order
    for parent in itertools.product(range(k), repeat=k):
        parent = np.array(parent)
        cache = np.arange(40) * 10  # row r holds 10 r: its beam's contents
        expected = cache[rows[parent]]  # the gather: next beam i holds beam parent[i]'s contents
        new, into, out_of = inherit(rows, parent)
        assert sorted(new.tolist()) == sorted(rows.tolist())
        assert not set(into.tolist()) & set(out_of.tolist())
        cache[into] = cache[out_of]
        assert cache[new].tolist() == expected.tolist()
        assert len(into) == k - len(set(parent.tolist()))
