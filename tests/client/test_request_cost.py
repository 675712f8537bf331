"""Work the default client must not do per request (the cost of a request counts as much as
the cost of a delta when replies are short or arrive in a few large reads).

These are behaviour checks of what runs, not timings: each counts calls that the old code
made on every request and that cost tens of microseconds each.

* anyio's ``CancelScope.cancel()`` on asyncio formats the calling task's repr (~50 µs). The
  close of every stream used to cancel a scope to "unwind" a body that the aiohttp adapter's
  plain iterator never needs unwinding.
* Closing after the sentinel used to read on under a ``move_on_after`` scope for the body's
  end even when the transport already had it.
* The close of every stream used to enter a shielded cancel scope (~4 µs with anyio's
  bookkeeping) around a close of the aiohttp adapter's response that never waits, and the
  wait for the sentinel after every choice finished (``finish_grace``) an anyio deadline
  scope (~7 µs; asyncio's own timeout does it for ~4.5).
* aiohttp armed its per-read timer (``sock_read``) for the response head of every request,
  beside the stream's own deadline for the whole head: a timer and its cancels, ~8 µs of a
  request's CPU.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import fluxstream
from fluxstream import Timeouts
from fluxstream.server import serve

#: On asyncio: the default client's transport there is aiohttp, whose cost these tests count.
pytestmark = [pytest.mark.anyio, pytest.mark.asyncio_only]

MSG = [{"role": "user", "content": "hi there"}]
CLIENT_CODE = str(Path(fluxstream.__file__).parent)
SERVER_CODE = str(Path(fluxstream.__file__).parent / "server")


@pytest.fixture
async def server() -> AsyncIterator[Any]:
    async with serve(port=0) as srv:
        yield srv


@pytest.fixture
def scope_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Counts of anyio cancel scopes cancelled, entered, and deadline scopes opened
    (move_on_after) by the client."""
    from anyio._backends import _asyncio

    counts = {"cancel": 0, "move_on_after": 0, "enter": 0}
    cancel = _asyncio.CancelScope.cancel
    enter = _asyncio.CancelScope.__enter__
    move_on_after = anyio.move_on_after

    def by_client() -> bool:  # not the embedded server, which shares the event loop
        caller = sys._getframe(2).f_code.co_filename
        return CLIENT_CODE in caller and SERVER_CODE not in caller

    def by_close() -> bool:  # the close's drain (not finish_grace's wait, which is the reader's)
        return sys._getframe(2).f_code.co_name == "close"

    def counted_cancel(self: Any, *args: Any, **kwargs: Any) -> None:
        counts["cancel"] += by_client()
        cancel(self, *args, **kwargs)

    def counted_enter(self: Any) -> Any:
        counts["enter"] += by_client()
        return enter(self)

    def counted_move_on_after(*args: Any, **kwargs: Any) -> Any:
        counts["move_on_after"] += by_client() and by_close()
        return move_on_after(*args, **kwargs)

    monkeypatch.setattr(_asyncio.CancelScope, "cancel", counted_cancel)
    monkeypatch.setattr(_asyncio.CancelScope, "__enter__", counted_enter)
    monkeypatch.setattr("fluxstream._io.attempt.anyio.move_on_after", counted_move_on_after)
    yield counts


async def test_a_whole_stream_enters_no_cancel_scope_and_waits_for_nothing_at_close(
    server: Any, scope_calls: dict[str, int]
) -> None:
    async with fluxstream.AsyncClient(server.base_url, transport="aiohttp") as client:
        for _ in range(3):
            async with client.chat.stream(model="m", messages=MSG) as stream:
                async for _event in stream:
                    pass
            assert stream.reply.outcome == "done"
            assert stream.reply.text
    assert scope_calls == {"cancel": 0, "move_on_after": 0, "enter": 0}


async def test_leaving_early_cancels_no_scope_and_frees_the_connection(
    server: Any, scope_calls: dict[str, int]
) -> None:
    limits = fluxstream._client.httpx.Limits(max_connections=1)
    async with fluxstream.AsyncClient(
        server.base_url, transport="aiohttp", limits=limits,
        timeouts=Timeouts(connect=5.0, read=5.0, write=5.0, pool=5.0),
    ) as client:
        for _ in range(3):  # one connection: a leaked one would time out the next request
            async with client.chat.stream(model="m", messages=MSG) as stream:
                async for _event in stream:
                    break
            assert stream.reply.outcome == "cancelled"
    assert scope_calls["cancel"] == 0


async def test_the_head_is_bounded_by_one_deadline_not_also_by_aiohttps_read_timer(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiohttp.client_proto import ResponseHandler

    armed = []
    reschedule = ResponseHandler._reschedule_timeout

    def counted(self: Any) -> None:
        armed.append(bool(self._read_timeout))
        reschedule(self)

    monkeypatch.setattr(ResponseHandler, "_reschedule_timeout", counted)
    async with fluxstream.AsyncClient(
        server.base_url, transport="aiohttp",
        timeouts=Timeouts(connect=30.0, read=30.0, write=30.0, pool=30.0),
    ) as c:
        for _ in range(3):
            async with c.chat.stream(model="m", messages=MSG) as stream:
                async for _event in stream:
                    pass
            assert stream.reply.outcome == "done"
    # The embedded server shares the loop but not aiohttp: every call is the client's.
    assert armed and not any(armed)


async def test_the_wait_for_a_body_already_ended_takes_no_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Gemini reply has no end marker: once every candidate finished, the stream reads on
    for the body's end under ``finish_grace``. When the transport has the body's end
    already, that read returns at once: no timer is armed for it, and the reply is the same
    (``done``, its text and usage) as when one is."""
    import asyncio
    import json

    from fluxstream._io import channel as channel_module

    events = [
        {"candidates": [{"content": {"parts": [{"text": "Hel"}], "role": "model"}}],
         "usageMetadata": {"promptTokenCount": 2, "totalTokenCount": 2}, "modelVersion": "m"},
        {"candidates": [{"content": {"parts": [{"text": "lo"}], "role": "model"},
                         "finishReason": "STOP"}],
         "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 2,
                           "totalTokenCount": 4}, "modelVersion": "m"},
    ]
    body = b"".join(b"data: %s\r\n\r\n" % json.dumps(e).encode() for e in events)
    answer = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
              b"content-length: %d\r\n\r\n%s" % (len(body), body))

    class Upstream(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            if b"\r\n\r\n" in data:  # the request (its small body comes with its head)
                self.transport.write(answer)  # the whole answer in one write

    timers: list[float] = []
    timeout = asyncio.timeout

    def counted(seconds: float) -> Any:
        timers.append(seconds)
        return timeout(seconds)

    monkeypatch.setattr(channel_module.asyncio, "timeout", counted)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Upstream, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    replies = []
    try:
        async with fluxstream.AsyncClient(f"http://127.0.0.1:{port}", "k",
                                          transport="aiohttp") as client:
            for wait_for_the_end in (True, False):
                stream = client.gemini.stream(
                    model="m", contents=[{"role": "user", "parts": [{"text": "hi"}]}])
                async with stream:
                    controls = stream._reader.channel.attempt.controls
                    for _ in range(10_000):  # bounded: the end is one loop turn behind at most
                        if not wait_for_the_end or controls.body_complete():
                            break
                        await asyncio.sleep(0)
                    assert controls.body_complete() or not wait_for_the_end
                    async for _event in stream:
                        pass
                replies.append(stream.reply)
                if wait_for_the_end:
                    assert timers == []
    finally:
        server.close()
        await server.wait_closed()
    ended, other = replies
    assert ended.outcome == other.outcome == "done"  # a clean end after every finish
    assert ended.text == other.text == "Hello"
    assert ended.usage == other.usage and ended.usage is not None
