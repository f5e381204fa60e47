"""How many decoder steps one ONNX Runtime run takes: the multi-step policy of a DecodeBatch.

A bundle's multi-step decoder (export/multistep.py) runs up to K greedy steps in one call: no
Python, binding or argmax between them. That can pay only where the per-step host cost is a large
share of a step: on the CPU provider it measured even in process with one row, 3-20% faster
through the server at concurrency 1, and slower with more rows, where the loop's copies of the
cache (the CPU attention kernel cannot write it in place inside a loop) outweigh it; a GPU is
where it should pay (`make gpu-check` measures it). docs/performance.md has the measurements.

A batch takes K steps at once only when nothing between them needs the host: every request is
greedy, no rule of the bundle applies to every step, no forced first token is pending, and no
request reaches its last allowed token (where a rule may force eos) within the K steps. Requests
join, leave and are cancelled between runs, and a streaming request gets the tokens of each run
as it returns, so K also bounds how long a newcomer waits to join.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_STEPS_PER_CALL = 1  # measured on the CPU provider: several steps per run did not pay
# The multi-step decoder is a second session over the decoder's weights. "packed": each session keeps
# the kernels' prepacked copy (fastest: one more copy of the decoder's weights); "shared": neither
# prepacks and both read the bundle's one weights file mapping (opus-mt shape: 537 -> 339 MiB, about
# 20% slower on the CPU; docs/performance.md).
MULTISTEP_WEIGHTS = ("packed", "shared")


@dataclass(frozen=True)
class StepPolicy:
    """Steps per decoder run: up to `steps_per_call` while the batch has at most `max_rows` rows (0: any);
    `weights`: how the two decoder sessions hold their weights (MULTISTEP_WEIGHTS)."""

    steps_per_call: int = DEFAULT_STEPS_PER_CALL
    max_rows: int = 0
    weights: str = "packed"

    def __post_init__(self) -> None:
        if self.steps_per_call < 1:
            raise ValueError(f"steps_per_call must be >= 1, got {self.steps_per_call}")
        if self.max_rows < 0:
            raise ValueError(f"the multi-step row limit must be >= 0, got {self.max_rows}")
        if self.weights not in MULTISTEP_WEIGHTS:
            raise ValueError(f"multi-step weights must be one of {', '.join(MULTISTEP_WEIGHTS)}, "
                             f"got {self.weights!r}")

    def allows(self, rows: int) -> bool:
        """Whether a batch of `rows` rows may take several steps per run."""
        return self.steps_per_call > 1 and not 0 < self.max_rows < rows

    def steps(self, rows: int, left: int) -> int:
        """Steps for the next run of a batch of `rows` rows whose requests need at most `left` more
        tokens before the host must see a step (1: a single-step run)."""
        return max(1, min(self.steps_per_call, left)) if self.allows(rows) else 1


SINGLE_STEP = StepPolicy(1)  # one step per run: the decoder file only
