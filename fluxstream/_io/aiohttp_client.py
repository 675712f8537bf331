"""The default HTTP transport on asyncio: aiohttp, behind the part of httpx's interface we use.

Why not ``httpx.AsyncClient`` itself (see ``benchmarks/README.md``, "Transport"): with hundreds
of concurrent streams, httpcore 1.0's pool re-scans every connection for every queued request
on every request start and close (O(requests x connections) per pass), and httpx adds a chain
of async generators and a per-read cancel scope for every chunk. Its fork httpx2 fixes the pool
but not the per-read cost. aiohttp's connector and stream reader cost a small constant per
read and per request, so the default client is built on it whenever the running event loop is
asyncio.

What this module provides is the seam of :mod:`fluxstream._io.transport`, nothing more: an
:class:`~fluxstream._io.transport.HttpClient` (``build_request`` -> ``send(request,
stream=True)``) whose responses are
:class:`~fluxstream._io.transport.ControlledResponse` ones: ``status_code``, ``headers`` with a
case-insensitive ``get``, ``aiter_bytes()``, ``aclose()``, and the capabilities (the codings
decoded, a synchronous abort that ends a pending read at once, used by ``ReplyStream.cancel``,
the body's end known, a close that never waits). aiohttp's exceptions are translated into
**httpx's** exception classes by one ordered table
(:data:`fluxstream._io.aiohttp_errors.EXCEPTION_MAP`), so the error handling above does not
care which transport ran.

Where aiohttp alone behaves unlike httpx, the adapter makes it behave the same: a request that
failed on a pooled connection before any response byte is sent again on a new one (the
connector says which connections were pooled); a malformed body fails the read at once; heads
up to 100 KiB are read, with any number of lines; ``max_keepalive_connections`` bounds the idle
connections. What of it takes aiohttp's private parts (its connection protocol and connector
subclassed, the body's buffer) is :mod:`fluxstream._io.aiohttp_private`, checked when imported.

Loop affinity: an aiohttp session belongs to the event loop it was created in. A new running
loop (``asyncio.run`` called again with the same client) gets a new session; the old one is
detached, never reused (its sockets, whose loop is gone, are closed when garbage-collected, with
the ``ResourceWarning`` Python gives any transport its loop outlived). One client per loop,
closed with ``aclose()`` before the loop ends, avoids that.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import TYPE_CHECKING

import aiohttp
import httpx
from yarl import URL

from .aiohttp_errors import translate
from .aiohttp_private import (
    DECODES,
    FRESH,
    REUSED,
    SESSION_HEAD_LIMITS,
    Connector,
    buffered,
    close_response,
    disarm_read_timer,
)
from .http_library import seconds
from .transport import ControlledResponse, ResponseControls

if TYPE_CHECKING:  # pragma: no cover
    from .transport import HttpClient, HttpResponse

__all__ = ["AiohttpClient", "AiohttpResponse"]

#: Timeout tuple as ``client._build_request`` passes it: (connect, read, write, pool).
TimeoutTuple = tuple[float | None, float | None, float | None, float | None]

_HTTP11 = {"http_version": b"HTTP/1.1"}
_URL_CACHE_SIZE = 256


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
        #: The last of them, found without hashing a ``ClientTimeout`` (attrs hashes it in
        #: Python: every request asked).
        self._last_head_free: tuple[aiohttp.ClientTimeout | None, aiohttp.ClientTimeout] = (
            None, self._default_timeout
        )
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
        connector = Connector(
            max_idle=idle,
            limit=limits.max_connections or 0,
            limit_per_host=0,
            keepalive_timeout=limits.keepalive_expiry,
            ssl=self._ssl,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            trust_env=self._trust_env,
            # Heads as large as httpx reads; the connection's protocol bounds the whole head.
            **SESSION_HEAD_LIMITS,
        )
        self._loop = loop
        return self._session

    async def send(self, request: AiohttpRequest, *, stream: bool = True) -> AiohttpResponse:
        """Send and return once the response head arrived (the body is read lazily)."""
        session = self._session_for_loop()
        timeout = request.timeout
        if request.head_bounded and timeout.sock_read is not None:
            last = self._last_head_free
            if last[0] is timeout:  # the usual: the deadlines of the request before
                timeout = last[1]
            else:
                free = self._head_free.get(timeout) or self._head_free.setdefault(
                    timeout, _without_sock_read(timeout)
                )
                self._last_head_free = (timeout, free)
                timeout = free
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
                fresh = FRESH.set(True)
                try:
                    resp = await self._request(session, request, timeout)
                finally:
                    FRESH.reset(fresh)
        except Exception as exc:
            mapped = translate(exc, connecting=True)
            if mapped is exc:
                raise
            raise mapped from exc
        watch = None
        read = request.timeout.sock_read
        # aiohttp re-arms a timer on every socket read for ``sock_read``; from here on one
        # lazy watchdog per response does it.
        if read is not None and disarm_read_timer(resp):
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


class AiohttpResponse(ControlledResponse):
    """A streamed response: status and headers now, the body through :meth:`aiter_bytes`;
    its capabilities (:meth:`controls`): the codings aiohttp decodes, a synchronous abort, the
    body's end known, a close that never waits."""

    __slots__ = ("_content", "_resp", "_watch", "headers", "status_code")

    extensions = _HTTP11

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

    def controls(self) -> ResponseControls:
        return ResponseControls(DECODES, self.abort, self.body_complete, self.close_now)

    def body_complete(self) -> bool:
        """The body's end has arrived (what is left is buffered): ``aclose`` releases the
        connection to the pool, and a close after the sentinel need not read on for it."""
        return self._content.is_eof()

    def abort(self) -> None:
        """Close the connection now (synchronous): a pending read ends at once."""
        if self._watch is not None:
            self._watch.stop()
        close_response(self._resp)

    async def aclose(self) -> None:
        self.close_now()

    def close_now(self) -> None:
        """:meth:`aclose`, synchronously (it never waits): a close needs no cancel scope to
        shield it, and every stream's end comes here."""
        if self._watch is not None:
            self._watch.stop()
        resp = self._resp
        if self._content.is_eof():
            resp.release()  # the whole body was read: the connection goes back to the pool
        else:
            close_response(resp)


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
                left = buffered(self._content)
                if left:  # what arrived before the break first: the next read raises again
                    return left
            mapped = translate(exc, connecting=False)
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
    if not REUSED.get():
        return False
    REUSED.set(False)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        # aiohttp passes the partial head as ``message`` when some of one had arrived.
        return isinstance(exc.message, str)
    return isinstance(
        exc, (aiohttp.ClientOSError, aiohttp.ClientConnectionResetError)
    ) and not isinstance(exc, (aiohttp.ClientConnectorError, asyncio.TimeoutError))


if TYPE_CHECKING:  # pragma: no cover - mypy holds the adapter to the seam it implements

    def _implements(client: AiohttpClient, response: AiohttpResponse) -> tuple[
        HttpClient, HttpResponse
    ]:
        return client, response
