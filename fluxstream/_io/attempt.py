"""One HTTP attempt of a stream: send the request, check status and content type, read, close.

:class:`Attempt` is everything that touches one request/response pair and nothing else; the
loop over attempts (retry, resume, backoff) lives in :class:`~fluxstream._io.channel.Channel`
and the decision in :class:`~fluxstream._core.recovery.Recovery`. Keeping one attempt apart means a
new transport changes this file only (a new API changes none of it: the request is built by
what :class:`RequestSpec` carries), and the rules of ``cancel()`` (a synchronous
abort of the connection, or a cancel scope where that is impossible) are stated once.

Every failure leaves as a typed :mod:`fluxstream.errors` exception: a raw exception of the HTTP
library never reaches the caller from here.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import AsyncGeneratorType
from typing import TYPE_CHECKING, Any

import anyio

from .._core.progress import Wait
from .._timeouts import DEFAULT_TIMEOUTS, Deadline, Timeouts
from ..apis import Api
from ..errors import (
    APIConnectionError,
    APITimeoutError,
    ContentTypeError,
    NotAReplyError,
    StreamFailedError,
)
from .http_library import (
    HttpErrors,
    RequestHeaderError,
    credentials_of,
    seconds,
    status_error,
    unresolved_host,
    without_credentials,
)
from .tasks import on_asyncio
from .transport import (
    NO_CONTROLS,
    HttpClient,
    HttpResponse,
    ResponseControls,
    controls_of,
    undecodable_encoding,
)

if TYPE_CHECKING:  # pragma: no cover
    from .._observe import SendInfo
    from .._usage import UsageLedger

if sys.version_info >= (3, 11):
    from builtins import BaseExceptionGroup
else:  # pragma: no cover - anyio depends on the backport there
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found,unused-ignore]

__all__ = [
    "DRAIN_SECONDS", "Attempt", "AttemptCancelled", "PushedBack", "RequestSpec", "read_limited",
]

#: The most of an error body read to describe it (the rest is not worth waiting for).
ERROR_BODY_LIMIT = 64 * 1024
#: The most of a body of another content type read to show its start.
_EXCERPT_BYTES = 512
#: Statuses that answer with no body (RFC 9110): whatever their content type, no reply came.
_NO_BODY = (204, 205)
_DRAIN_AFTER_END_BYTES = 64 * 1024
#: Reads that :func:`finish_body` may take from data already buffered under the body (a read
#: that needs the socket raises at once in its cancelled scope): one socket read's worth of
#: tiny chunks at most, so generous and still fast.
_FINISH_READS = 100_000
#: How long a close after the sentinel reads on for the body's end (see :meth:`Attempt.close`).
DRAIN_SECONDS = 0.25


@dataclass
class RequestSpec:
    """Everything needed to send (and send again) the request behind a stream."""

    #: The provider API: its path, and what a resume sends (asked, never guessed from a URL).
    api: Api
    body: dict[str, Any]
    #: Builds the request from ``(path, body, headers, timeouts)``: the HTTP library's
    #: timeouts are the request's own (a request may override the client's).
    build: Callable[[str, Mapping[str, Any], Mapping[str, str], Timeouts], Any]
    http: HttpClient
    errors: HttpErrors
    #: Never in the repr: a caller's own ``Authorization`` (a gateway's token) may be here.
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    #: Every deadline of the stream: the client's, with the request's own over them.
    timeouts: Timeouts = DEFAULT_TIMEOUTS
    #: Builds a ``GET`` of ``(path with query, headers, timeouts)`` with the same
    #: authentication, for resumes that re-read a stored response
    #: (``GET /responses/{id}?stream=true&...``); ``None``: this client cannot, and such
    #: resumes are not offered.
    build_get: Callable[[str, Mapping[str, str], Timeouts], Any] | None = None

    @property
    def read_timeout(self) -> float | None:
        """The read timeout in force (``idle``, else ``read``, else ``stall``)."""
        return self.timeouts.read_gap
    #: The server's host and port (the base URL's), for observers (``server.*`` in traces).
    server: tuple[str, int | None] | None = None
    #: Settles the reply's usage estimate and cost when the stream ends (the client's).
    ledger: UsageLedger | None = None
    #: Around each send, when an observer takes part in requests (trace propagation): given
    #: the request's own extra headers, to add to (see ``fluxstream._observe.SendObserver``).
    sending: Callable[[dict[str, str], SendInfo], AbstractContextManager[None]] | None = field(
        default=None, repr=False
    )

    @property
    def path(self) -> str:
        """The path under the base URL the request is posted to (the API's)."""
        return self.api.path


def _plain_event_stream(response: HttpResponse, decodes: Collection[str] | None) -> bool:
    """A 2xx event stream in a coding its transport decodes (``decodes``): the usual
    response, usable as it is (what :meth:`Attempt._check` accepts as an event stream, without
    reading anything)."""
    status = response.status_code
    if not 200 <= status < 300 or status in _NO_BODY:
        return False
    ctype = response.headers.get("content-type", "")
    return (
        ctype.partition(";")[0].strip().lower() == "text/event-stream"
        and undecodable_encoding(response, decodes) is None
    )


class AttemptCancelled(Exception):
    """``stream.cancel()`` interrupted a send or a wait; nothing more is to be sent."""


class Attempt:
    """One request and its response.

    After :meth:`open` the response is usable: either an event stream (:meth:`read` yields its
    bytes, :attr:`body` is the raw iterator for a read-ahead task) or a whole JSON body
    (:attr:`payload`). :meth:`cancel` works from any task and synchronously; :meth:`close`
    is idempotent.
    """

    def __init__(self, spec: RequestSpec, *, head: Wait | None = None) -> None:
        self.spec = spec
        #: Bound on the whole wait for the response head, and the deadline it is: a server
        #: that trickles it a byte at a time resets the HTTP library's read timeout with
        #: every byte.
        self.head = head
        #: The :class:`~fluxstream._io.transport.HttpResponse` (``None`` before :meth:`open`).
        self.response: Any = None
        #: What the response's transport can do beyond httpx's interface (abort, close at
        #: once...), asked once when the response arrives.
        self.controls: ResponseControls = NO_CONTROLS
        #: The event stream's bytes (``None`` for a JSON body or before :meth:`open`).
        self.body: AsyncIterator[bytes] | None = None
        #: A whole ``application/json`` reply body, parsed (``is_json`` tells it was one).
        self.payload: Any = None
        self.is_json = False
        #: Reads need a cancel scope: the connection cannot be aborted synchronously (HTTP/2).
        self.scoped_reads = False
        self.cancelled = False
        self._scope: anyio.CancelScope | None = None
        #: The pending send's timeout under asyncio (see :meth:`_send_asyncio`).
        self._timeout: Any = None  # an asyncio.Timeout (Python 3.11+)
        self._closed = False
        #: The body, if :meth:`close` could not finish it: a read of another task was in it.
        self.unfinished: AsyncIterator[bytes] | None = None

    # ------------------------------------------------------------------ opening

    async def open(
        self,
        *,
        headers: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        max_json_bytes: int,
        get: str | None = None,
    ) -> None:
        """Send the request and check the response; raises a typed error if unusable.

        ``get``: instead of the stream's request, a ``GET`` of this path (relative to the base
        URL, query included) with the same headers: a resume that re-reads a stored response.

        :raises AttemptCancelled: :meth:`cancel` came first.
        :raises APITimeoutError, APIConnectionError: no response (retryable).
        :raises APIStatusError: a non-2xx status (retryable by status).
        :raises ContentTypeError: neither an event stream nor JSON.
        """
        spec = self.spec
        errors = spec.errors
        # The stream's own headers as they are when this attempt adds none (never changed:
        # the request is built from them into a new mapping).
        merged = {**spec.headers, **headers} if headers else spec.headers
        try:
            if get is not None:
                if spec.build_get is None:
                    raise APIConnectionError("this client cannot send GET requests to resume")
                request = spec.build_get(get, merged, spec.timeouts)
            else:
                request = spec.build(spec.path, body or spec.body, merged, spec.timeouts)
        except UnicodeEncodeError as exc:
            if exc.encoding != "ascii":  # not a header's (a body's lone surrogate)
                raise
            raise RequestHeaderError(_non_ascii_header(merged)) from None  # never the value
        if self.cancelled:
            raise AttemptCancelled
        try:
            response = await self._send(request)
            if response is None or self.cancelled:
                await self._unsent(response)
        except errors.timeout as exc:
            raise APITimeoutError(
                f"timed out before the response: {type(exc).__name__}",
                deadline=errors.deadline_of(exc),
            ) from exc
        except errors.decoding as exc:  # the head announced a coding no decoder here reads
            raise StreamFailedError(f"the response body cannot be decoded: {exc}") from exc
        except errors.request as exc:  # transport errors
            raise _connection_error(exc, request) from exc
        # Asked once, before the response is visible: cancel() may abort it from now on.
        self.controls = controls = controls_of(response)
        self.response = response
        try:
            if _plain_event_stream(response, controls.decodes):  # the usual: no coroutine
                self.body = response.aiter_bytes().__aiter__()
            else:
                await self._check(response, max_json_bytes, request)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self.close(drain=False)
            if self.cancelled and isinstance(exc, Exception):
                # cancel() aborted the read of a whole body (a JSON reply, an error status's
                # or a wrong content type's excerpt): what broke it is the caller's doing.
                raise AttemptCancelled from exc
            raise
        abort = controls.abort
        self.scoped_reads = abort is None
        if self.cancelled and abort is not None:
            abort()

    def _send(self, request: Any) -> Awaitable[Any]:
        """The send of ``request`` under the head's deadline, to await: the response, or
        ``None`` if the deadline passed or :meth:`cancel` came first (see :meth:`_unsent`).
        The event loop's own coroutine, not one around it: a frame less per request."""
        wait = self.head
        head = None if wait is None else wait.seconds
        if on_asyncio():
            return self._send_asyncio(request, head)
        return self._send_scoped(request, head)

    async def _unsent(self, response: Any) -> None:
        """The send ended without a usable response (``None``: the head's deadline passed,
        or :meth:`cancel` came): closed if there is one, and the typed error raised."""
        if response is None and not self.cancelled:
            wait = self.head
            raise APITimeoutError(
                f"no response head within {seconds(None if wait is None else wait.seconds)}",
                deadline=Deadline.HEAD if wait is None else wait.deadline,
            )
        if response is not None:
            with anyio.CancelScope(shield=True):
                await response.aclose()
        raise AttemptCancelled

    async def _send_asyncio(self, request: Any, head: float | None) -> Any:
        """The send under asyncio's own timeout: the same deadline and the same interruption
        by :meth:`cancel` as an anyio cancel scope, at about half its cost (every request
        pays it before its first byte). ``None``: the deadline passed or ``cancel()`` came."""
        if sys.version_info < (3, 11):  # pragma: no cover - asyncio.timeout_at is 3.11+
            return await self._send_scoped(request, head)
        loop = asyncio.get_running_loop()
        if head is not None and getattr(request, "head_bounded", True) is False:
            # The deadline below bounds the head (see
            # :attr:`~fluxstream._io.aiohttp_client.AiohttpRequest.head_bounded`).
            request.head_bounded = True
        timeout = asyncio.timeout_at(None if head is None else loop.time() + head)
        self._timeout = timeout
        try:
            async with timeout:
                return await self.spec.http.send(request, stream=True)
        except TimeoutError:
            if not timeout.expired():  # not ours: the transport's own
                raise
            return None
        finally:
            self._timeout = None

    async def _send_scoped(self, request: Any, head: float | None) -> Any:
        """The send in an anyio cancel scope (trio). ``None``: as :meth:`_send_asyncio`."""
        response = None
        deadline = math.inf if head is None else anyio.current_time() + head
        with anyio.CancelScope(deadline=deadline) as scope:
            self._scope = scope
            try:
                response = await self.spec.http.send(request, stream=True)
            except BaseExceptionGroup as group:
                # trio's happy-eyeballs connect runs in a nursery: a cancel while connecting
                # arrives as a group of Cancelled. It is a plain cancel; say so.
                raise _only_cancelled(group) or group from None
        self._scope = None
        return response

    async def _check(self, response: Any, max_json_bytes: int, request: Any) -> None:
        """Status, then content type, before any SSE parsing. Whatever of a body goes into an
        error is the server's (network data): the request's credentials are taken out of it
        first (an echo of the request, such as a catch-all route's, holds them)."""
        status: int = response.status_code
        errors = self.spec.errors
        if not 200 <= status < 300:
            # The status is the error; a body cut short still describes what it can.
            body, _ = await read_limited(response, ERROR_BODY_LIMIT, errors)
            raise status_error(status, response.headers, _shown(body, request).encode())
        ctype = response.headers.get("content-type", "")
        mime = ctype.partition(";")[0].strip().lower()
        if status in _NO_BODY:
            raise _no_body(ctype, status)
        if mime == "text/event-stream":
            coding = undecodable_encoding(response, self.controls.decodes)
            if coding is not None:
                # What the library raises for a body it cannot decode (its DecodingError): the
                # same failure, with the same cause, as a gzip body that is not gzip.
                message = (
                    f"content-encoding {coding!r} is not supported here (install its decoder: "
                    "Brotli for br, zstandard for zstd)"
                )
                undecodable = errors.decoding(message)
                raise StreamFailedError(
                    f"the response body cannot be decoded: {message}"
                ) from undecodable
            self.body = response.aiter_bytes().__aiter__()
            return
        if mime == "application/json" or mime.endswith("+json"):
            body, broken = await read_limited(response, max_json_bytes, errors)
            if broken is not None:  # the reply itself broke off: a failure, not a retry
                message = f"the JSON reply broke off: {type(broken).__name__}: {broken}"
                raise StreamFailedError(message) from broken
            if not body.strip():
                raise _no_body(ctype, status)
            try:
                payload = json.loads(body)
            except ValueError as exc:
                raise ContentTypeError(
                    ctype, _shown(body, request), status_code=status,
                    what=f"{ctype!r} that is not JSON",
                ) from exc
            except RecursionError as exc:
                raise StreamFailedError("the JSON reply is nested too deeply to read") from exc
            if not isinstance(payload, dict):
                kind = type(payload).__name__
                raise StreamFailedError(f"the JSON reply is a {kind}, not a completion object")
            api = self.spec.api
            wire = api.format_class
            if not wire.reads_body(payload):
                raise NotAReplyError(
                    ctype, _shown(body, request), status_code=status,
                    what=f"{ctype!r} that is not a {api.title} reply ({wire.reply_shape}; is "
                    "base_url the API's root?)",
                )
            self.payload = payload
            self.is_json = True
            return
        body, _ = await read_limited(response, _EXCERPT_BYTES, errors)
        if not body:
            raise _no_body(ctype, status)
        raise ContentTypeError(ctype, _shown(body, request), status_code=status)

    # ------------------------------------------------------------------ reading

    async def read(self) -> bytes:
        """The next read of the event stream; ``StopAsyncIteration`` at its end (or when
        :meth:`cancel` interrupted a scoped read). HTTP library errors pass unchanged: the
        stream tells a drop (resumable) from a timeout."""
        assert self.body is not None
        if not self.scoped_reads:
            return await self.body.__anext__()
        with anyio.CancelScope() as self._scope:
            return await self.body.__anext__()
        raise StopAsyncIteration  # cancelled by cancel(): the stream ends as cancelled

    # ------------------------------------------------------------------ ending

    def cancel(self) -> None:
        """Interrupt a pending send or read at once, from any task (idempotent)."""
        self.cancelled = True
        if self._scope is not None:
            self._scope.cancel()
        timeout = self._timeout
        if timeout is not None and not timeout.expired():
            timeout.reschedule(0.0)  # due at once: the send is interrupted at its next step
        abort = self.controls.abort
        if abort is not None and self.response is not None and not self.scoped_reads:
            abort()

    def abandon(self) -> None:
        """Close the response now, never waiting: its stream was collected unclosed."""
        self.cancelled = True
        response = self.response
        if self._closed or response is None:
            return
        self._closed = True
        controls = self.controls
        close = controls.close or controls.abort
        if close is not None:
            close()

    def close_now(self, *, drain: bool = False) -> bool:
        """:meth:`close`, synchronously, when it has nothing to wait for: nothing to drain
        (``drain`` is not asked, or the transport has the body's end already) and a response
        that closes without waiting with no generator chain to unwind under it (fluxstream's
        own transport). Whether it closed; if not, nothing changed and :meth:`close` is the
        way."""
        response = self.response
        if self._closed or response is None:
            return True
        controls = self.controls
        complete = controls.body_complete
        if drain and not self.cancelled and (complete is None or not complete()):
            return False
        close = controls.close
        if close is None or needs_unwinding(self.body):
            return False
        self._closed = True
        self.body = None
        close()
        return True

    async def close(self, *, drain: bool = False) -> None:
        """Close the response (idempotent). ``drain``: the sentinel came and nobody else
        reads the body, so read its end first (briefly) and the connection goes back to the
        pool instead of being torn down."""
        if self._closed or self.response is None:
            return
        self._closed = True
        response = self.response
        source = self.body
        self.body = None
        # Nothing to read on for when the transport already has the body's end.
        controls = self.controls
        complete = controls.body_complete
        drain = drain and not self.cancelled and (complete is None or not complete())
        try:
            if drain and source is not None:
                with anyio.move_on_after(DRAIN_SECONDS):
                    drained = 0
                    async for chunk in source:
                        drained += len(chunk)
                        if drained > _DRAIN_AFTER_END_BYTES:
                            break
        except Exception:  # the reply is complete; a failing drain changes nothing
            pass
        finally:
            close = controls.close
            if close is not None and not needs_unwinding(source):
                close()  # fluxstream's own transport: nothing to wait for, nothing to shield
            else:
                with anyio.CancelScope(shield=True):
                    if source is not None and not await finish_body(source):
                        # Closed from another task while the owner reads: if that read
                        # returns bytes, the chain stays suspended; the owner's close finishes
                        # it (set before any checkpoint, so that close cannot come first).
                        self.unfinished = source
                    await response.aclose()


def _shown(body: bytes, request: Any) -> str:
    """The start of a body a server sent, as text an error may show: without the request's
    credentials (see :func:`~fluxstream._io.http_library.without_credentials`)."""
    text = body.decode("utf-8", "replace")
    secrets = credentials_of(getattr(request, "headers", None) or {})
    return without_credentials(text, secrets) if secrets else text


def _no_body(ctype: str, status: int) -> ContentTypeError:
    """A 2xx answer without a body (a ``204``, an empty ``200``): no reply came, whatever its
    content type says."""
    said = f" (content-type {ctype!r})" if ctype else ""
    return ContentTypeError(
        ctype, status_code=status,
        what=f"with no body{said}: no event stream and no reply came",
    )


def _connection_error(exc: BaseException, request: Any) -> APIConnectionError:
    """The HTTP library's failure to send ``request``, in words: a host name that does not
    resolve says so (the libraries say ``[Errno -2] Name or service not known`` or
    ``Unknown error -2``)."""
    unresolved = unresolved_host(exc)
    if unresolved is None:
        return APIConnectionError(f"request failed: {type(exc).__name__}: {exc}")
    host = getattr(getattr(request, "url", None), "host", None) or "the server's host"
    reason = unresolved.strerror or str(unresolved)
    return APIConnectionError(f"could not resolve host {str(host)!r}: {reason}")


def _non_ascii_header(headers: Mapping[str, str]) -> str:
    names = [name for name, value in headers.items() if not f"{name}{value}".isascii()]
    where = f"header {names[0]!r}" if names else "a request header (headers=)"
    return (
        f"{where} holds a non-ASCII character: HTTP headers carry ASCII only (encode the "
        "value, e.g. percent-encoding); nothing was sent, the value is not shown"
    )


def _only_cancelled(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The first cancellation in ``group`` if it holds nothing else."""
    cancelled = anyio.get_cancelled_exc_class()
    rest = group.split(cancelled)[1]
    if rest is not None:
        return None
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf


class PushedBack:
    """Bytes already read put back in front of a body (a hedge's race read them): those
    chunks, then what ended the read there (``error``, or the end), or else the rest of
    ``body``. Once the chunks are out and the read goes on, the attempt reads ``body``
    itself again (:attr:`Attempt.body` is put back), so the rest of the reply costs nothing
    more per read. A plain iterator, not a generator: :func:`needs_unwinding` and
    :func:`finish_body` look through it to the HTTP library's body."""

    __slots__ = ("_attempt", "_chunks", "_ended", "_error", "body")

    def __init__(
        self, attempt: Attempt, chunks: list[bytes], body: AsyncIterator[bytes] | None, *,
        error: BaseException | None, ended: bool,
    ) -> None:
        self._attempt = attempt
        self._chunks = chunks[::-1]
        self.body = body
        self._error = error
        self._ended = ended or body is None

    def __aiter__(self) -> PushedBack:
        return self

    async def __anext__(self) -> bytes:
        if self._chunks:
            return self._chunks.pop()
        error = self._error
        if error is not None:
            self._error = None
            self._ended = True
            raise error
        body = self.body
        if self._ended or body is None:
            raise StopAsyncIteration
        attempt = self._attempt
        if attempt.body is self:
            attempt.body = body
        return await body.__anext__()


async def finish_body(source: AsyncIterator[bytes]) -> bool:
    """End the HTTP library's chain of async generators under a body that was not read to its
    end, inside a read, so every one of them finishes now. False: another task's read is in
    the chain right now (a close from another task), so that task must finish it later.

    Closing only the outermost generator (``aclose()``) leaves the four inner ones suspended
    for the garbage collector, which under trio is a ``ResourceWarning`` per generator. A read
    in an already-cancelled scope raises at its first checkpoint, deep in the chain, and the
    exception unwinds (and finishes) each generator on its way out; the connection under an
    unfinished body is closed, as it had to be. An exhausted generator just stops.
    """
    if type(source) is PushedBack:
        if source.body is None:
            return True
        source = source.body
    if not needs_unwinding(source):
        # The cancelled scope below is not free (anyio formats the task's repr on every
        # ``cancel()``: ~50 µs), and every stream's close comes here.
        return True
    with anyio.CancelScope(shield=True), anyio.CancelScope() as scope:
        scope.cancel()
        for _ in range(_FINISH_READS):  # buffered data comes back without a checkpoint
            try:
                await source.__anext__()
            except RuntimeError:  # "asynchronous generator is already running"
                return False
            except Exception:  # StopAsyncIteration, or the library's error: it unwound
                return True
    return True


def needs_unwinding(source: AsyncIterator[bytes] | None) -> bool:
    """``source`` is a chain of async generators not run to its end (see :func:`finish_body`);
    anything else (the aiohttp adapter's body is a plain iterator that closing the response
    ends, or a generator already exhausted) has nothing to unwind."""
    if type(source) is PushedBack:
        source = source.body
    return isinstance(source, AsyncGeneratorType) and source.ag_frame is not None


async def read_limited(
    response: Any, limit: int, errors: HttpErrors
) -> tuple[bytes, BaseException | None]:
    """At most ``limit`` bytes of a (non-event-stream) body, and the HTTP library's error if
    the connection broke while reading it (what arrived before is kept)."""
    parts: list[bytes] = []
    size = 0
    broken: BaseException | None = None
    try:
        async for chunk in response.aiter_bytes():
            parts.append(chunk)
            size += len(chunk)
            if size >= limit:
                break
    except errors.request as exc:  # transport errors, and decoding errors of the body
        broken = exc
    return b"".join(parts)[:limit], broken
