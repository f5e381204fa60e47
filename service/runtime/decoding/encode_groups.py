"""Which new requests the encoder runs together: sources sorted by length, cut where padding costs more than
another run.

An encoder run pads every source to the longest of the run, and a padded position costs as much as a real one
in every projection and feed-forward layer. Requests that join a batch together are therefore encoded in
groups of similar length: the lengths are sorted and cut into the groups that minimise the padded tokens plus
`overhead_tokens` per run (an exact dynamic programme over the sorted lengths). RUN_OVERHEAD_TOKENS stands for
a run's fixed cost (its kernels' inefficiency with few rows and the host's work per run); it is set above the
costs measured (docs/records/encoder-length-groups.md), so that a split must save clearly more padding than
the run costs. A request's K/V do not depend on the requests that share its run: every position beyond a
source is masked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from service.runtime.cache.devicemem import CacheTensor

RUN_OVERHEAD_TOKENS = 64  # the padded tokens one more encoder run is taken to cost (module docstring)
Encoded = list[tuple[np.ndarray, list[CacheTensor]]]  # (indices of a group's sources, their K/V)


@dataclass(frozen=True)
class EncodeGrouping:
    """How a DecodeBatch groups the requests it adds at once into encoder runs (module docstring)."""

    overhead_tokens: int = RUN_OVERHEAD_TOKENS

    def __post_init__(self) -> None:
        if self.overhead_tokens < 0:
            raise ValueError(f"overhead_tokens must be >= 0, got {self.overhead_tokens}")

    def groups(self, lengths: Sequence[int]) -> list[np.ndarray]:
        """Indices into `lengths`, each group ascending, groups shortest first, minimising the sum over
        groups of overhead_tokens + len(group) * the group's longest."""
        if len(lengths) < 2 or min(lengths) == max(lengths):
            return [np.arange(len(lengths))] if len(lengths) else []  # one run pads nothing
        order = np.argsort(np.asarray(lengths, np.int64), kind="stable")
        ls = np.asarray(lengths, np.int64)[order]
        best = np.zeros(len(ls) + 1, np.int64)  # best[j]: least cost of the j shortest sources
        cut = np.zeros(len(ls) + 1, np.int64)  # cut[j]: where the last group of that split starts
        for j in range(1, len(ls) + 1):
            costs = best[:j] + self.overhead_tokens + (j - np.arange(j)) * ls[j - 1]  # last: ls[i:j]
            cut[j] = int(np.argmin(costs))
            best[j] = costs[cut[j]]
        groups, j = [], len(ls)
        while j > 0:
            groups.append(np.sort(order[cut[j]:j]))
            j = int(cut[j])
        return groups[::-1]

    def encode(self, encode: Callable[[list[Sequence[int]]], list[CacheTensor]],
               sources: Sequence[Sequence[int]]) -> Encoded:
        """Every group's encoder run, all done before this returns (a failing run leaves nothing half
        done)."""
        return [(g, encode([sources[i] for i in g])) for g in self.groups([len(s) for s in sources])]


BY_LENGTH = EncodeGrouping()  # the default: groups of similar length, RUN_OVERHEAD_TOKENS per run


def rows_by_group(encoded: Encoded, rows: np.ndarray, owner: np.ndarray
                  ) -> Iterator[tuple[np.ndarray, list[CacheTensor], np.ndarray]]:
    """For each group: the rows whose request (owner[i], an index into the sources) is in it, the group's
    K/V, and each such row's request as an index into the group."""
    if len(encoded) == 1:  # one run of every source: owner already indexes it
        yield rows, encoded[0][1], owner
        return
    for members, enc in encoded:
        mine = np.isin(owner, members)
        yield rows[mine], enc, np.searchsorted(members, owner[mine])
