"""Bounded waits on observable state: the tests' one polling loop, for threads and for coroutines.

Both fail the test (AssertionError naming what was awaited) when the state does not come in time; the
short sleeps between polls are the loop's own back-off, never a synchronisation by themselves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

Predicate = Callable[[], bool]


def wait_until(predicate: Predicate, what: str, timeout: float = 15.0, interval: float = 0.02) -> None:
    """Poll `predicate` (blocking this thread) until it is true; fail after `timeout` seconds."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


async def until(predicate: Predicate, what: str, timeout: float = 15.0, interval: float = 0.01) -> None:
    """Poll `predicate` from a coroutine (the event loop runs meanwhile) until it is true; fail after
    `timeout` seconds."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)
