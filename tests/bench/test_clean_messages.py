"""The check that answers leak no internals (bench/clean_messages.py), used by the property tests,
the fuzz driver and the soak."""

from __future__ import annotations

from bench.clean_messages import internals_in


def test_clean_message_check_can_fail() -> None:
    """The message check flags tracebacks, paths and class names, and passes the server's own words."""
    for leaky in ["Traceback (most recent call last)", 'File "/srv/app/codec.py", line 3', "KeyError: 'x'",
                  "InvalidTensor: bad", "raised QueueFull", "at 0x7f3a2b1c9d80"]:
        assert internals_in(leaky), leaky
    assert internals_in("text 0 is empty") is None
    assert internals_in("parameter beam_size must be >= 1, got 0") is None
