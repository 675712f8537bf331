"""``client.aclose()`` while a stream reads, and a stream started on a closed client.

Closing the client breaks every response it holds; a resumable stream took that for a drop
and reconnected: on the default asyncio transport through a *new* aiohttp session that nothing
ever closed ("Unclosed client session", a leaked socket, a stream left running on a client the
caller had closed); on httpx with a raw ``RuntimeError`` ("Cannot send a request, as the client
has been closed"). Later the default transport's stream raised ``RuntimeError: Connection
closed.`` or waited in aiohttp's read until the read timeout (its span ended only then), and
httpx's tried to resume first. A closed client now ends its streams at once and sends nothing
more: a stream with its response ends ``truncated`` with an ``APIConnectionError`` as its
cause, one still waiting for it (and one started on a closed client) raises that error
(typed), never retried; the observers see the end. The same on both transports (see also
``tests/transport/test_transport_parity.py``), and here on trio too.
"""

from __future__ import annotations

import logging
import time

import anyio
import anyio.abc
import pytest
from raw_upstream import HEAD, MSG, read_request, text, until_client_closes, upstream

import fluxstream
from fluxstream.errors import APIConnectionError

pytestmark = pytest.mark.anyio


class Closer:
    """Closes ``client`` once the server is parked (it sent what it sends, or nothing) and,
    unless only the head is awaited, the consumer has seen text: never a guessed sleep."""

    def __init__(self, client: fluxstream.AsyncClient, parked: anyio.Event, *,
                 text: bool = True) -> None:
        self.client = client
        self.parked = parked
        self.seen = anyio.Event()
        self.text = text
        #: When ``aclose()`` was called (``time.monotonic()``).
        self.at = 0.0

    async def close(self) -> None:
        await self.parked.wait()
        if self.text:
            await self.seen.wait()
        self.at = time.monotonic()
        await self.client.aclose()


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
        closer = Closer(client, up.parked)

        with anyio.fail_after(4):
            async with anyio.create_task_group() as tg:
                tg.start_soon(closer.close)
                async with stream:
                    async for event in stream:
                        if isinstance(event, fluxstream.TextDelta):
                            closer.seen.set()
        assert time.monotonic() - closer.at < 1.0
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


class Ends(fluxstream.StreamObserver):
    def __init__(self) -> None:
        self.outcomes: list[fluxstream.Outcome | None] = []

    def on_end(self, reply: object, stats: object) -> None:
        self.outcomes.append(getattr(reply, "outcome", None))


@pytest.mark.parametrize("state", ["before-the-head", "bytes-flowing", "inside-text-coalesce"])
async def test_closing_the_client_ends_a_stream_at_once_in_every_state(
    state: str, anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def script(sock: anyio.abc.SocketStream, i: int) -> None:
        await read_request(sock)
        if state == "before-the-head":
            await until_client_closes(up, sock, i)
            return
        await sock.send(HEAD + b"retry: 10\n\n" + text("Hel", "1"))
        if state == "inside-text-coalesce":
            await until_client_closes(up, sock, i)
            return
        up.parked.set()
        for n in range(2, 2000):  # bounded; ends when the client's end closes
            await sock.send(text("x", str(n)))
            await anyio.sleep(0.005)

    ends = Ends()
    async with upstream(script) as up:
        client = fluxstream.AsyncClient(up.base, observers=[ends])
        stream = client.chat.stream(model="m", messages=MSG)
        shown: list[str] = []
        raised: list[BaseException] = []
        closer = Closer(client, up.parked, text=state != "before-the-head")

        async def read() -> None:
            try:
                async with stream:
                    if state == "inside-text-coalesce":
                        async for piece in stream.text(coalesce=0.05):
                            shown.append(piece)
                            closer.seen.set()
                    else:
                        async for event in stream:
                            if isinstance(event, fluxstream.TextDelta):
                                shown.append(event.text)
                                closer.seen.set()
            except APIConnectionError as exc:
                raised.append(exc)

        with anyio.fail_after(4):
            async with anyio.create_task_group() as tg:
                tg.start_soon(closer.close)
                tg.start_soon(read)
        assert time.monotonic() - closer.at < 1.0
    assert up.connections == 1, "a request was sent after the client closed"
    assert stream.reply.text == "".join(shown)
    expected = (fluxstream.Outcome.FAILED if state == "before-the-head"
                else fluxstream.Outcome.TRUNCATED)
    assert stream.outcome is expected and ends.outcomes == [expected]
    assert isinstance(stream.cause, APIConnectionError)
    assert bool(raised) is (state == "before-the-head")
    went_on = [r.getMessage() for r in caplog.records
               if r.name == "fluxstream" and r.levelno >= logging.WARNING]
    assert not went_on, f"a retry or a resume on a closed client: {went_on}"


async def test_the_client_forgets_collected_streams_and_still_ends_the_open_ones() -> None:
    """The client keeps its streams weakly: one collected (never opened, or read to its end)
    leaves nothing behind, however many were made; one still referenced is ended by
    ``aclose()`` (it refuses to open), and a stream made twice into the registry once."""
    import gc

    client = fluxstream.AsyncClient("http://127.0.0.1:9/v1", "k")
    state = client._settings.state
    kept = client.chat.stream(model="m", messages=MSG)
    for _ in range(500):
        client.chat.stream(model="m", messages=MSG)  # dropped at once
    gc.collect()
    assert [ref() for ref in state.streams] == [kept]
    state.adopt(kept)
    assert len(state.streams) == 1
    await client.aclose()
    assert not state.streams
    with pytest.raises(APIConnectionError, match="client was closed"):
        async with kept:
            pass
    late = client.chat.stream(model="m", messages=MSG)  # made on the closed client
    assert not state.streams
    with pytest.raises(APIConnectionError):
        await late.__aenter__()
