"""The check that answers leak no internals (tests/support/clean_messages.py), used by the property tests,
the fuzz driver and the soak."""

from __future__ import annotations

import pytest

from tests.support.clean_messages import internals_in
from tests.support.hostile import check_message


def test_clean_message_check_can_fail() -> None:
    """The message check flags tracebacks, paths and class names, and passes the server's own words."""
    for leaky in ["Traceback (most recent call last)", 'File "/srv/app/codec.py", line 3', "KeyError: 'x'",
                  "InvalidTensor: bad", "raised QueueFull", "at 0x7f3a2b1c9d80"]:
        assert internals_in(leaky), leaky
    assert internals_in("text 0 is empty") is None
    assert internals_in("parameter beam_size must be >= 1, got 0") is None


def test_a_message_may_quote_what_the_client_sent() -> None:
    """A code the client sent that reads like a file name is the client's own text, whole or cut short;
    internals beside it are still flagged."""
    check_message("unknown target_language '.py'; this model knows 7 languages", echoed=[".py"])
    long_code = "a" * 18 + ".py" + "x" * 30
    check_message(f"unknown source_language {repr(long_code)[:25]}...'", echoed=[long_code])
    with pytest.raises(AssertionError, match="internals"):
        check_message("unknown target_language '.py'", echoed=[])
    with pytest.raises(AssertionError, match="internals"):
        check_message("unknown '.py' in File \"/srv/app/codec.py\", line 3", echoed=[".py"])
