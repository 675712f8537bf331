"""``first_token_timeout`` counts from the request, across the retries before content.

README: ``first_token_timeout`` — no content within that many seconds of the request:
``FirstTokenTimeoutError``. A server that sent a head and then only pings was held to it across
retries already, but the wait for a response head was bounded per attempt only: with a silent
server every retry got the whole limit again, so ``first_token_timeout=1`` failed after ~3.5 s
(three heads and two backoffs) with ``APITimeoutError``; and a backoff (``Retry-After: 5``) slept
past the deadline. Each head wait and backoff now ends at the first token's deadline: a head
that has not come by then is ``APITimeoutError`` (README: the response head must arrive within
``first_token_timeout``), a backoff that reaches it ``FirstTokenTimeoutError``.
"""

from __future__ import annotations

import time

import anyio
import anyio.abc
import pytest
from raw_upstream import MSG, read_request, upstream

import fluxstream
from fluxstream import Timeouts
from fluxstream._retry import RetryPolicy
from fluxstream.errors import APITimeoutError, FirstTokenTimeoutError, StreamError

pytestmark = pytest.mark.anyio

#: The first-token timeout. A retry that outlived it would take another ``LIMIT`` and its
#: backoff (silent) or the 5 s retry-after (busy): well past the bound's 1 s of room for a
#: loaded worker (with 1 s and 0.4 s of room the two were 0.9 s apart).
LIMIT = 2.0
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: 5\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
)


async def silent(sock: anyio.abc.SocketStream, i: int) -> None:
    await read_request(sock)
    await anyio.sleep(6)


async def busy(sock: anyio.abc.SocketStream, i: int) -> None:
    await read_request(sock)
    await sock.send(BUSY)


@pytest.mark.parametrize(
    ("script", "error"), [(silent, APITimeoutError), (busy, FirstTokenTimeoutError)]
)
async def test_retries_never_outlive_the_first_token_timeout(
    script: object, error: type[Exception], anyio_backend: str
) -> None:
    policy = RetryPolicy(max_attempts=3, base_delay=0.3, max_delay=8)
    async with upstream(script) as up, fluxstream.AsyncClient(  # type: ignore[arg-type]
        up.base, timeouts=Timeouts(first_token=LIMIT), retry=policy
    ) as c:
        started = time.monotonic()
        stream = c.chat.stream(model="m", messages=MSG)
        with anyio.fail_after(7), pytest.raises(error):
            async with stream:
                async for _ in stream:
                    pass
        took = time.monotonic() - started
    assert LIMIT - 0.05 < took < LIMIT + 1.0, took
    assert stream.outcome is fluxstream.Outcome.FAILED
    assert issubclass(error, StreamError) or up.connections == 1  # the head wait: no retry
