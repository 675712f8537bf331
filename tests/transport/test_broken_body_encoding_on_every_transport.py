"""A body whose content encoding breaks mid-stream fails the same way on every transport.

httpx raises ``DecodingError`` for a gzip stream that turns into garbage: the stream ends
``failed`` with ``StreamFailedError`` and the partial reply (a corrupt body is not a drop that a
reconnect could fix). The default asyncio transport mapped aiohttp's ``ClientPayloadError``
(caused by ``ContentEncodingError``) onto ``RemoteProtocolError``: a drop, so the stream ended
``truncated`` — or resumed by ``Last-Event-ID`` into the same broken encoding. The adapter now
maps it to ``httpx.DecodingError``, as httpx itself raises.
"""

from __future__ import annotations

import zlib

import anyio
import anyio.abc
import pytest
from raw_upstream import LIFE, MSG, Script, read_request, text, upstream

import fluxstream
from fluxstream.errors import StreamFailedError

pytestmark = pytest.mark.anyio

GZIP_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
    b"connection: close\r\n\r\n"
)


def gzip_then_garbage(shown: anyio.Event) -> Script:
    """Good gzip with ``Hel``, then garbage once the client has it (``shown``, set by the
    test: a fixed pause let both come in one read on a loaded machine)."""

    async def script(sock: anyio.abc.SocketStream, i: int) -> None:
        await read_request(sock)
        compressor = zlib.compressobj(wbits=31)
        good = compressor.compress(text("Hel", "1")) + compressor.flush(zlib.Z_SYNC_FLUSH)
        await sock.send(GZIP_HEAD + good)
        with anyio.move_on_after(LIFE):  # the test's own bound reports a hang
            await shown.wait()
        await sock.send(b"\xff" * 64)  # not deflate data
        await anyio.sleep(0.5)

    return script


@pytest.mark.parametrize("transport", ["auto", "httpx"])
async def test_a_broken_gzip_body_fails_with_the_partial_reply(
    transport: str, anyio_backend: str
) -> None:
    shown = anyio.Event()
    async with upstream(gzip_then_garbage(shown)) as up, fluxstream.AsyncClient(
        up.base, transport=transport
    ) as c:
        stream = c.chat.stream(model="m", messages=MSG)
        with anyio.fail_after(4), pytest.raises(StreamFailedError) as info:
            async with stream:
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        shown.set()
        assert up.connections == 1  # not a drop: nothing to resume
    assert stream.outcome is fluxstream.Outcome.FAILED
    assert info.value.reply is not None and info.value.reply.text == "Hel"
