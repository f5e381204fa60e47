"""Request bodies of the HTTP server: a size limit, a time limit, strict JSON.

Every failure is the client's and says why: a body larger than the limit is 413 before it is read (its
Content-Length) or as soon as it passes the limit; a body that does not arrive in full within `timeout_s`
(slow, or shorter than its Content-Length on an open connection) is 408 and its connection is closed; a body
the client cut short, malformed JSON and JSON of the wrong shape are InvalidInput (400). A large body is
decoded off the event loop (service/api/offload.py: `read_object`, and `offload.decoded` for other decoders).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from service.api import offload
from service.api.http.errors import RequestRejected
from service.domain.errors import InvalidInput

LIMITS_KEY = web.AppKey("body_limits", tuple)  # (max_bytes, timeout_s) of the application


async def read_body(request: web.Request) -> bytes:
    """The whole body within the application's size and time limits."""
    max_bytes, timeout_s = request.app[LIMITS_KEY]
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise RequestRejected(413, f"the request body is {declared} bytes; this server accepts at most "
                                   f"{max_bytes} (--max-message-bytes)")
    try:
        async with asyncio.timeout(timeout_s):
            return await request.read()
    except TimeoutError:
        got = "" if declared is None else f" of the {declared} bytes its Content-Length announced"
        raise RequestRejected(408, f"the request body did not arrive in full{got} within {timeout_s:g} s "
                                   "(--http-read-timeout-s)") from None
    except web.HTTPRequestEntityTooLarge:
        raise RequestRejected(413, f"the request body is larger than {max_bytes} bytes, the most this server "
                                   "accepts (--max-message-bytes)") from None
    except (ConnectionError, EOFError, ValueError) as exc:  # aiohttp's ContentLengthError, ...
        raise InvalidInput(f"the request body ended before its Content-Length: {exc}") from None


def parse_json(raw: bytes, what: str = "request body", empty: Any = None) -> Any:
    """The JSON value of `raw` (`empty` for an empty body when given); InvalidInput with the parser's
    reason otherwise."""
    if not raw.strip() and empty is not None:
        return empty
    try:
        text = raw.decode("utf-8")  # JSON between systems is UTF-8 (RFC 8259): no guessing UTF-16 / 32
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"the {what} is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"the {what} is not valid JSON: {exc}") from None


def json_object(raw: bytes, what: str = "request body", empty_ok: bool = False) -> dict[str, Any]:
    """A JSON object of `raw`; an empty body is {} when `empty_ok`."""
    value = parse_json(raw, what, {} if empty_ok else None)
    if not isinstance(value, dict):
        raise InvalidInput(f"the {what} must be a JSON object, got {type(value).__name__}")
    return value


async def read_object(request: web.Request, what: str = "request body",
                      empty_ok: bool = False) -> dict[str, Any]:
    """The body read within the limits, as a JSON object (`json_object`), decoded where offload's rule
    says (a large body in a decoding thread)."""
    raw = await read_body(request)
    return await offload.decoded(len(raw), json_object, raw, what, empty_ok)
