"""Where a request's body is decoded: inline on the event loop when it is small, in a few decoding threads
when it is large, so that one large body does not pause every other call of the loop gRPC and HTTP share.

The rule, one home for every handler: a body of more than INLINE_BYTES is decoded (UTF-8, JSON, tensors
to plain data) by `decoded` in one of DECODE_THREADS threads and awaited; a smaller one is decoded inline
(a thread hop costs more than it saves). What the measurements behind the numbers are, and what a thread
cannot take off the loop (the C JSON parser holds the GIL), is in docs/service.md "Limits on what a client
controls".
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

INLINE_BYTES = 64 * 1024  # bodies up to this size are decoded on the event loop
DECODE_THREADS = 2  # at most this many large bodies are decoded at once; more wait their turn

P = ParamSpec("P")
T = TypeVar("T")
_POOL = ThreadPoolExecutor(max_workers=DECODE_THREADS, thread_name_prefix="request-decode")


def off_loop(size: int) -> bool:
    """Whether a body of `size` bytes is decoded in a decoding thread rather than on the event loop."""
    return size > INLINE_BYTES


async def decoded(size: int, decode: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`decode(*args, **kwargs)` for a body of `size` bytes: inline when small, else in a decoding thread
    (bounded: DECODE_THREADS), awaited; its exceptions propagate. Cancelling the await abandons the result;
    the thread finishes that decoding on its own."""
    if not off_loop(size):
        return decode(*args, **kwargs)
    call = functools.partial(contextvars.copy_context().run, decode, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_POOL, call)
