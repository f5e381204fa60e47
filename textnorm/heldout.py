"""A larger held-out split: the test split's own stream continued past its pairs, minus every source the
corpus's other files hold.

The test split (textnorm/corpus.py) is the first `--test` pairs the generator draws from the corpus seed + 2,
with held-out filler words. Its classes hold about 100-450 sentences each in 2,000 pairs, so one wrong
sentence moves a class by up to a point. This module draws the same stream further (the test split's own
pairs first, checked to be the file's), and keeps the next `n` pairs whose source is in none of the
corpus directory's other files (training, supplements, valid, probe, near-miss): pairs no training run
saw, from the test split's distribution.

    python -m textnorm.heldout --corpus data/corpus --n 10000   # writes data/corpus/test_ext.tsv
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from textnorm.corpus import generate, word_lists

TEST_FILE = "test.tsv"
OUT_FILE = "test_ext.tsv"
TEST_SEED_OFFSET = 2  # textnorm/corpus.py `build`: the test split's seed is the corpus seed + 2


def sources(path: Path) -> list[str]:
    """The source column of a TSV of pairs."""
    return [line.split("\t", 1)[0] for line in path.read_text(encoding="utf-8").splitlines() if line]


def extend_test(corpus: Path, n: int, seed: int = 1234) -> list[tuple[str, str]]:
    """Up to n pairs drawn after the test split's from its stream, none of whose sources is in another file
    of `corpus` (`n` more are drawn, the seen ones dropped: the result may be shorter)."""
    test = sources(corpus / TEST_FILE)
    _, all_words = word_lists(seed)
    drawn = list(itertools.islice(generate(len(test) + n, seed + TEST_SEED_OFFSET, all_words), len(test) + n))
    if [s for s, _ in drawn[: len(test)]] != test:
        raise ValueError(f"{corpus / TEST_FILE} is not the stream of seed {seed}: regenerate the corpus")
    seen: set[str] = set()
    for path in sorted(corpus.glob("*.tsv")):
        if path.name not in (TEST_FILE, OUT_FILE):
            seen.update(sources(path))
    return [(s, t) for s, t in drawn[len(test):] if s not in seen]


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(prog="python -m textnorm.heldout", description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=Path("data/corpus"), help="the corpus directory")
    ap.add_argument("--n", type=int, default=10_000, help="pairs drawn past the test split's")
    ap.add_argument("--seed", type=int, default=1234, help="the corpus seed (textnorm.corpus --seed)")
    a = ap.parse_args(argv)
    pairs = extend_test(a.corpus, a.n, a.seed)
    out = a.corpus / OUT_FILE
    out.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    print(f"wrote {len(pairs)} pairs to {out} ({a.n - len(pairs)} of {a.n} drawn were in another file)")


if __name__ == "__main__":
    main()
