"""The seam between the I/O layer and an HTTP library: what a client and a response must have,
and what a transport may offer beyond that.

**Required** (httpx's calling convention; ``httpx.AsyncClient``, ``httpx2.AsyncClient``,
``httpx_aiohttp.HttpxAiohttpClient`` and fluxstream's own clients all have it):
:class:`HttpClient` builds a request and sends it with ``stream=True``; the
:class:`HttpResponse` it returns has a status, headers, its body's bytes and ``aclose``. A
client's exceptions are those of the httpx-like library it comes from
(:class:`~fluxstream._io.http_library.HttpErrors`); fluxstream's own clients raise httpx's.

**Read when present** (httpx's own optional members, never required): a client's
``is_closed`` and ``timeout``, a response's ``extensions`` (``http_version``,
``network_stream``: how a socket is aborted under a foreign response).

**Declared capabilities** (:class:`ResponseControls`): what a transport can do for a response
that httpx's interface cannot say — which content codings it decodes, a synchronous abort of
the connection (what makes ``cancel()`` immediate without a cancel scope around every read),
whether the body's end has already arrived (a close hands the connection back without reading
on), and a close that never waits. A response declares them by being a
:class:`ControlledResponse`; :func:`controls_of` asks for them once per response, and works out
what it can for any other response (httpx's decoders, a socket shutdown through
``extensions``). Nothing here is asked per read.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from typing import Any, NamedTuple, Protocol

__all__ = [
    "NO_CONTROLS", "ControlledResponse", "HttpClient", "HttpResponse", "ResponseControls",
    "controls_of", "undecodable_encoding",
]


class HttpResponse(Protocol):
    """A response as the I/O layer reads it (``httpx.Response`` is one)."""

    @property
    def status_code(self) -> int: ...

    #: Case-insensitive ``get`` (httpx's ``Headers``, aiohttp's ``CIMultiDictProxy``).
    @property
    def headers(self) -> Any: ...

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class HttpClient(Protocol):
    """An HTTP client as the I/O layer drives it (``httpx.AsyncClient`` is one)."""

    def build_request(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Any = ...,
    ) -> Any: ...

    def send(self, request: Any, *, stream: bool = ...) -> Awaitable[Any]: ...

    async def aclose(self) -> None: ...


class ResponseControls(NamedTuple):
    """What a transport can do for one response beyond httpx's interface; ``None``: it
    cannot (the I/O layer then does what it does for any client)."""

    #: The content codings the transport decodes; ``None``: not known, nothing refused.
    decodes: Collection[str] | None = None
    #: Closes the connection at once, from synchronous code: a pending read ends now. ``None``
    #: (HTTP/2, whose connection other streams share): reads need a cancel scope.
    abort: Callable[[], None] | None = None
    #: Whether every byte of the body has arrived (closing then releases the connection to the
    #: pool); ``None``: not known, read the end to find out.
    body_complete: Callable[[], bool] | None = None
    #: ``aclose()`` done synchronously, never waiting; ``None``: close with ``await aclose()``
    #: shielded from cancellation.
    close: Callable[[], None] | None = None


#: A response that declares nothing and offers nothing beyond httpx's interface.
NO_CONTROLS = ResponseControls()


class ControlledResponse:
    """A response that declares its capabilities (fluxstream's own transport's): the I/O
    layer asks :meth:`controls` once, when the response arrives. A plain base class, not an
    ``abc.ABC``: ``isinstance`` on it is the cheapest check there is, and mypy holds a subclass
    to :meth:`controls` all the same."""

    __slots__ = ()

    @abc.abstractmethod
    def controls(self) -> ResponseControls:
        """This response's capabilities (bound to it)."""


def controls_of(response: object) -> ResponseControls:
    """What can be done for ``response``: what it declares, else what is known of the library
    it comes from. Called once per response (it may inspect the response's connection)."""
    if isinstance(response, ControlledResponse):
        return response.controls()
    return ResponseControls(decodes=_decodes_of(response), abort=_foreign_abort(response))


def undecodable_encoding(response: HttpResponse, decodes: Collection[str] | None) -> str | None:
    """The response's content coding outside ``decodes`` (what its transport decodes), if any:
    a ``br`` or ``zstd`` body without the decoder's package (httpx would pass it on undecoded,
    aiohttp refuse it). ``None`` when every coding is decoded, or ``decodes`` is not known."""
    value = response.headers.get("content-encoding")
    if not value or decodes is None:
        return None
    for coding in str(value).lower().split(","):
        coding = coding.strip()
        if coding and coding not in decodes:
            return coding
    return None


def _decodes_of(response: object) -> Collection[str] | None:
    """The codings httpx decodes for one of its responses (its forks' are not known)."""
    decoders = _httpx_decoders()
    if decoders is None:
        return None
    response_class, supported = decoders
    return supported if isinstance(response, response_class) else None


@functools.lru_cache(maxsize=1)
def _httpx_decoders() -> tuple[type, Collection[str]] | None:
    try:
        import httpx
        from httpx._decoders import SUPPORTED_DECODERS
    except ImportError:  # pragma: no cover - another httpx layout: not checked
        return None
    return httpx.Response, frozenset(SUPPORTED_DECODERS)


def _foreign_abort(response: object) -> Callable[[], None] | None:
    """A synchronous close of the connection under a response of another transport, if it
    has one: a socket shutdown through httpx's ``network_stream``, or the aiohttp response
    under httpx-aiohttp. Never for HTTP/2: its connection is shared by every stream multiplexed
    on it, so aborting it would end them all (those reads get a cancel scope instead)."""
    extensions = getattr(response, "extensions", None) or {}
    if extensions.get("http_version") == b"HTTP/2":
        return None
    stream = extensions.get("network_stream")
    if stream is not None:
        # A socket.socket, or asyncio's TransportSocket wrapper around one.
        sock = stream.get_extra_info("socket")
        if sock is None or not hasattr(sock, "shutdown"):
            return None

        def shutdown() -> None:
            with contextlib.suppress(OSError):  # already closed: nothing left to abort
                sock.shutdown(socket.SHUT_RDWR)

        return shutdown
    body = getattr(response, "stream", None)
    # httpx wraps the transport's stream (BoundAsyncStream._stream) - look through one layer.
    aio = getattr(body, "_aiohttp_response", None) or getattr(
        getattr(body, "_stream", None), "_aiohttp_response", None
    )
    # aiohttp's ClientResponse.close() is synchronous and drops the connection.
    if aio is None or not hasattr(aio, "close"):
        return None
    return functools.partial(_close_aiohttp, aio)


def _close_aiohttp(resp: Any) -> None:
    """An aiohttp response closed as fluxstream's own transport closes one, when aiohttp is
    one whose internals it knows (else aiohttp's own ``close()``)."""
    try:
        from .aiohttp_private import close_response
    except ImportError:
        resp.close()
    else:
        close_response(resp)
