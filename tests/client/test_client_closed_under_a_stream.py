"""``client.aclose()`` while a stream reads, and a stream started on a closed client.

Closing the client breaks every response it holds; a resumable stream took that for a drop
and reconnected: on the default asyncio transport through a *new* aiohttp session that nothing
ever closed ("Unclosed client session", a leaked socket, a stream left running on a client the
caller had closed); on httpx with a raw ``RuntimeError`` ("Cannot send a request, as the client
has been closed"). A closed client now sends nothing more: the stream ends ``truncated`` with
an ``APIConnectionError`` as its cause, and a stream started on a closed client raises that
error (typed), never retried.
"""

from __future__ import annotations

import time

import anyio
import anyio.abc
import pytest
from raw_upstream import HEAD, MSG, read_request, text, until_client_closes, upstream

import fluxstream
from fluxstream.errors import APIConnectionError

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("transport", ["auto", "httpx"])
async def test_closing_the_client_ends_its_streams_without_a_reconnect(
    transport: str, anyio_backend: str
) -> None:
    async def script(sock: anyio.abc.SocketStream, i: int) -> None:
        await read_request(sock)
        await sock.send(HEAD + b"retry: 10\n\n" + text("Hel", "1"))
        await until_client_closes(up, sock, i)

    async with upstream(script) as up:
        client = fluxstream.AsyncClient(up.base, transport=transport)
        stream = client.chat.stream(model="m", messages=MSG)
        closed_at = 0.0

        async def close_the_client() -> None:
            nonlocal closed_at
            await up.parked.wait()
            await anyio.sleep(0.2)
            closed_at = time.monotonic()
            await client.aclose()

        with anyio.fail_after(4):
            async with anyio.create_task_group() as tg:
                tg.start_soon(close_the_client)
                async with stream:
                    async for _ in stream:
                        pass
        assert time.monotonic() - closed_at < 1.0
        await anyio.sleep(0.1)
        assert up.connections == 1, "reconnected on a closed client"
        assert stream.outcome is fluxstream.Outcome.TRUNCATED
        assert stream.reply.text == "Hel"
        assert isinstance(stream.cause, APIConnectionError)
        aio = getattr(client.http_client, "_aio", None)
        assert aio is None or aio._session is None, "a new aiohttp session was opened"


@pytest.mark.parametrize("transport", ["auto", "httpx"])
async def test_a_stream_on_a_closed_client_is_a_typed_error(
    server: object, transport: str, anyio_backend: str
) -> None:
    client = fluxstream.AsyncClient(server.base_url, transport=transport)  # type: ignore[attr-defined]
    await client.aclose()
    stream = client.chat.stream(model="m", messages=MSG)
    with anyio.fail_after(3), pytest.raises(APIConnectionError, match="closed"):
        async with stream:
            pass
    assert stream.outcome is fluxstream.Outcome.FAILED
    assert stream.stats.attempts == 0
    assert server.records.requests == []  # type: ignore[attr-defined]
