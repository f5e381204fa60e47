"""Bounded waits on observable state: the one polling loop of the tests, sync and async."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0, interval: float = 0.02) -> bool:
    """Poll predicate until true or timeout (bounded); whether it became true."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll `predicate` until it is true; fail the test after `timeout` seconds."""
    if not wait_until(predicate, timeout, interval):
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


async def until(cond: Callable[[], bool], what: str, tries: int = 1000) -> None:
    """Wait (bounded) until cond() holds."""
    for _ in range(tries):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")
