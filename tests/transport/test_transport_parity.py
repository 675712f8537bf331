"""Every transport fluxstream can build behaves the same on every fault: parity as a contract.

The client fluxstream creates runs on aiohttp under asyncio (``transport="aiohttp"``, the
default there) or on httpx (``transport="httpx"``). A default is trusted blindly, so each fault
below states the one behaviour *both* must have — the outcome, the error class (the stream's
``cause``, down to the first httpx exception under it, and what the loop raised), the text kept
and a time bound — and runs it on each. httpx is the reference wherever it is right.

The peer is :mod:`fault_server`: a raw asyncio server writing exact bytes. A fault that must
come after the client has read something waits for the consumer to say so (``srv.mark``), never
for a guessed sleep. Retries and resumes are off: what is compared is the transport, not the
recovery on top of it. The client's read timeout is :data:`READ_TIMEOUT` (30 s), so a fault
that is "noticed at once" (within :data:`AT_ONCE`) cannot pass by waiting the timeout out.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
import warnings
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fault_server import (
    DONE,
    Conn,
    FaultServer,
    chat_body,
    chunked,
    closed_port,
    deflate,
    finish,
    full_backlog,
    gzip,
    serve_faults,
    sse_head,
    syn_sent_to,
    text,
)

import fluxstream
from fluxstream import Outcome
from fluxstream._io import default_client
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.errors import (
    APIConnectionError,
    APITimeoutError,
    ContentTypeError,
    FluxstreamError,
    NotAReplyError,
    StreamFailedError,
)

pytestmark = pytest.mark.asyncio

#: Every transport the client can create (``AsyncClient(transport=...)``, "auto" being a choice
#: between them): a new one is held to the same behaviour by being named there.
TRANSPORTS = tuple(sorted(t for t in default_client.TRANSPORTS if t != "auto"))
MSG = [{"role": "user", "content": "hi"}]
#: The client's read (and connect) timeout: far above every bound, so waiting it out fails.
READ_TIMEOUT = 30.0
#: "At once": a fault the client can see in the bytes it has must end the stream this soon.
AT_ONCE = 2.0


# ------------------------------------------------------------------ running one stream


def client(base: str, transport: str, timeout: float = READ_TIMEOUT, **options: Any) -> Any:
    return fluxstream.AsyncClient(
        base,
        api_key="sk-parity",
        transport=transport,
        timeouts=fluxstream.Timeouts(connect=timeout, read=timeout, write=timeout, pool=timeout),
        retry=RetryPolicy.off(),
        resume=ResumePolicy.off(),
        **options,
    )


async def consume(stream: Any, srv: FaultServer) -> None:
    """Read the whole stream, telling the server what the client has seen."""
    async with stream:
        srv.mark("open")  # the response head has been read
        async for event in stream:
            if isinstance(event, fluxstream.TextDelta):
                srv.mark("text")
            elif isinstance(event, fluxstream.Finish):
                srv.mark("finish")


def chain(exc: BaseException | None) -> tuple[type[BaseException], ...]:
    """The error's class, then what caused it, down to the first httpx exception: the level
    at which every transport speaks the same language (aiohttp's own classes lie below)."""
    found: list[type[BaseException]] = []
    while exc is not None and len(found) < 4:
        found.append(type(exc))
        if type(exc).__module__.partition(".")[0] == "httpx":
            break
        exc = exc.__cause__
    return tuple(found)


def names(classes: tuple[type[BaseException], ...]) -> str:
    return " <- ".join(c.__name__ for c in classes) or "none"


@dataclass
class Seen:
    outcome: Outcome | None
    text: str
    cause: tuple[type[BaseException], ...]
    raised: tuple[type[BaseException], ...]
    took: float

    def __str__(self) -> str:
        return (
            f"outcome={self.outcome and self.outcome.value} text={self.text!r} "
            f"cause={names(self.cause)} raised={names(self.raised)} took={self.took:.2f}s"
        )


async def run_one(
    srv: FaultServer, transport: str, within: float, timeout: float = READ_TIMEOUT
) -> Seen:
    async with client(srv.base, transport, timeout) as c:
        stream = c.chat.stream(model="m", messages=MSG)
        raised: BaseException | None = None
        started = time.monotonic()
        try:
            async with asyncio.timeout(within):
                try:
                    await consume(stream, srv)
                except Exception as exc:  # compared below: whatever it is, it must match
                    raised = exc
        except TimeoutError:
            took = time.monotonic() - started
            pytest.fail(f"{transport}: the stream was not over within {within}s ({took:.1f}s)")
        took = time.monotonic() - started
        return Seen(stream.outcome, stream.reply.text, chain(stream.cause), chain(raised), took)


# ------------------------------------------------------------------ the faults, one script each

Script = Callable[[Conn], Awaitable[None]]
CLOSE = b"connection: close"
CHUNKED = b"transfer-encoding: chunked"


def whole(head: bytes, body: bytes) -> Script:
    async def script(conn: Conn) -> None:
        await conn.request()
        await conn.send(head + body)

    return script


def after(head_and_first: bytes, mark: str, then: bytes, *, reset: bool = False) -> Script:
    """Send ``head_and_first``; once the client has seen ``mark`` (``"open"``: the head;
    ``"text"``, ``"finish"``: such an event; ``""``: at once, in the same write), send
    ``then``; then reset, or hold the connection open until the client closes it."""

    async def script(conn: Conn) -> None:
        await conn.request()
        await conn.send(head_and_first)
        if mark:
            await conn.server.reached(mark)
        if then:
            await conn.send(then)
        if reset:
            conn.reset()
        else:
            await conn.until_closed()

    return script


async def close_mid_event(conn: Conn) -> None:
    await conn.request()
    await conn.send(sse_head(CHUNKED) + chunked(text("Hel"), last=False))
    await conn.server.reached("text")
    await conn.send(chunked(text("lo")[:20], last=False))


async def close_before_head(conn: Conn) -> None:
    await conn.request()


async def reset_before_head(conn: Conn) -> None:
    await conn.request()
    conn.reset()


async def informational_apart(conn: Conn) -> None:
    await conn.request()
    # The pauses only give each response its own read on the client (the shape of the
    # fault); the outcome must not depend on them.
    await conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    await asyncio.sleep(0.05)
    await conn.send(b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n")
    await asyncio.sleep(0.05)
    await conn.send(sse_head(CHUNKED) + chunked(text("Hel"), text("lo"), finish(), DONE))


async def slow_head_within(conn: Conn) -> None:
    await conn.request()
    await conn.trickle(sse_head(CLOSE), 0.005)
    await conn.send(chat_body("Hel", "lo"))


async def slow_head_beyond(conn: Conn) -> None:
    await conn.request()
    # Every byte comes well within the 1 s read timeout; the head as a whole never does.
    await conn.trickle(sse_head(CLOSE) + chat_body("Hel", "lo"), 0.05)


GZIP_HEAD = sse_head(CLOSE, b"content-encoding: gzip")
DEFLATE_HEAD = sse_head(CLOSE, b"content-encoding: deflate")
BODY = chat_body("Hel", "lo")


def compressed_prefix(wbits: int) -> bytes:
    """A compressed stream's first part, flushed so that ``Hel`` decodes on its own."""
    compressor = zlib.compressobj(wbits=wbits)
    return compressor.compress(text("Hel")) + compressor.flush(zlib.Z_SYNC_FLUSH)


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-15)
    return compressor.compress(data) + compressor.flush()


def answered(status: bytes, ctype: bytes, body: bytes) -> Script:
    """A whole answer of ``status`` and content type ``ctype`` (none if empty)."""
    head = [b"HTTP/1.1 " + status, b"content-length: %d" % len(body)]
    head += [b"content-type: " + ctype] if ctype else []
    return whole(b"\r\n".join(head) + b"\r\n\r\n", body)


CUT_GZIP = gzip(BODY)[: len(gzip(BODY)) // 2]
LF_CHUNKS = b"".join(b"%x\n%s\n" % (len(p), p) for p in (text("Hel"), finish(), DONE)) + b"0\n\n"
UNDECODABLE_BODY = b"\x0b\x02\x80 not a compressed stream \x00\xff" * 4
ONE_MIB_HEAD = [b"x-big-%d: " % i + b"a" * 65536 for i in range(16)]


@dataclass(frozen=True)
class Case:
    """A fault and the one behaviour every transport must have for it."""

    #: What the server does on each connection; ``None``: nothing listens (refused).
    script: Script | None
    outcome: Outcome
    #: The reply's text (any of these: a chunk whose data arrived before its broken
    #: terminator may or may not be delivered).
    text: tuple[str, ...]
    cause: tuple[type[BaseException], ...] = ()
    raised: tuple[type[BaseException], ...] = ()
    within: float = AT_ONCE
    at_least: float = 0.0
    timeout: float = READ_TIMEOUT


DONE_TEXT = ("Hello",)
CONNECTION_FAILED = (APIConnectionError, httpx.RemoteProtocolError)


def undecodable(script: Script) -> Case:
    """A body that cannot be decoded from its content coding fails at once, as httpx fails a
    gzip body that is not gzip: a corrupt body is no drop a reconnect could fix."""
    decoding = (httpx.DecodingError,)
    return Case(script, Outcome.FAILED, ("",), decoding, (StreamFailedError, *decoding))


CASES: dict[str, Case] = {
    # -- the connection itself
    "refused": Case(
        None, Outcome.FAILED, ("",),
        (APIConnectionError, httpx.ConnectError), (APIConnectionError, httpx.ConnectError),
    ),
    "reset-before-the-head": Case(
        reset_before_head, Outcome.FAILED, ("",),
        (APIConnectionError, httpx.ReadError), (APIConnectionError, httpx.ReadError),
    ),
    "close-before-the-head": Case(
        close_before_head, Outcome.FAILED, ("",), CONNECTION_FAILED, CONNECTION_FAILED,
    ),
    "reset-mid-event-chunked": Case(
        after(sse_head(CHUNKED) + chunked(text("Hel"), last=False), "text",
              chunked(text("lo")[:20], last=False), reset=True),
        Outcome.TRUNCATED, ("Hel",), (httpx.ReadError,),
    ),
    "reset-mid-event-content-length": Case(
        after(sse_head(b"content-length: %d" % len(BODY)) + text("Hel"), "text",
              text("lo")[:20], reset=True),
        Outcome.TRUNCATED, ("Hel",), (httpx.ReadError,),
    ),
    "reset-mid-event-close-delimited": Case(
        after(sse_head(version=b"HTTP/1.0") + text("Hel"), "text", text("lo")[:20], reset=True),
        Outcome.TRUNCATED, ("Hel",), (httpx.ReadError,),
    ),
    "reset-after-finish-close-delimited": Case(
        after(sse_head(version=b"HTTP/1.0") + text("Hel") + finish(), "finish", b"", reset=True),
        Outcome.TRUNCATED, ("Hel",), (httpx.ReadError,),
    ),
    "close-mid-event-chunked": Case(
        close_mid_event, Outcome.TRUNCATED, ("Hel",), (httpx.RemoteProtocolError,),
    ),
    # -- the status line and the head
    "bad-status-line-no-code": Case(
        whole(b"HTTP/1.1 OK\r\ncontent-type: text/event-stream\r\n\r\n", BODY),
        Outcome.FAILED, ("",), CONNECTION_FAILED, CONNECTION_FAILED,
    ),
    "bad-status-line-not-http": Case(
        whole(b"HELLO WORLD\r\n\r\n", BODY), Outcome.FAILED, ("",), CONNECTION_FAILED,
        CONNECTION_FAILED,
    ),
    "status-line-without-reason": Case(
        whole(sse_head(CLOSE, status=b"200"), BODY), Outcome.DONE, DONE_TEXT,
    ),
    "100-continue-first": Case(
        whole(b"HTTP/1.1 100 Continue\r\n\r\n" + sse_head(CLOSE), BODY), Outcome.DONE, DONE_TEXT,
    ),
    "103-early-hints-first": Case(
        whole(b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n"
              + sse_head(CLOSE), BODY),
        Outcome.DONE, DONE_TEXT,
    ),
    "100-then-103-in-reads-of-their-own": Case(
        informational_apart, Outcome.DONE, DONE_TEXT,
    ),
    "lf-only-head-close-delimited": Case(
        whole(sse_head(CLOSE, eol=b"\n"), BODY), Outcome.DONE, DONE_TEXT,
    ),
    "lf-only-head-content-length": Case(
        whole(sse_head(b"content-length: %d" % len(BODY), eol=b"\n"), BODY),
        Outcome.DONE, DONE_TEXT,
    ),
    "lf-only-head-chunked": Case(
        whole(sse_head(CHUNKED, eol=b"\n"), chunked(text("Hel"), text("lo"), finish(), DONE)),
        Outcome.DONE, DONE_TEXT,
    ),
    "slow-head-within-the-read-timeout": Case(
        slow_head_within, Outcome.DONE, DONE_TEXT, within=8.0, timeout=8.0,
    ),
    "slow-head-beyond-the-read-timeout": Case(
        slow_head_beyond, Outcome.FAILED, ("",), (APITimeoutError,), (APITimeoutError,),
        within=1.0 + AT_ONCE, at_least=0.9, timeout=1.0,
    ),
    "a-header-line-over-8-kib": Case(
        whole(sse_head(CLOSE, b"x-large: " + b"a" * 9000), BODY), Outcome.DONE, DONE_TEXT,
    ),
    "150-header-lines": Case(
        whole(sse_head(CLOSE, *[b"x-h%d: v" % i for i in range(150)]), BODY),
        Outcome.DONE, DONE_TEXT,
    ),
    "a-head-over-1-mib-is-refused": Case(
        whole(sse_head(CLOSE, *ONE_MIB_HEAD), BODY), Outcome.FAILED, ("",), CONNECTION_FAILED,
        CONNECTION_FAILED,
    ),
    # -- framing: close-delimited bodies
    "http-1.0-close-delimited": Case(
        whole(sse_head(version=b"HTTP/1.0"), BODY), Outcome.DONE, DONE_TEXT,
    ),
    "http-1.0-close-delimited-cut": Case(
        whole(sse_head(version=b"HTTP/1.0"), text("Hel") + text("lo")[:20]),
        Outcome.TRUNCATED, ("Hel",),
    ),
    "http-1.1-without-length-or-chunked": Case(
        whole(sse_head(), BODY), Outcome.DONE, DONE_TEXT,
    ),
    # -- framing: chunked
    "chunked-whole": Case(
        whole(sse_head(CHUNKED), chunked(text("Hel"), text("lo"), finish(), DONE)),
        Outcome.DONE, DONE_TEXT,
    ),
    "malformed-chunk-size-after-content": Case(
        after(sse_head(CHUNKED) + chunked(text("Hel"), last=False), "text", b"zz\r\nxx\r\n"),
        Outcome.TRUNCATED, ("Hel",), (httpx.RemoteProtocolError,),
    ),
    "chunk-data-without-its-crlf": Case(
        after(sse_head(CHUNKED) + chunked(text("Hel"), last=False), "text",
              b"%x\r\n%sXX" % (len(text("lo")), text("lo"))),
        Outcome.TRUNCATED, ("Hel", "Hello"), (httpx.RemoteProtocolError,),
    ),
    "bad-first-chunk-after-the-head": Case(
        after(sse_head(CHUNKED), "open", b"zz\r\nxx\r\n"),
        Outcome.TRUNCATED, ("",), (httpx.RemoteProtocolError,),
    ),
    "bad-first-chunk-with-the-head": Case(
        after(sse_head(CHUNKED) + b"zz\r\nxx\r\n", "", b""),
        Outcome.TRUNCATED, ("",), (httpx.RemoteProtocolError,),
    ),
    "bad-chunk-after-content-with-the-head": Case(
        after(sse_head(CHUNKED) + chunked(text("Hel"), last=False) + b"zz\r\nxx\r\n", "", b""),
        Outcome.TRUNCATED, ("Hel",), (httpx.RemoteProtocolError,),
    ),
    "good-and-bad-chunk-in-one-read": Case(
        after(sse_head(CHUNKED), "open", chunked(text("Hel"), last=False) + b"zz\r\nxx\r\n"),
        Outcome.TRUNCATED, ("Hel",), (httpx.RemoteProtocolError,),
    ),
    # Chunk lines end in CRLF (RFC 9112 7.1; a bare LF there is how requests are smuggled):
    # a body framed with bare LFs is broken framing, a drop like any other bad chunk.
    "lf-only-chunk-lines": Case(
        whole(sse_head(CHUNKED), LF_CHUNKS), Outcome.TRUNCATED, ("",),
        (httpx.RemoteProtocolError,),
    ),
    # -- a 2xx answer that is no reply (a base URL missing its prefix, a catch-all route)
    "a-200-json-body-that-is-no-reply": Case(
        answered(b"200 OK", b"application/json", b'{"method": "POST", "path": "/chat"}'),
        Outcome.FAILED, ("",), (NotAReplyError,), (NotAReplyError,),
    ),
    "a-200-html-page": Case(
        answered(b"200 OK", b"text/html", b"<!doctype html><title>It works!</title>"),
        Outcome.FAILED, ("",), (ContentTypeError,), (ContentTypeError,),
    ),
    "a-204-with-a-json-content-type": Case(
        answered(b"204 No Content", b"application/json", b""),
        Outcome.FAILED, ("",), (ContentTypeError,), (ContentTypeError,),
    ),
    # -- content codings
    "gzip-whole": Case(whole(GZIP_HEAD, gzip(BODY)), Outcome.DONE, DONE_TEXT),
    "deflate-whole": Case(whole(DEFLATE_HEAD, deflate(BODY)), Outcome.DONE, DONE_TEXT),
    "raw-deflate-whole": Case(whole(DEFLATE_HEAD, raw_deflate(BODY)), Outcome.DONE, DONE_TEXT),
    "gzip-chunked-whole": Case(
        whole(sse_head(CHUNKED, b"content-encoding: gzip"), chunked(gzip(BODY))),
        Outcome.DONE, DONE_TEXT,
    ),
    "gzip-cut-short": Case(whole(GZIP_HEAD, CUT_GZIP), Outcome.TRUNCATED, ("", "Hel")),
    "gzip-turning-to-garbage": Case(
        after(GZIP_HEAD + compressed_prefix(31), "text", b"\xff" * 64),
        Outcome.FAILED, ("Hel",), (httpx.DecodingError,), (StreamFailedError, httpx.DecodingError),
    ),
    "deflate-turning-to-garbage": Case(
        after(DEFLATE_HEAD + compressed_prefix(15), "text", b"\xff" * 64),
        Outcome.FAILED, ("Hel",), (httpx.DecodingError,), (StreamFailedError, httpx.DecodingError),
    ),
    "gzip-garbage-from-the-start": undecodable(whole(GZIP_HEAD, b"\xff" * 64)),
    # Not a valid br/zstd stream either: whether or not brotli/zstandard is installed, the
    # body cannot be decoded, and it must never reach the SSE decoder as it is.
    "br-body-the-client-cannot-decode": undecodable(
        whole(sse_head(CLOSE, b"content-encoding: br"), UNDECODABLE_BODY)
    ),
    "zstd-body-the-client-cannot-decode": undecodable(
        whole(sse_head(CLOSE, b"content-encoding: zstd"), UNDECODABLE_BODY)
    ),
}


def case_params() -> list[Any]:
    return [
        pytest.param(name, transport, id=f"{name}-{transport}")
        for name in CASES
        for transport in TRANSPORTS
    ]


@pytest.mark.parametrize(("name", "transport"), case_params())
async def test_a_fault_ends_the_same_on_every_transport(name: str, transport: str) -> None:
    case = CASES[name]
    server = closed_port() if case.script is None else serve_faults(case.script)
    async with server as srv:
        seen = await run_one(srv, transport, case.within, case.timeout)
    detail = f"{transport}: {seen}"
    assert seen.outcome is case.outcome, detail
    assert seen.text in case.text, detail
    assert seen.cause == case.cause, detail
    assert seen.raised == case.raised, detail
    assert seen.took >= case.at_least, detail


# ------------------------------------------------------------------ a kept-alive connection closed


@pytest.mark.parametrize(
    ("delay", "transport"),
    [
        pytest.param(delay, transport, id=f"{int(delay * 1000)}ms-{transport}")
        for delay in (0.0, 0.005, 0.05)
        for transport in TRANSPORTS
    ],
)
async def test_back_to_back_streams_survive_a_server_closing_each_connection(
    delay: float, transport: str
) -> None:
    """llama.cpp's server answers one request per connection and then closes it, though its
    response says nothing of it (chunked, no ``connection: close``): the client keeps the
    connection for the next request. A request that fails on a *reused* connection before any
    byte of its response must be sent again at once on a fresh one, without a retry (they are
    off here): six streams in a row all end ``done``, whether the close comes 0, 5 or 50 ms
    after the body, and the server answers each request once."""

    async def one_reply_then_close(conn: Conn) -> None:
        if await conn.request():
            await conn.send(sse_head(CHUNKED) + chunked(text("Hel"), text("lo"), finish(), DONE))
            if delay:
                await asyncio.sleep(delay)

    async with serve_faults(one_reply_then_close) as srv, client(srv.base, transport) as c:
        seen = []
        started = time.monotonic()
        async with asyncio.timeout(10):
            for _ in range(6):
                stream = c.chat.stream(model="m", messages=MSG)
                with contextlib.suppress(APIConnectionError):  # seen below as the outcome
                    await consume(stream, srv)
                seen.append(f"{stream.outcome and stream.outcome.value}:{stream.reply.text}")
        took = time.monotonic() - started
    assert seen == ["done:Hello"] * 6, f"{transport}: {seen}"
    assert len(srv.requests) == 6, f"{transport}: {len(srv.requests)} requests answered"
    assert took < 6 * AT_ONCE, f"{transport}: six streams took {took:.1f}s"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_kept_alive_connection_reset_under_the_next_request_is_resent(
    transport: str,
) -> None:
    """The server resets (RST) its kept-alive connection when the next request arrives on it,
    before any byte of a response: that request is sent again at once on a fresh connection,
    as when the connection was closed (a reset before the head is a ``ReadError``, not a
    ``ConnectError``, on every transport: the resend must not depend on that class)."""

    async def answer_once_then_reset(conn: Conn) -> None:
        if not await conn.request():
            return
        await conn.send(sse_head(CHUNKED) + chunked(text("Hel"), text("lo"), finish(), DONE))
        if conn.index == 0 and await conn.request():
            conn.reset()

    async with serve_faults(answer_once_then_reset) as srv, client(srv.base, transport) as c:
        seen = []
        async with asyncio.timeout(4 * AT_ONCE):
            for _ in range(2):
                stream = c.chat.stream(model="m", messages=MSG)
                with contextlib.suppress(APIConnectionError):  # seen below as the outcome
                    await consume(stream, srv)
                seen.append(f"{stream.outcome and stream.outcome.value}:{stream.reply.text}")
    assert seen == ["done:Hello"] * 2, f"{transport}: {seen} {stream.cause!r}"
    assert srv.connections == 2 and len(srv.requests) == 3, (
        f"{transport}: {srv.connections} connections, {len(srv.requests)} requests"
    )


# ------------------------------------------------------------------ a header the caller gave


@pytest.mark.parametrize("where", ["client", "request"])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_non_ascii_header_value_is_refused_with_a_typed_error(
    transport: str, where: str
) -> None:
    """A header value is bytes on the wire; ``café`` has no one encoding every server reads
    (RFC 9110 leaves non-ASCII octets opaque). Every transport refuses it the same way: a
    fluxstream error, raised before anything is sent, the value not echoed whole."""
    value = "café-sk-secret"

    async def answer(conn: Conn) -> None:
        if await conn.request():
            await conn.send(sse_head(CLOSE) + BODY)

    raised: BaseException | None = None
    async with serve_faults(answer) as srv:
        try:
            headers = {"x-title": value}
            async with asyncio.timeout(AT_ONCE):
                if where == "client":
                    async with client(srv.base, transport, headers=headers) as c:
                        await consume(c.chat.stream(model="m", messages=MSG), srv)
                else:
                    async with client(srv.base, transport) as c:
                        stream = c.chat.stream(model="m", messages=MSG, extra_headers=headers)
                        await consume(stream, srv)
        except Exception as exc:
            raised = exc
    assert srv.requests == [], f"{transport}: sent {srv.requests[:1]!r}"
    # A header given to the client may be refused when the client is made, with the plain
    # ValueError a bad ``api_key`` gets; anything later is a fluxstream error. Never a bare
    # UnicodeEncodeError from deep inside the transport.
    refused_early = where == "client" and type(raised) is ValueError
    typed = isinstance(raised, FluxstreamError) or refused_early
    assert typed, f"{transport}: {raised!r}"
    assert "sk-secret" not in repr(raised), f"{transport}: {raised!r}"


# ------------------------------------------------------------------ cancel at every await


async def hold(conn: Conn, *sent: bytes, until: str = "") -> None:
    """Connection 0: send ``sent`` (after the client saw ``until``), then hold the connection
    until the client closes it. Any later connection gets a whole reply."""
    if not await conn.request():
        return
    if conn.index > 0:
        await conn.send(sse_head(CLOSE) + BODY)
        return
    for part in sent:
        await conn.send(part)
    if until:
        await conn.server.reached(until)
    await conn.until_closed()


CANCEL_POINTS: dict[str, tuple[tuple[bytes, ...], str]] = {
    # point: (what connection 0 sends, the mark the client reaches before the cancel)
    "waiting-for-the-head": ((), ""),
    "inside-the-head": ((sse_head()[:20],), ""),
    "after-a-1xx": ((b"HTTP/1.1 100 Continue\r\n\r\n",), ""),
    "between-reads": ((sse_head(CHUNKED) + chunked(text("Hel"), last=False),), "text"),
    "inside-an-event": (
        (sse_head(CHUNKED) + chunked(text("Hel"), text("lo")[:20], last=False),), "text"),
    "inside-a-gzip-body": ((GZIP_HEAD + compressed_prefix(31),), "text"),
    "inside-a-close-delimited-body": ((sse_head(version=b"HTTP/1.0") + text("Hel"),), "text"),
}


async def cancel_consumer(stream: Any, srv: FaultServer, parked: Callable[[], Awaitable[None]]
                          ) -> asyncio.Task[None]:
    """Consume ``stream`` in a task, wait until it is parked, cancel the task; the task."""
    task = asyncio.create_task(consume(stream, srv))
    async with asyncio.timeout(5):
        await parked()
    task.cancel()
    await asyncio.wait([task], timeout=AT_ONCE)
    return task


async def settle(before: set[asyncio.Task[Any]], srv: FaultServer) -> set[asyncio.Task[Any]]:
    """The tasks started since ``before`` (the server's handlers aside) still running after
    a bounded wait for them to end: what a cancelled stream leaked."""
    new = asyncio.all_tasks() - before - srv.handlers
    if new:
        await asyncio.wait(new, timeout=1)
    return {task for task in new if not task.done()}


async def after_the_cancel_the_pool_serves(c: Any, srv: FaultServer) -> None:
    """The client's only pool slot is free again: a new stream gets a connection at once."""
    stream = c.chat.stream(model="m", messages=MSG)
    async with asyncio.timeout(2 * AT_ONCE):
        await consume(stream, srv)
    assert stream.outcome is Outcome.DONE and stream.reply.text == "Hello"


ONE_SLOT = httpx.Limits(max_connections=1)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("point", list(CANCEL_POINTS))
async def test_cancelling_the_consumer_at_every_await_closes_its_connection(
    point: str, transport: str
) -> None:
    """README: cancelling the task closes the HTTP response at once, the outcome becomes
    ``cancelled`` and ``CancelledError`` propagates. On every transport, at every await of a
    request: the connection is closed (the server sees its end close), no task is left
    behind, and the pool's one slot is free for the next stream."""
    sent, until = CANCEL_POINTS[point]
    before = asyncio.all_tasks()

    async def script(conn: Conn) -> None:
        await hold(conn, *sent, until=until)

    async def parked() -> None:
        await srv.parked.wait()
        if until:
            await srv.reached(until)

    async with serve_faults(script) as srv, client(srv.base, transport, limits=ONE_SLOT) as c:
        stream = c.chat.stream(model="m", messages=MSG)
        task = await cancel_consumer(stream, srv, parked)
        assert task.done(), f"{transport}: the cancelled task still runs after {AT_ONCE}s"
        assert task.cancelled(), f"{transport}: CancelledError did not propagate: {task!r}"
        assert stream.outcome is Outcome.CANCELLED, f"{transport}: {stream.outcome}"
        closed = await srv.wait_closed(0, AT_ONCE)
        assert closed, f"{transport}: the connection stayed open after the cancel"
        leaked = await settle(before, srv)
        assert not leaked, f"{transport}: tasks left running: {leaked}"
        await after_the_cancel_the_pool_serves(c, srv)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_cancelling_the_consumer_while_it_connects_abandons_the_connect(
    transport: str,
) -> None:
    """The connect itself is an await: a listener whose backlog is full never completes it.
    Cancelling then ends the task at once (``cancelled``), leaves no half-open socket
    (``SYN_SENT``) behind and no task, and the pool's slot is free: once the server accepts
    again, the next stream on the same client is served."""
    before = asyncio.all_tasks()
    marks = FaultServer()
    with full_backlog() as listener:
        port = listener.getsockname()[1]
        fillers = syn_sent_to(port)
        base = f"http://127.0.0.1:{port}/v1"

        async def connecting() -> None:
            # Nothing announces a SYN the kernel dropped: look, 10 ms apart, a bounded number
            # of times (cancel_consumer bounds the wait in time too).
            for _ in range(500):
                if syn_sent_to(port) - fillers:
                    return
                await asyncio.sleep(0.01)
            raise AssertionError("the client never started connecting")

        async with client(base, transport, limits=ONE_SLOT) as c:
            stream = c.chat.stream(model="m", messages=MSG)
            task = await cancel_consumer(stream, marks, connecting)
            assert task.done(), f"{transport}: the cancelled task still runs after {AT_ONCE}s"
            assert task.cancelled(), f"{transport}: CancelledError did not propagate: {task!r}"
            assert stream.outcome is Outcome.CANCELLED, f"{transport}: {stream.outcome}"
            left = syn_sent_to(port) - fillers
            assert not left, f"{transport}: the abandoned connect is still open ({left})"

            async def answer(conn: Conn) -> None:
                if await conn.request():  # the queued sockets that filled it send nothing
                    await conn.send(sse_head(CLOSE) + BODY)

            async with serve_faults(answer, sock=listener) as srv:
                leaked = await settle(before, srv)
                assert not leaked, f"{transport}: tasks left running: {leaked}"
                await after_the_cancel_the_pool_serves(c, srv)


# ------------------------------------------------------------------ what the caller configured


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_stream_dropped_without_closing_closes_its_connection_when_collected(
    transport: str,
) -> None:
    """``break`` out of ``async for`` without ``async with`` or ``aclose()``, then drop every
    reference: the stream's connection is closed when the stream is collected (the server
    stops generating), with a ``ResourceWarning``, as an unclosed file gets."""

    async def script(conn: Conn) -> None:
        await hold(conn, sse_head(CHUNKED) + chunked(text("Hel"), last=False))

    async with serve_faults(script) as srv, client(srv.base, transport) as c:

        async def read_one_and_walk_away() -> None:
            stream = c.chat.stream(model="m", messages=MSG)
            async with asyncio.timeout(AT_ONCE):
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        break

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            await read_one_and_walk_away()  # the stream may be freed right here (refcount)
            gc.collect()  # or only here (a reference cycle)
            closed = await srv.wait_closed(0, AT_ONCE)
    assert closed, f"{transport}: the dropped stream's connection stayed open"
    assert any(issubclass(w.category, ResourceWarning) for w in caught), f"{transport}: {caught}"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_max_keepalive_connections_zero_keeps_no_connection(transport: str) -> None:
    """``limits=httpx.Limits(max_keepalive_connections=0)``: a connection is closed as soon
    as its response is done, so two streams in a row use two connections."""

    async def keep_alive(conn: Conn) -> None:
        for _ in range(3):  # would serve more requests on one connection if asked
            if not await conn.request():
                await conn.until_closed()  # notes when the client closed it
                return
            await conn.send(sse_head(CHUNKED) + chunked(text("Hel"), text("lo"), finish(), DONE))

    limits = httpx.Limits(max_keepalive_connections=0)
    async with serve_faults(keep_alive) as srv, client(srv.base, transport, limits=limits) as c:
        for _ in range(2):
            stream = c.chat.stream(model="m", messages=MSG)
            async with asyncio.timeout(AT_ONCE):
                await consume(stream, srv)
            assert stream.outcome is Outcome.DONE, f"{transport}: {stream.outcome}"
        closed = await srv.wait_closed(0, AT_ONCE)
    assert srv.connections == 2, f"{transport}: {srv.connections} connection(s) for 2 streams"
    assert closed, f"{transport}: the first connection was kept open"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_http_proxy_from_the_environment_is_used(
    transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HTTP_PROXY`` names an http:// proxy: every transport sends the request through it
    (absolute-form request target), as httpx does; none goes around it silently."""

    async def proxy(conn: Conn) -> None:
        if await conn.request():
            await conn.send(sse_head(CLOSE) + BODY)

    async with serve_faults(proxy) as srv:
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "https_proxy",
                     "HTTPS_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{srv.port}")
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{srv.port}")
        target = "http://upstream.invalid/v1"
        async with client(target, transport) as c:
            stream = c.chat.stream(model="m", messages=MSG)
            async with asyncio.timeout(AT_ONCE):
                with contextlib.suppress(APIConnectionError):  # seen below
                    await consume(stream, srv)
    assert stream.outcome is Outcome.DONE, f"{transport}: {stream.outcome} {stream.cause!r}"
    assert srv.requests and srv.requests[0].startswith(
        b"POST http://upstream.invalid/v1/chat/completions HTTP/1.1"
    ), f"{transport}: {srv.requests[:1]!r}"


# ------------------------------------------------------------------ the client closed under it


class Ends(fluxstream.StreamObserver):
    """An observer noting when (and how) each stream's end was observed."""

    def __init__(self) -> None:
        self.ended: list[tuple[float, Outcome | None]] = []

    def on_end(self, reply: Any, stats: Any) -> None:
        self.ended.append((time.monotonic(), reply.outcome))


#: Each chunk names its event (``id:``) and the reconnection time is short, so a stream
#: that took the close for a drop would resume (``Last-Event-ID``) at once.
HEL = b"retry: 10\nid: 1\n" + text("Hel")


async def flowing(conn: Conn) -> None:
    """``Hel``, then a chunk every 5 ms (bounded) until the client closes the connection."""
    if not await conn.request():
        return
    await conn.send(sse_head(CHUNKED) + chunked(HEL, last=False))

    async def feed() -> None:
        with contextlib.suppress(ConnectionError):
            for number in range(2, 2000):
                await conn.send(chunked(b"id: %d\n" % number + text("x"), last=False))
                await asyncio.sleep(0.005)

    feeder = asyncio.create_task(feed())
    try:
        await conn.until_closed()
    finally:
        feeder.cancel()


async def silent(conn: Conn) -> None:
    """``Hel``, then nothing until the client closes the connection."""
    await hold(conn, sse_head(CHUNKED) + chunked(HEL, last=False), until="text")


async def headless(conn: Conn) -> None:
    """The request is read; no head ever comes."""
    await hold(conn)


CLOSE_STATES: dict[str, tuple[Script, str, Outcome, bool]] = {
    # state: (the server, how the stream is read, its outcome, whether it raises)
    "before-the-head": (headless, "events", Outcome.FAILED, True),
    "in-a-read-no-bytes-coming": (silent, "events", Outcome.TRUNCATED, False),
    "mid-reply-bytes-flowing": (flowing, "events", Outcome.TRUNCATED, False),
    "inside-text-coalesce": (silent, "text", Outcome.TRUNCATED, False),
    "with-a-fallback-configured": (silent, "fallback", Outcome.TRUNCATED, False),
}
#: "Within milliseconds" on an idle machine; the bound leaves room for a loaded one, far
#: below the read timeout (30 s) and the default one (600 s) a stream waited out before.
CLOSED_AT_ONCE = 1.0


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("state", list(CLOSE_STATES))
async def test_closing_the_client_ends_its_stream_at_once_the_same_way_on_every_transport(
    state: str, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    """README: closing the client ends its open streams at once, as a broken connection
    would, but nothing more is sent: no retry, no resume, no hand-off to a fallback. A stream
    with its response ends ``truncated`` (cause ``APIConnectionError``, what it delivered
    kept); one still waiting for its response raises ``APIConnectionError`` (``failed``).
    Its observers see the end (a span ends), and no task is left that could send later."""
    script, how, outcome, raises = CLOSE_STATES[state]
    before = asyncio.all_tasks()
    ends = Ends()
    async with serve_faults(script) as srv:
        other = fluxstream.Upstream(srv.base, api_key="sk-other", name="other")
        fallbacks = [other] if how == "fallback" else []
        c = fluxstream.AsyncClient(srv.base, api_key="sk-parity", transport=transport,
                                   timeouts=fluxstream.Timeouts(
                                       connect=READ_TIMEOUT, read=READ_TIMEOUT,
                                       write=READ_TIMEOUT, pool=READ_TIMEOUT),
                                   observers=[ends],
                                   fallbacks=fallbacks)
        stream = c.chat.stream(model="m", messages=MSG)
        shown: list[str] = []
        seen: list[Any] = []

        async def read() -> None:
            async with stream:
                if how == "text":
                    async for piece in stream.text(coalesce=0.05):
                        shown.append(piece)
                        srv.mark("text")
                    return
                async for event in stream:
                    seen.append(event)
                    if isinstance(event, fluxstream.TextDelta):
                        shown.append(event.text)
                        srv.mark("text")

        task = asyncio.create_task(read())
        async with asyncio.timeout(5):
            await srv.parked.wait()
            if outcome is not Outcome.FAILED:
                await srv.reached("text")
        closed_at = time.monotonic()
        await c.aclose()
        await asyncio.wait([task], timeout=CLOSED_AT_ONCE)
        took = time.monotonic() - closed_at
        assert task.done(), f"{transport}: still reading {took:.1f}s after the client closed"
        raised = task.exception()
        assert stream.outcome is outcome, f"{transport}: {stream.outcome} {raised!r}"
        if raises:
            assert type(raised) is APIConnectionError, f"{transport}: {raised!r}"
            assert "closed" in str(raised)
        else:
            assert raised is None, f"{transport}: {raised!r}"
            assert type(stream.cause) is APIConnectionError, f"{transport}: {stream.cause!r}"
        assert stream.reply.text == "".join(shown), "the reply holds text never delivered"
        assert not [e for e in seen if isinstance(e, (fluxstream.Handoff, fluxstream.Reset))]
        recovered = [r.getMessage() for r in caplog.records
                     if r.name == "fluxstream" and r.levelno >= logging.WARNING]
        assert not recovered, f"{transport}: a closed client's stream went on: {recovered}"
        if outcome is Outcome.TRUNCATED:
            assert stream.reply.text.startswith("Hel")
        assert [o for _, o in ends.ended] == [outcome], f"{transport}: {ends.ended}"
        assert ends.ended[0][0] - closed_at < CLOSED_AT_ONCE
        assert await srv.wait_closed(0, AT_ONCE), f"{transport}: the connection stayed open"
        leaked = await settle(before, srv)
        assert not leaked, f"{transport}: tasks left running: {leaked}"
    assert srv.connections == 1 and len(srv.requests) == 1, (
        f"{transport}: {len(srv.requests)} requests sent, one after the client closed"
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("own_http_client", [False, True])
async def test_a_stream_opened_on_a_closed_client_is_refused_at_once(
    transport: str, own_http_client: bool
) -> None:
    """Nothing is sent on a closed client, whether or not fluxstream made its HTTP client
    (a caller's own is left open, and keeps serving its other users)."""

    async def answer(conn: Conn) -> None:
        if await conn.request():
            await conn.send(sse_head(CLOSE) + BODY)

    async with serve_faults(answer) as srv:
        http = httpx.AsyncClient() if own_http_client else None
        c = fluxstream.AsyncClient(srv.base, api_key="sk-parity", transport=transport,
                                   http_client=http)
        await c.aclose()
        stream = c.chat.stream(model="m", messages=MSG)
        started = time.monotonic()
        with pytest.raises(APIConnectionError, match="closed"):
            async with stream:
                pass
        assert time.monotonic() - started < AT_ONCE
        assert stream.outcome is Outcome.FAILED and stream.stats.attempts == 0
        assert srv.requests == []
        if http is not None:
            assert not http.is_closed
            await http.aclose()
