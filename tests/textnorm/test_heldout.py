"""The larger held-out split continues the test split's stream and holds no source another corpus file has."""

from __future__ import annotations

from pathlib import Path

import pytest

from textnorm.corpus import build
from textnorm.heldout import extend_test, sources
from textnorm.verbalize import verbalize

SEED = 77


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small corpus whose training split repeats some of the test stream's frame sentences."""
    out = tmp_path_factory.mktemp("corpus")
    build(out, 3000, 20, 30, SEED, n_probe=10)
    return out


def test_pairs_are_new_to_every_other_file_and_read_by_the_rules(corpus: Path) -> None:
    pairs = extend_test(corpus, 400, SEED)
    others = set().union(*(sources(p) for p in corpus.glob("*.tsv")))
    assert 0 < len(pairs) <= 400
    assert not {s for s, _ in pairs} & others
    assert len({s for s, _ in pairs}) == len(pairs)
    assert all(t == verbalize(s) for s, t in pairs)


def test_the_stream_goes_on_past_the_test_split(corpus: Path) -> None:
    longer = extend_test(corpus, 400, SEED)
    shorter = extend_test(corpus, 200, SEED)
    assert shorter == longer[: len(shorter)]


def test_a_test_split_of_another_stream_is_refused(corpus: Path, tmp_path: Path) -> None:
    for f in corpus.glob("*.tsv"):
        (tmp_path / f.name).write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
    lines = (tmp_path / "test.tsv").read_text(encoding="utf-8").splitlines()
    (tmp_path / "test.tsv").write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not the stream"):
        extend_test(tmp_path, 10, SEED)
