"""The default HTTP transport on asyncio: aiohttp, behind the part of httpx's interface we use.

Why not ``httpx.AsyncClient`` itself (see ``benchmarks/README.md``, "Transport"): with hundreds
of concurrent streams, httpcore 1.0's pool re-scans every connection for every queued request
on every request start and close (O(requests x connections) per pass), and httpx adds a chain
of async generators and a per-read cancel scope for every chunk. Its fork httpx2 fixes the pool
but not the per-read cost. aiohttp's connector and stream reader cost a small constant per
read and per request, so the default client is built on it whenever the running event loop is
asyncio.

What this module provides is only what :mod:`fluxstream._io.attempt` / :mod:`fluxstream.stream`
call: ``build_request`` -> ``send(request, stream=True)`` -> a response with ``status_code``,
``headers`` (case-insensitive ``get``), ``extensions``, ``aiter_bytes()`` and ``aclose()``, plus
``fluxstream_abort()`` (a synchronous close that ends a pending read at once, used by
``ReplyStream.cancel``). aiohttp's exceptions are translated into **httpx's** exception classes,
so the error handling above does not care which transport ran (a connection that could not
be made is ``httpx.ConnectError``, and nothing else is: the request never left; a reset after
that is ``httpx.ReadError``; a body cut short by the server's close is
``httpx.RemoteProtocolError``; a silent socket is ``httpx.ReadTimeout``).

Where aiohttp alone behaves unlike httpx, the adapter makes it behave the same: a request that
failed on a pooled connection before any response byte is sent again on a new one (the
connector says which connections were pooled); a malformed body fails the read at once
(:class:`_Handler`); heads up to 100 KiB are read, with any number of lines;
``max_keepalive_connections`` bounds the idle connections.

Loop affinity: an aiohttp session belongs to the event loop it was created in. A new running
loop (``asyncio.run`` called again with the same client) gets a new session; the old one is
detached, never reused (its sockets, whose loop is gone, are closed when garbage-collected, with
the ``ResourceWarning`` Python gives any transport its loop outlived). One client per loop,
closed with ``aclose()`` before the loop ends, avoids that.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any

import aiohttp
import aiohttp.compression_utils as _compression
import httpx
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_exceptions import ContentEncodingError, HttpProcessingError
from yarl import URL

from .http_library import close_aiohttp_response, seconds

__all__ = ["AiohttpClient", "AiohttpResponse"]

#: Timeout tuple as ``client._build_request`` passes it: (connect, read, write, pool).
TimeoutTuple = tuple[float | None, float | None, float | None, float | None]

_HTTP11 = {"http_version": b"HTTP/1.1"}
_URL_CACHE_SIZE = 256
#: The largest response head read, as httpcore bounds it (``MAX_INCOMPLETE_EVENT_SIZE``):
#: aiohttp's own limits (8 KiB a line, 128 header lines) refuse heads httpx reads.
HEAD_LIMIT = 100 * 1024

#: Whether the connection of this task's request in progress came from the pool (set by
#: :meth:`_Connector._get`, which runs in the sending task itself).
_REUSED: contextvars.ContextVar[bool] = contextvars.ContextVar("fluxstream_reused", default=False)
#: Set around a resend: the connector hands out no pooled connection, a new one is made.
_FRESH: contextvars.ContextVar[bool] = contextvars.ContextVar("fluxstream_fresh", default=False)


class _Handler(ResponseHandler):
    """aiohttp's protocol of one connection, with what it misses for a streamed body.

    * A malformed body (a bad chunk-size line, chunk data without its CRLF) fails aiohttp's
      parser inside ``data_received``: aiohttp closes the socket and sets the error on the
      connection, but never on the body being read, so that read waits for bytes that can no
      longer come (the whole read timeout). :meth:`set_exception` hands such an error to the
      body too: the read fails at once, as on httpx.
    * The response head is fed to the parser apart from the bytes after it, so that a bad
      first chunk arriving in the same packet as the head is an error of the body (as on
      httpx, and as when it arrives a moment later) instead of a lost head; and the head is
      bounded in total (:data:`HEAD_LIMIT`), not per line. Only while a head is awaited: the
      body's reads go straight to aiohttp's method, nothing added per read.
    * A connection lost with an error (a TCP reset) under a body is a failed read of that body
      (:meth:`connection_lost`): aiohttp ends a close-delimited body there as if it were
      complete, and reports a framed one as a protocol error of the parser; httpx, rightly,
      reports the socket's error in both cases.
    """

    _head_size = 0
    #: The last bytes of the head fed so far (at most 3): its blank line may be split across
    #: reads (``...\r\n\r`` then ``\n`` and the body), and must still be found where it is,
    #: or the body bytes after it would count as head bytes.
    _head_tail = b""

    def set_response_params(self, **kwargs: Any) -> None:
        super().set_response_params(**kwargs)
        self._head_size = 0
        self._head_tail = b""
        self.data_received = self._head_received  # type: ignore[method-assign]

    def _head_received(self, data: bytes) -> None:
        feed = ResponseHandler.data_received
        while data:
            seen = self._head_tail
            window = seen + data[:HEAD_LIMIT]  # bounded: a large body read is not copied whole
            crlf, lf = window.find(b"\r\n\r\n"), window.find(b"\n\n")
            # ``seen`` holds no whole blank line (the search would have ended there), so an
            # end found is at least one byte into ``data``.
            ends = [max(1, i + n - len(seen)) for i, n in ((crlf, 4), (lf, 2)) if i >= 0]
            end = min(ends) if ends else len(data)
            self._head_size += end
            if self._head_size > HEAD_LIMIT:
                self._head_too_large()
                return
            feed(self, data[:end])
            self._head_tail = b"" if ends else (seen + data[-3:])[-3:]  # all of data was fed
            data = data[end:]
            if self._final_head_arrived():
                del self.data_received  # aiohttp's own method again, for the body
                if data:
                    feed(self, data)
                return

    def _final_head_arrived(self) -> bool:
        if self._exception is not None or self.transport is None:
            return True
        buffered = self._buffer
        return bool(buffered) and not 100 <= buffered[-1][0][0].code < 200  # ((head, body), size)

    def _head_too_large(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.set_exception(
            HttpProcessingError(message=f"response head larger than {HEAD_LIMIT // 1024} KiB")
        )

    def connection_lost(self, exc: BaseException | None) -> None:
        body = self._payload
        if exc is not None and body is not None and not body.is_eof() and body.exception() is None:
            error = aiohttp.ClientPayloadError(f"the response body broke off: {_os_text(exc)}")
            error.__cause__ = exc  # the socket's error: what the read reports (ReadError)
            body.set_exception(error, exc)
            # aiohttp would replace the error with its parser's ("payload is not completed"),
            # or end a close-delimited body cleanly: it no longer reaches this body.
            self._payload = None
        super().connection_lost(exc)

    def set_exception(self, exc: BaseException, *args: Any) -> None:
        body = self._payload
        super().set_exception(exc, *args)
        if (
            isinstance(exc, HttpProcessingError)
            and body is not None
            and body.exception() is None
            and not body.is_eof()
        ):
            error = aiohttp.ClientPayloadError(f"malformed response body: {_parser_text(exc)}")
            error.__cause__ = args[0] if args and isinstance(args[0], BaseException) else exc
            body.set_exception(error)


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector, telling which requests went out on a pooled connection (for the
    resend in :meth:`AiohttpClient.send`), able to make a fresh one on demand, and keeping at
    most ``max_idle`` idle connections (httpx's ``max_keepalive_connections``)."""

    def __init__(self, *, max_idle: int | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._factory = functools.partial(_Handler, loop=self._loop)  # type: ignore[assignment]
        self._max_idle = max_idle

    async def _get(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        if _FRESH.get():
            return None
        conn = await super()._get(key, *args, **kwargs)
        _REUSED.set(conn is not None)
        return conn

    def _release(self, key: Any, protocol: Any, *, should_close: bool = False) -> None:
        limit = self._max_idle
        if limit is not None and not should_close:
            should_close = sum(map(len, self._conns.values())) >= limit
        super()._release(key, protocol, should_close=should_close)


class AiohttpRequest:
    """What ``build_request`` returns: the request as it will be sent, nothing parsed twice."""

    __slots__ = ("content", "head_bounded", "headers", "method", "timeout", "url")

    def __init__(
        self,
        method: str,
        url: URL,
        content: bytes | None,
        headers: Mapping[str, str],
        timeout: aiohttp.ClientTimeout,
    ) -> None:
        self.method = method
        self.url = url
        self.content = content
        self.headers = headers
        #: ``sock_read`` covers the wait for the response head; the body's reads are watched
        #: by :class:`_ReadWatch` instead (the same limit, without a timer per read).
        self.timeout = timeout
        #: The caller bounds the whole wait for the response head itself (fluxstream's
        #: ``Attempt`` does, with one deadline no trickled head can stretch), so aiohttp's
        #: per-read timer is not armed for it: a timer and its cancels less per request.
        self.head_bounded = False

    def __repr__(self) -> str:  # never the headers: they carry the API key
        return f"<AiohttpRequest {self.method} {self.url.with_query(None)}>"


class AiohttpClient:
    """A small asyncio HTTP/1.1 client with httpx's calling convention (see the module doc).

    :param timeout: defaults for every request (``httpx.Timeout``: connect, read, write, pool;
        ``write`` is not enforced by aiohttp: request bodies here are small).
    :param limits: ``max_connections`` bounds the pool, ``keepalive_expiry`` the idle time of
        a kept-alive connection.
    """

    def __init__(
        self, *, timeout: httpx.Timeout, limits: httpx.Limits, trust_env: bool = False
    ) -> None:
        self.timeout = timeout
        self._limits = limits
        #: Proxies from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``): aiohttp
        #: looks them up on every request (a thread hop), so only when there are some.
        self._trust_env = trust_env
        # httpx's own SSL setup (certifi, SSL_CERT_FILE / SSL_CERT_DIR): verification is exactly
        # what the httpx default did.
        self._ssl = httpx.create_ssl_context()
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._default_timeout = _client_timeout(
            (timeout.connect, timeout.read, timeout.write, timeout.pool)
        )
        self._timeouts: dict[TimeoutTuple, aiohttp.ClientTimeout] = {}
        self._head_free: dict[aiohttp.ClientTimeout, aiohttp.ClientTimeout] = {}
        self._urls: dict[str, URL] = {}
        self._closed = False

    @property
    def is_closed(self) -> bool:
        """:meth:`aclose` was called: nothing is sent any more (as ``httpx.AsyncClient``)."""
        return self._closed

    def __repr__(self) -> str:
        return f"<fluxstream AiohttpClient limit={self._limits.max_connections}>"

    def build_request(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: TimeoutTuple | None = None,
    ) -> AiohttpRequest:
        parsed = self._urls.get(url)
        if parsed is None:
            parsed = URL(url)
            if parsed.scheme not in ("http", "https"):
                raise httpx.UnsupportedProtocol(
                    f"Request URL has an unsupported protocol '{parsed.scheme}://'."
                )
            if len(self._urls) >= _URL_CACHE_SIZE:
                self._urls.clear()
            self._urls[url] = parsed
        if timeout is None:
            client_timeout = self._default_timeout
        else:
            client_timeout = self._timeouts.get(timeout) or self._timeouts.setdefault(
                timeout, _client_timeout(timeout)
            )
        sent = dict(headers or {})
        for value in sent.values():
            if not value.isascii():  # refused, never sent raw: httpx's error for it
                value.encode("ascii")
        # No URL credentials to reconcile here: the client takes them out of ``base_url`` and
        # sends them as Basic auth itself, so no URL handed to a transport carries them.
        return AiohttpRequest(method, parsed, content, sent, client_timeout)

    def _session_for_loop(self) -> aiohttp.ClientSession:
        if self._closed:  # never a new session behind the caller's back: httpx's error
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        loop = asyncio.get_running_loop()
        session = self._session
        if session is not None and self._loop is loop and not session.closed:
            return session
        if session is not None and not session.closed:
            session.detach()  # another (finished) loop's connections: never reused
        limits = self._limits
        idle = limits.max_keepalive_connections
        if idle is not None and limits.max_connections is not None:
            idle = None if idle >= limits.max_connections else idle  # can never bind
        connector = _Connector(
            max_idle=idle,
            limit=limits.max_connections or 0,
            limit_per_host=0,
            keepalive_timeout=limits.keepalive_expiry,
            ssl=self._ssl,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            trust_env=self._trust_env,
            # Heads as large as httpx reads; _Handler bounds the whole head instead.
            max_line_size=HEAD_LIMIT,
            max_field_size=HEAD_LIMIT,
            max_headers=HEAD_LIMIT // 4,
        )
        self._loop = loop
        return self._session

    async def send(self, request: AiohttpRequest, *, stream: bool = True) -> AiohttpResponse:
        """Send and return once the response head arrived (the body is read lazily)."""
        session = self._session_for_loop()
        timeout = request.timeout
        if request.head_bounded and timeout.sock_read is not None:
            timeout = self._head_free.get(timeout) or self._head_free.setdefault(
                timeout, _without_sock_read(timeout)
            )
        try:
            try:
                resp = await self._request(session, request, timeout)
            except Exception as exc:
                if not _resendable(exc):
                    raise
                # The pooled connection was closed by the server before it answered (a
                # server that closes after each response; the close crossed the request):
                # nothing of it was processed, so send it again at once, on a new connection,
                # without spending a retry (what browsers do). Once: a new connection that
                # fails is the retry policy's.
                fresh = _FRESH.set(True)
                try:
                    resp = await self._request(session, request, timeout)
                finally:
                    _FRESH.reset(fresh)
        except Exception as exc:
            mapped = _translate(exc, connecting=True)
            if mapped is exc:
                raise
            raise mapped from exc
        watch = None
        read = request.timeout.sock_read
        connection = resp.connection
        if read is not None and connection is not None and connection.protocol is not None:
            # aiohttp re-arms a timer on every socket read for ``sock_read`` (a cancel and a
            # new TimerHandle each time); from here on one lazy watchdog per response does it.
            # aiohttp does the same for websockets; the next request on this connection sets
            # its own value again.
            connection.protocol.read_timeout = None
            watch = _ReadWatch(resp.content, read)
        response = AiohttpResponse(resp, watch)
        if not stream:
            try:
                await response.aread()
            finally:
                await response.aclose()
        return response

    @staticmethod
    def _request(
        session: aiohttp.ClientSession, request: AiohttpRequest, timeout: aiohttp.ClientTimeout
    ) -> Awaitable[aiohttp.ClientResponse]:
        # aiohttp's awaitable itself, not a coroutine around it: one frame less per request.
        return session.request(
            request.method,
            request.url,
            data=request.content,
            headers=request.headers,
            timeout=timeout,
            allow_redirects=False,
        )

    async def aclose(self) -> None:
        self._closed = True
        session, self._session = self._session, None
        if session is None or session.closed:
            return
        try:
            same_loop = self._loop is asyncio.get_running_loop()
        except RuntimeError:  # closed from another event loop library (trio): nothing to await
            same_loop = False
        if same_loop:
            await session.close()
        else:
            session.detach()


class AiohttpResponse:
    """A streamed response: status and headers now, the body through :meth:`aiter_bytes`."""

    __slots__ = ("_content", "_resp", "_watch", "headers", "status_code")

    extensions = _HTTP11
    #: The content codings aiohttp decodes here (it asks for no other).
    fluxstream_decodes = frozenset(
        ["identity", "gzip", "deflate"]
        + (["br"] if _compression.HAS_BROTLI else [])
        + (["zstd"] if getattr(_compression, "HAS_ZSTD", False) else [])
    )

    def __init__(self, resp: aiohttp.ClientResponse, watch: _ReadWatch | None = None) -> None:
        self._resp = resp
        self._content = resp.content
        self._watch = watch
        self.status_code: int = resp.status
        self.headers = resp.headers

    def __repr__(self) -> str:
        return f"<AiohttpResponse [{self.status_code}]>"

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """Whatever is buffered, as soon as anything is: one read may hold several events."""
        return _Body(self._content, self._watch)

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_bytes()])

    def fluxstream_body_complete(self) -> bool:
        """The body's end has arrived (what is left is buffered): ``aclose`` releases the
        connection to the pool, and a close after the sentinel need not read on for it."""
        return self._content.is_eof()

    def fluxstream_abort(self) -> None:
        """Close the connection now (synchronous): a pending read ends at once."""
        if self._watch is not None:
            self._watch.stop()
        close_aiohttp_response(self._resp)

    async def aclose(self) -> None:
        self.fluxstream_close()

    def fluxstream_close(self) -> None:
        """:meth:`aclose`, synchronously (it never waits): a close needs no cancel scope to
        shield it, and every stream's end comes here."""
        if self._watch is not None:
            self._watch.stop()
        resp = self._resp
        if self._content.is_eof():
            resp.release()  # the whole body was read: the connection goes back to the pool
        else:
            close_aiohttp_response(resp)


class _ReadWatch:
    """The read timeout of one response body, as httpx means it: no read may wait longer
    than ``limit`` seconds for bytes (a slow consumer is not a silent server).

    A read costs two attribute writes and one clock read; the timer fires at most once per
    ``limit`` while the stream is healthy, and re-arms itself for exactly ``start + limit`` of
    the read in progress. On expiry the pending read raises aiohttp's ``SocketTimeoutError``
    (translated to ``httpx.ReadTimeout``).
    """

    __slots__ = ("_content", "_handle", "_limit", "_loop", "now", "started")

    def __init__(self, content: aiohttp.StreamReader, limit: float) -> None:
        self._content = content
        self._limit = limit
        self._loop = asyncio.get_running_loop()
        self.now = self._loop.time
        #: When the read in progress started waiting (loop time), or None between reads.
        self.started: float | None = None
        self._handle: asyncio.TimerHandle | None = self._loop.call_at(
            self._loop.time() + limit, self._fire
        )

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        if self._content.is_eof():
            return  # everything arrived: nothing left to wait for
        now = self._loop.time()
        started = self.started
        if started is None:
            at = now + self._limit
        elif now - started >= self._limit:
            self._content.set_exception(
                aiohttp.SocketTimeoutError(f"no bytes for {seconds(self._limit)}")
            )
            return
        else:
            at = started + self._limit
        self._handle = self._loop.call_at(at, self._fire)


class _Body:
    """Async iterator over a response body: one ``readany`` per step, no generator layers."""

    __slots__ = ("_content", "_watch")

    def __init__(self, content: aiohttp.StreamReader, watch: _ReadWatch | None) -> None:
        self._content = content
        self._watch = watch

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        watch = self._watch
        try:
            if watch is None:
                data = await self._content.readany()
            else:
                watch.started = watch.now()
                try:
                    data = await self._content.readany()
                finally:
                    watch.started = None
        except Exception as exc:
            if watch is not None:
                watch.stop()
            if isinstance(exc, aiohttp.ClientPayloadError):
                left = _buffered(self._content)
                if left:  # what arrived before the break first: the next read raises again
                    return left
            mapped = _translate(exc, connecting=False)
            if mapped is exc:
                raise
            raise mapped from exc
        if not data:
            if watch is not None:
                watch.stop()
            raise StopAsyncIteration
        return data


def _client_timeout(t: TimeoutTuple) -> aiohttp.ClientTimeout:
    connect, read, _write, pool = t
    # aiohttp's ``connect`` covers waiting for a pool slot plus connecting; ``sock_connect``
    # the TCP/TLS handshake; ``sock_read`` the gap between two reads (httpx's read timeout).
    return aiohttp.ClientTimeout(total=None, connect=pool, sock_connect=connect, sock_read=read)


def _without_sock_read(timeout: aiohttp.ClientTimeout) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(
        total=timeout.total, connect=timeout.connect, sock_connect=timeout.sock_connect
    )


def _resendable(exc: BaseException) -> bool:
    """The request failed on a connection taken from the pool, before any byte of a response
    (the server had closed it, or closes it as the request arrives): safe to send again."""
    if not _REUSED.get():
        return False
    _REUSED.set(False)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        # aiohttp passes the partial head as ``message`` when some of one had arrived.
        return isinstance(exc.message, str)
    return isinstance(
        exc, (aiohttp.ClientOSError, aiohttp.ClientConnectionResetError)
    ) and not isinstance(exc, (aiohttp.ClientConnectorError, asyncio.TimeoutError))


def _buffered(content: aiohttp.StreamReader) -> bytes:
    """The bytes a body holds that no read has taken yet. aiohttp's reads raise a body's
    error before handing them out, so a valid chunk that arrived in the same segment as a
    malformed one (or just before a reset, while the consumer was busy) would be lost."""
    if not content._buffer:  # aiohttp's own: its public reads raise the error first
        return b""
    return content._read_nowait(-1)


def _os_text(exc: BaseException) -> str:
    """A socket error as a person reads it: ``Connection reset by peer``."""
    errno = getattr(exc, "errno", None)
    return os.strerror(errno) if errno else (str(exc) or type(exc).__name__)


def _socket_error(exc: BaseException) -> bool:
    """A body error caused by the socket (a reset), not by what the server sent."""
    return isinstance(exc, aiohttp.ClientPayloadError) and isinstance(exc.__cause__, OSError)


def _undecodable(exc: BaseException) -> bool:
    """The body's content encoding cannot be decoded: its data is broken (in the body), or no
    decoder for it is installed (aiohttp says so at the head)."""
    if not isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ClientResponseError)):
        return False
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ContentEncodingError):
            return True
        cause = cause.__cause__
    return "content-encoding" in _parser_text(exc).lower()


def _parser_text(exc: BaseException) -> str:
    """aiohttp's parser error, for people: its first line, without the ``400, message=`` that
    reads like an HTTP status (it is aiohttp's code for "bad message", nothing was answered)."""
    text = (
        exc.message
        if isinstance(exc, (HttpProcessingError, aiohttp.ClientResponseError))
        else str(exc)
    )
    if not isinstance(text, str):
        text = str(text)
    first = text.strip().split("\n", 1)[0].strip().rstrip(":")
    return first or type(exc).__name__


def _describe(exc: BaseException, *, connecting: bool) -> str:
    """What went wrong, for the person reading the error (never aiohttp's internals)."""
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return f"the proxy answered {exc.status} {exc.message}".rstrip()
    if isinstance(exc, aiohttp.ClientConnectorError) and not isinstance(
        exc, aiohttp.ClientSSLError
    ):
        # aiohttp's text names its ``ssl`` setting ("ssl:default"), even for http:// URLs.
        error = exc.os_error
        if isinstance(error, socket.gaierror):  # the resolver's own words: os.strerror would
            reason = error.strerror or str(error)  # say "Unknown error -2"
        else:
            reason = os.strerror(error.errno) if error.errno else (str(error) or "failed")
        return f"cannot connect to {exc.host}:{exc.port}: {reason}"
    if isinstance(exc, aiohttp.ClientPayloadError):
        cause = exc.__cause__
        if isinstance(cause, ContentEncodingError):
            return f"the response body cannot be decoded: {_parser_text(cause)}"
        if isinstance(cause, HttpProcessingError):
            return f"the response body broke off: {_parser_text(cause)}"
        if isinstance(cause, OSError):
            return f"the response body broke off: {_os_text(cause)}"
        return str(exc).replace("Response payload is not completed", "the response body broke off")
    if _undecodable(exc):  # at the head: aiohttp names the coding and the package it needs
        return _parser_text(exc)
    if isinstance(exc, aiohttp.ClientResponseError):  # aiohttp's parser refused the head
        cause = exc.__cause__
        return f"malformed response head: {_parser_text(cause if cause is not None else exc)}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return (
            "the server closed the connection without a response"
            if connecting else "the server closed the connection"
        )
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    return str(exc) or type(exc).__name__


def _translate(exc: BaseException, *, connecting: bool) -> BaseException:
    """aiohttp's (and asyncio's) exception -> the httpx exception class it corresponds to."""
    message = _describe(exc, connecting=connecting)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message)
    if isinstance(exc, aiohttp.SocketTimeoutError) or (
        isinstance(exc, asyncio.TimeoutError) and not connecting
    ):
        return httpx.ReadTimeout(message)  # no byte for ``read`` seconds (head or body)
    if isinstance(exc, asyncio.TimeoutError):
        return httpx.PoolTimeout(message)  # waiting for a pool slot (aiohttp's ``connect``)
    if isinstance(exc, aiohttp.ClientConnectorError):
        # The only ConnectError: no connection was made, so the request never left (what a
        # ConnectError tells a retry). Anything failing later may have reached the server.
        return httpx.ConnectError(message)
    if _socket_error(exc):  # a body cut by a reset: the socket's error, as httpx reports it
        return httpx.ReadError(message)
    if _undecodable(exc):  # gzip turned garbage, a coding without its decoder: no drop
        return httpx.DecodingError(message)
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return httpx.RemoteProtocolError(message)
    if isinstance(exc, aiohttp.ClientResponseError):  # a malformed response head
        return httpx.RemoteProtocolError(message)
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(message)
    if connecting and isinstance(exc, aiohttp.ClientConnectionResetError):
        return httpx.WriteError(message)  # the request could not be written
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        # Sent on a connection made (or reused), then reset or closed before the head: the
        # request may have been read, so not a ConnectError (httpx's ReadError).
        return httpx.ReadError(message)
    if connecting and isinstance(exc, ValueError):  # a header aiohttp refuses to send
        return httpx.LocalProtocolError(message)  # what httpx raises for it
    return exc
