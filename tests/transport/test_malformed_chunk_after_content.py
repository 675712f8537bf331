"""A malformed chunk in a streamed body is noticed at once, the same way on every transport.

A bad chunk-size line or chunk data without its CRLF breaks the body: on httpx the read fails
at once and the stream ends ``truncated`` (a drop, its cause ``RemoteProtocolError``). aiohttp's
parser failed inside the protocol without telling the body being read, so that read waited
the whole read timeout and the stream ended ``IdleTimeoutError``, also when the server closed
right after. A bad *first* chunk in the same packet as the head was a failed request
(``APIConnectionError``) on aiohttp and a drop on httpx: it is a drop on both.
"""

from __future__ import annotations

import time

import anyio
import httpx
import pytest
from scripted_http import LIFE, MSG, Conn, Script, chunk, chunked_head, upstream
from scripted_http import event as sse_event

import fluxstream
from fluxstream._retry import RetryPolicy

pytestmark = pytest.mark.anyio

TRANSPORTS = ["auto", "httpx"]
FIRST = sse_event("Hel")
PING = b": ping\n\n"
BROKEN = {
    "bad chunk-size line": b"zz\r\n",
    "chunk data without its CRLF": b"%x\r\n%sXX" % (len(PING), PING),
}


def content_then(
    broken: bytes, *, close: bool, together: bool = False, shown: anyio.Event | None = None
) -> Script:
    """``shown``: the broken framing waits until the client has the content (set by the
    test); without it, a pause (on a loaded machine both may come in one read)."""

    async def script(conn: Conn, index: int) -> None:
        await conn.read_request()
        if together:  # the head and the broken framing in one packet
            await conn.send(chunked_head() + broken)
        else:
            await conn.send(chunked_head() + chunk(FIRST))
            if shown is None:
                await anyio.sleep(0.1)
            else:
                with anyio.move_on_after(LIFE):  # the test's own bound reports a hang
                    await shown.wait()
            await conn.send(broken)
        if not close:
            await anyio.sleep(LIFE)

    return script


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("close", [True, False], ids=["then-close", "left-open"])
@pytest.mark.parametrize("fault", list(BROKEN))
async def test_a_malformed_chunk_after_content_ends_truncated_at_once(
    transport: str, fault: str, close: bool, anyio_backend: str
) -> None:
    shown = anyio.Event()
    script = content_then(BROKEN[fault], close=close, shown=shown)
    async with upstream(script) as up, fluxstream.AsyncClient(
        up.base, "k", transport=transport, retry=RetryPolicy.off(),
        timeouts=fluxstream.Timeouts(idle=30),
    ) as client:
        stream = client.chat.stream(model="m", messages=MSG)
        started = time.monotonic()
        with anyio.fail_after(5):
            async with stream:
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        shown.set()  # the content is the client's: now the broken framing
        took = time.monotonic() - started
    assert stream.outcome is fluxstream.Outcome.TRUNCATED
    assert stream.reply.text == "Hel"
    assert isinstance(stream.cause, httpx.RemoteProtocolError)
    assert took < 4.0, f"noticed after {took:.2f}s"  # not the 30 s idle timeout


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("fault", list(BROKEN))
async def test_a_bad_first_chunk_with_the_head_is_a_drop_on_every_transport(
    transport: str, fault: str, anyio_backend: str
) -> None:
    broken = BROKEN[fault] if fault.startswith("bad") else b"5\r\nhelloXX"
    script = content_then(broken, close=True, together=True)
    async with upstream(script) as up, fluxstream.AsyncClient(
        up.base, "k", transport=transport, retry=RetryPolicy.off(),
        timeouts=fluxstream.Timeouts(idle=30),
    ) as client:
        stream = client.chat.stream(model="m", messages=MSG)
        with anyio.fail_after(5):
            async with stream:
                async for _ in stream:
                    pass
    assert stream.outcome is fluxstream.Outcome.TRUNCATED
    assert isinstance(stream.cause, httpx.RemoteProtocolError)


@pytest.mark.asyncio_only  # the aiohttp adapter runs on asyncio
async def test_the_error_text_names_the_fault_not_an_http_status(anyio_backend: str) -> None:
    script = content_then(BROKEN["bad chunk-size line"], close=True)
    async with upstream(script) as up, fluxstream.AsyncClient(
        up.base, "k", transport="aiohttp", retry=RetryPolicy.off()
    ) as client:
        stream = client.chat.stream(model="m", messages=MSG)
        with anyio.fail_after(5):
            await stream.until_done()
    text = str(stream.cause)
    assert "chunk" in text.lower()
    assert "400" not in text and "message=" not in text
