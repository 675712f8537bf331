"""A stream the caller stopped never moves to a fallback: ``stream.cancel()``, ``aclose()`` and
a closed client (``AsyncClient.aclose()``) end it where it is, the fallback is never asked
(the rule's table row is in tests/sansio/test_failover_rules.py). The primary has sent text
and parks; the stop comes from the consumer's task or from another one while its read waits.
Real sockets, asyncio and trio, aiohttp and httpx (``--transport httpx``).
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc
import pytest
from raw_upstream import HEAD, LIFE, MSG, read_request, text, until_client_closes, upstream

import fluxstream
from fluxstream import Outcome, Upstream

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("how", ["cancel", "aclose", "client"])
async def test_a_stopped_stream_is_never_handed_off(how: str) -> None:
    async def primary_script(sock: anyio.abc.SocketStream, index: int) -> None:
        await read_request(sock)
        await sock.send(HEAD + text("Hello, ") + text("wor"))
        await until_client_closes(primary, sock, index)

    async def fallback_script(sock: anyio.abc.SocketStream, index: int) -> None:
        await read_request(sock)  # counted: it must never come

    events: list[Any] = []
    async with upstream(primary_script) as primary, upstream(fallback_script) as fallback:
        client = fluxstream.AsyncClient(
            primary.base, api_key="k", fallbacks=[Upstream(fallback.base)],
        )
        async with client:
            stream = client.chat.stream(model="m", messages=MSG)

            async def stop() -> None:
                await primary.parked.wait()
                if how == "cancel":
                    stream.cancel()
                elif how == "aclose":
                    await stream.aclose()
                else:
                    await client.aclose()

            with anyio.fail_after(LIFE):
                async with anyio.create_task_group() as tg, stream:
                    async for event in stream:
                        events.append(event)
                        if event.type == "text" and stream.reply.text == "Hello, wor":
                            tg.start_soon(stop)  # while the next read waits
            await primary.wait_closed(0)
        assert fallback.connections == 0
    assert not any(e.type == "handoff" for e in events)
    reply = stream.reply
    expected = Outcome.TRUNCATED if how == "client" else Outcome.CANCELLED
    assert reply.outcome is expected, (reply.outcome, reply.end_reason)
    assert reply.text == "Hello, wor"
    (segment,) = reply.segments  # the primary's only: nobody else was asked
    assert segment.upstream != client.fallbacks[0].label
    assert segment.kind == expected.value and segment.end == len("Hello, wor")
