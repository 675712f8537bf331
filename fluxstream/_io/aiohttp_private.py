"""Every use of aiohttp's private parts, in one module that checks them when it is imported.

The aiohttp adapter (:mod:`fluxstream._io.aiohttp_client`) makes aiohttp behave as httpx does
where aiohttp alone does not (see its docstring); that takes parts of aiohttp that are not its
documented interface: its connection protocol (``aiohttp.client_proto.ResponseHandler``) and
connector (``TCPConnector._get``/``_release``) subclassed, the body reader's buffer, its parser
errors (``aiohttp.http_exceptions``), which decoders it has (``aiohttp.compression_utils``).
They live here, and nowhere else (``tests/transport/test_aiohttp_fence.py`` checks that no
other module imports an aiohttp module but the top-level one).

On import the module checks that every one of them is there, as used: the modules and
classes, the methods with the parameters called, the attributes read or set; and the
undocumented methods of aiohttp's public classes the adapter calls in its per-response path
(the body reader's ``is_eof`` and ``set_exception``), which it calls directly (a call less per
response than through a function here). An aiohttp missing any is refused with
:class:`~fluxstream._io.http_library.UnsupportedTransport`, naming what is missing, the versions
supported (:data:`SUPPORTED`, the range ``pyproject.toml`` allows) and ``transport="httpx"``:
never an ``AttributeError`` in the middle of a request.
``transport="auto"`` then runs on httpx, with a warning; ``transport="aiohttp"`` raises it.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import aiohttp

from .http_library import UnsupportedTransport, os_text

try:
    import aiohttp.compression_utils as _compression
    from aiohttp.client_proto import ResponseHandler
    from aiohttp.http_exceptions import ContentEncodingError, HttpProcessingError
    from aiohttp.streams import StreamReader
except ImportError as _exc:  # refused below, naming it
    _UNIMPORTABLE: str | None = _exc.name or str(_exc)
else:
    _UNIMPORTABLE = None

__all__ = [
    "DECODES", "FRESH", "HEAD_LIMIT", "REUSED", "SESSION_HEAD_LIMITS", "SUPPORTED",
    "Connector", "ContentEncodingError", "Handler", "HttpProcessingError", "buffered",
    "close_response", "disarm_read_timer", "parser_text",
]

#: The aiohttp versions whose internals this module was checked against (``pyproject.toml``
#: pins the same range; how to move it: ``.ci/run``).
SUPPORTED = ">=3.10.11,<3.15"


def _instance_attributes(cls: type) -> set[str]:
    """The attributes an instance of ``cls`` has: its slots, and what its ``__init__``s set
    (the names their code uses; enough to notice one renamed)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
        code = getattr(klass.__dict__.get("__init__"), "__code__", None)
        if code is not None:
            names.update(code.co_names)
    return names


def _parameters(function: Any) -> set[str] | None:
    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # not introspectable: a C function
        return None


def _absent(
    cls: type,
    methods: Mapping[str, Iterable[str]],
    attributes: Iterable[str] = (),
    settable: Iterable[str] = (),
) -> Iterator[str]:
    """What of ``cls`` this module uses and ``cls`` lacks: methods with the parameters passed,
    instance attributes, properties written."""
    where = f"{cls.__module__}.{cls.__qualname__}"
    for name, params in methods.items():
        method = getattr(cls, name, None)
        found = _parameters(method) if callable(method) else None
        if found is None or not set(params) <= found:
            yield f"{where}.{name}({', '.join(params)})"
    have = _instance_attributes(cls)
    for name in attributes:
        if name not in have:
            yield f"{where}.{name}"
    for name in settable:
        prop = getattr(cls, name, None)
        if not isinstance(prop, property) or prop.fset is None:
            yield f"{where}.{name} (settable)"


#: The public names of aiohttp the adapter uses (all present since 3.10.6).
_PUBLIC = (
    "ClientConnectionError", "ClientConnectionResetError", "ClientConnectorError",
    "ClientError", "ClientHttpProxyError", "ClientOSError", "ClientPayloadError",
    "ClientResponseError", "ClientSSLError", "ClientSession", "ClientTimeout",
    "ConnectionTimeoutError", "InvalidURL", "ServerDisconnectedError", "SocketTimeoutError",
    "TCPConnector",
)


def _missing() -> list[str]:
    """Everything this module (and the adapter) needs of aiohttp that is not there."""
    if _UNIMPORTABLE is not None:
        return [_UNIMPORTABLE]
    missing = [f"aiohttp.{name}" for name in _PUBLIC if not hasattr(aiohttp, name)]
    if missing:
        return missing
    missing += _absent(
        ResponseHandler,
        methods={
            "set_response_params": (), "data_received": ("data",),
            "connection_lost": ("exc",), "set_exception": ("exc", "exc_cause"),
        },
        attributes=("_payload", "_buffer", "_exception", "transport"),
        settable=("read_timeout",),
    )
    missing += _absent(
        aiohttp.TCPConnector,
        methods={"_get": ("key",), "_release": ("key", "protocol", "should_close")},
        attributes=("_conns", "_factory", "_loop"),
    )
    if not inspect.iscoroutinefunction(getattr(aiohttp.TCPConnector, "_get", None)):
        missing.append("aiohttp.connector.TCPConnector._get (a coroutine function)")
    if not isinstance(getattr(aiohttp.ClientResponse, "connection", None), property) or not (
        isinstance(getattr(aiohttp.connector.Connection, "protocol", None), property)
    ):
        missing.append("aiohttp.ClientResponse.connection.protocol")
    missing += _absent(
        StreamReader,
        methods={
            "_read_nowait": ("n",), "is_eof": (), "exception": (),
            "set_exception": ("exc", "exc_cause"),
        },
        attributes=("_buffer",),
    )
    if not hasattr(HttpProcessingError, "message"):
        missing.append("aiohttp.http_exceptions.HttpProcessingError.message")
    if not hasattr(_compression, "HAS_BROTLI"):
        missing.append("aiohttp.compression_utils.HAS_BROTLI")
    session = _parameters(aiohttp.ClientSession.__init__) or set()
    missing += [
        f"aiohttp.ClientSession({name}=)" for name in ("max_line_size", "max_field_size")
        if name not in session
    ]
    return missing


def _refuse_unless_supported() -> None:
    missing = _missing()
    if missing:
        raise UnsupportedTransport(
            f"fluxstream's aiohttp transport needs aiohttp{SUPPORTED}: aiohttp "
            f"{aiohttp.__version__} lacks {', '.join(missing)}. Install a supported aiohttp "
            "(pip install 'aiohttp" + SUPPORTED + "'), or choose "
            'AsyncClient(transport="httpx")'
        )


_refuse_unless_supported()

#: The largest response head read, as httpcore bounds it (``MAX_INCOMPLETE_EVENT_SIZE``):
#: aiohttp's own limits (8 KiB a line, and from 3.13 on 128 header lines) refuse heads httpx
#: reads.
HEAD_LIMIT = 100 * 1024

#: ``ClientSession`` options that lift aiohttp's per-line head limits (``Handler`` bounds the
#: whole head instead); ``max_headers`` only where aiohttp has it (3.13+: before, no limit).
SESSION_HEAD_LIMITS: dict[str, Any] = {
    "max_line_size": HEAD_LIMIT, "max_field_size": HEAD_LIMIT,
    **(
        {"max_headers": HEAD_LIMIT // 4}
        if "max_headers" in (_parameters(aiohttp.ClientSession.__init__) or ())
        else {}
    ),
}

#: The content codings aiohttp decodes here (it asks for no other).
DECODES = frozenset(
    ["identity", "gzip", "deflate"]
    + (["br"] if _compression.HAS_BROTLI else [])
    + (["zstd"] if getattr(_compression, "HAS_ZSTD", False) else [])
)

#: Whether the connection of this task's request in progress came from the pool (set by
#: :meth:`Connector._get`, which runs in the sending task itself).
REUSED: contextvars.ContextVar[bool] = contextvars.ContextVar("fluxstream_reused", default=False)
#: Set around a resend: the connector hands out no pooled connection, a new one is made.
FRESH: contextvars.ContextVar[bool] = contextvars.ContextVar("fluxstream_fresh", default=False)



class Handler(ResponseHandler):
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
            end = head_end(seen, data)
            found = end > 0
            if not found:
                end = len(data)
            self._head_size += end
            if self._head_size > HEAD_LIMIT:
                self._head_too_large()
                return
            feed(self, data[:end])
            self._head_tail = b"" if found else (seen + data[-3:])[-3:]  # all of data was fed
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
            error = aiohttp.ClientPayloadError(f"the response body broke off: {os_text(exc)}")
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
            error = aiohttp.ClientPayloadError(f"malformed response body: {parser_text(exc)}")
            error.__cause__ = args[0] if args and isinstance(args[0], BaseException) else exc
            body.set_exception(error)


def head_end(seen: bytes, data: bytes) -> int:
    """Where in ``data`` a response head ends (just past its blank line, ``\r\n\r\n`` or
    ``\n\n``, whichever comes first), searched in its first :data:`HEAD_LIMIT` bytes after
    ``seen``, the head's last bytes of earlier reads; ``0`` when it does not end there.
    The usual head, whole in one read with CRLF lines, is found by one search (held equal to
    :func:`head_end_searched` by ``tests/transport/test_response_head_split_across_reads.py::
    test_the_head_end_is_found_as_the_general_search_finds_it``)."""
    if not seen:
        crlf = data.find(b"\r\n\r\n", 0, HEAD_LIMIT)
        if crlf >= 0 and data.find(b"\n\n", 0, crlf) < 0:
            return crlf + 4
    return head_end_searched(seen, data)


def head_end_searched(seen: bytes, data: bytes) -> int:
    """:func:`head_end`, for any ``seen`` and ``data``: both blank lines searched for across
    the end of ``seen`` and the start of ``data``."""
    window = seen + data[:HEAD_LIMIT]  # bounded: a large body read is not copied whole
    crlf, lf = window.find(b"\r\n\r\n"), window.find(b"\n\n")
    # ``seen`` holds no whole blank line (the search would have ended there), so an end
    # found is at least one byte into ``data``.
    ends = [max(1, i + n - len(seen)) for i, n in ((crlf, 4), (lf, 2)) if i >= 0]
    return min(ends) if ends else 0


class Connector(aiohttp.TCPConnector):
    """aiohttp's connector, telling which requests went out on a pooled connection (for the
    resend in :meth:`~fluxstream._io.aiohttp_client.AiohttpClient.send`), able to make a fresh
    one on demand, and keeping at most ``max_idle`` idle connections (httpx's
    ``max_keepalive_connections``)."""

    def __init__(self, *, max_idle: int | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._factory = functools.partial(Handler, loop=self._loop)  # type: ignore[assignment]
        self._max_idle = max_idle

    async def _get(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        if FRESH.get():
            return None
        conn = await super()._get(key, *args, **kwargs)
        REUSED.set(conn is not None)
        return conn

    def _release(self, key: Any, protocol: Any, *, should_close: bool = False) -> None:
        limit = self._max_idle
        if limit is not None and not should_close:
            should_close = sum(map(len, self._conns.values())) >= limit
        super()._release(key, protocol, should_close=should_close)


def disarm_read_timer(resp: aiohttp.ClientResponse) -> bool:
    """Stop aiohttp re-arming its ``sock_read`` timer on every socket read of ``resp``'s
    connection (a cancel and a new TimerHandle each time), for a watchdog of the caller's to
    take over; whether it was stopped. aiohttp does the same for websockets; the next request
    on this connection sets its own value again."""
    connection = resp.connection
    protocol = None if connection is None else connection.protocol
    if protocol is None:
        return False
    protocol.read_timeout = None
    return True


def buffered(content: aiohttp.StreamReader) -> bytes:
    """The bytes a body holds that no read has taken yet. aiohttp's reads raise a body's
    error before handing them out, so a valid chunk that arrived in the same segment as a
    malformed one (or just before a reset, while the consumer was busy) would be lost."""
    if not content._buffer:  # aiohttp's public reads raise the error first
        return b""
    return content._read_nowait(-1)


def close_response(resp: aiohttp.ClientResponse) -> None:
    """``aiohttp.ClientResponse.close()``, with the body's "closed" error made fresh first.

    Left to itself, ``close()`` hands the body aiohttp's one module-level
    ``ClientConnectionError("Connection closed")``; every later read of that body (the pending
    read a cancel interrupts, :func:`~fluxstream._io.attempt.finish_body` unwinding httpx-aiohttp's
    generator) raises that same instance, and each raise *appends* its frames to the
    instance's traceback. Those frames hold the response, so every early-closed stream's
    response stayed alive for the life of the process (aiohttp 3.10+, ~29 objects a stream).
    Same class and message as aiohttp's, one per response: it dies with the response.
    """
    content = getattr(resp, "content", None)
    if content is not None and content.exception() is None:
        content.set_exception(aiohttp.ClientConnectionError("Connection closed"))
    resp.close()


def parser_text(exc: BaseException) -> str:
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
