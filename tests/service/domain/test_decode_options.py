"""DecodeOptions.resolved on hostile numbers, property-based (hypothesis)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from service.domain.errors import InvalidInput
from service.domain.types import DecodeOptions
from tests.support import hostile
from tests.support.properties import FAST, MAX_BEAM, MAX_LEN

numbers = st.one_of(st.integers(), st.integers(-(2**70), 2**70), st.floats(), st.booleans(), st.none(),
                    st.sampled_from([10**400, -(10**400), 10**5000, math.nan, math.inf]))


@FAST
@given(beam_size=st.one_of(st.integers(1, MAX_BEAM), numbers), n_best=st.one_of(st.integers(1, 3), numbers),
       alpha=st.one_of(st.floats(0, 2), numbers), max_new_tokens=st.one_of(st.integers(1, MAX_LEN), numbers))
def test_decode_options_resolve_within_limits_or_refuse(beam_size, n_best, alpha, max_new_tokens) -> None:
    """DecodeOptions.resolved on any numbers (NaN, inf, negative, huge, bool, None): within the limits
    and equal to what was asked, or InvalidInput naming the option."""
    asked = DecodeOptions(beam_size=beam_size, n_best=n_best, length_penalty=alpha,
                          max_output_tokens=max_new_tokens)
    try:
        resolved = asked.resolved(MAX_LEN, MAX_BEAM)
    except InvalidInput as exc:
        hostile.check_message(str(exc))
        names = ("beam_size", "n_best", "length_penalty", "max_output_tokens")
        assert any(name in str(exc) for name in names)
        return
    hostile.check_resolved(resolved, MAX_LEN, MAX_BEAM)
    expected = (1 if beam_size is None else beam_size, n_best, None if alpha is None else float(alpha))
    assert (resolved.beam_size, resolved.n_best,
            resolved.length_penalty) == expected  # None: the model's defaults
    assert resolved.max_output_tokens == (MAX_LEN - 1 if max_new_tokens is None else max_new_tokens)
