"""Regressions found by ``benchmarks/soak.py`` (random faults and cancellations at scale).

Each test pins one leak the soak found, on the embedded server, small enough to debug.
"""

from __future__ import annotations

import anyio
import httpx
import pytest

import fluxstream
from fluxstream.server import FAULT_HEADER, ServerThread

pytestmark = pytest.mark.anyio

MESSAGES = [{"role": "user", "content": "soak finding"}]


async def test_aclose_from_another_task_before_the_response_head_returns_the_connection(
    server: ServerThread,
) -> None:
    """aclose() from another task while the request waited for its response head left the
    connection checked out of the pool forever (httpx, asyncio and trio; cancel() did not):
    with one pooled connection the next stream waited out the pool timeout."""
    # One connection in the pool: a stream that does not give it back starves the next one.
    http = httpx.AsyncClient(
        limits=httpx.Limits(max_connections=1), timeout=httpx.Timeout(10.0, pool=2.0)
    )
    async with fluxstream.AsyncClient(base_url=server.base_url, http_client=http) as client:
        for _ in range(2):
            stream = client.chat.stream(
                model="fluxstream-echo", messages=MESSAGES, max_tokens=20,
                extra_headers={FAULT_HEADER: "delay=0.2"},  # the head comes after 0.2 s
            )

            async def close_soon(stream: fluxstream.ReplyStream = stream) -> None:
                await anyio.sleep(0.05)  # while the request waits for the head
                await stream.aclose()

            with anyio.fail_after(1.5):  # not the 2 s pool timeout
                async with anyio.create_task_group() as tg:
                    tg.start_soon(close_soon)
                    async with stream:
                        async for _ in stream:
                            pass
            assert stream.reply.outcome is fluxstream.Outcome.CANCELLED
        with anyio.fail_after(1.5):
            reply = await client.chat.complete(
                model="fluxstream-echo", messages=MESSAGES, max_tokens=5
            )
        assert reply.outcome is fluxstream.Outcome.DONE
    await http.aclose()
