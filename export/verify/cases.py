"""The decoder-step shapes that verification runs the exported graphs on."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    """One decoder-step shape: batch, source length, cached length, new tokens."""

    batch: int
    src_len: int
    past_len: int
    new_len: int


# batch 1/3/4/5, src_len 1..64, empty and non-empty cache, one and several new tokens
# (an in-place decoder's one-token cases give the rows past lengths past_len, past_len-1, ...)
DEFAULT_CASES = (
    Case(1, 1, 0, 1), Case(5, 64, 0, 3), Case(1, 17, 6, 1), Case(5, 9, 4, 3),
    Case(3, 33, 0, 1), Case(3, 2, 12, 2), Case(5, 40, 1, 1), Case(4, 11, 9, 1),
)


def fit_case(case: Case, max_len: int) -> Case:
    """Shrink a case to the model's position table (src_len and past_len + new_len <= max_len)."""
    new_len = min(case.new_len, max_len)
    return Case(case.batch, min(case.src_len, max_len), min(case.past_len, max_len - new_len), new_len)
