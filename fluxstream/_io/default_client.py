"""The HTTP client fluxstream creates when the caller does not inject one.

``transport="auto"`` (the default) picks, per request, by the running event loop:

* **asyncio** -> :class:`fluxstream._io.aiohttp_client.AiohttpClient` (aiohttp): the cheapest per
read and
  per request, and flat with the number of concurrent streams (``benchmarks/README.md``,
  "Transport");
* **trio** (or any other loop) -> an ``httpx.AsyncClient``, exactly the client fluxstream
  created before (httpcore on anyio).

Proxies configured in the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``) keep
the whole client on httpx, which implements those rules (``NO_PROXY``, SOCKS) as before; so
does an active ``respx`` mock (tests that mock httpx keep mocking fluxstream). An explicit
``transport="aiohttp"`` honours ``HTTP(S)_PROXY`` and ``NO_PROXY`` itself and refuses, with a
``ValueError``, a proxy aiohttp cannot use (SOCKS); it never ignores one.
Both paths raise **httpx's** exception classes, so the layers above never ask which ran, and
both send again, at once and once, a request that failed on a kept-alive connection before
any byte of a response (:class:`HttpxClient`, :meth:`AiohttpClient.send`).

An aiohttp whose internals the adapter does not know (outside the versions
:mod:`fluxstream._io.aiohttp_private` was checked against) is refused when the adapter is
imported: ``transport="aiohttp"`` raises that
:class:`~fluxstream._io.http_library.UnsupportedTransport` (an ``ImportError`` naming the
versions supported); ``transport="auto"`` runs on httpx instead and says so once, in a
warning of the ``fluxstream`` logger: the client still works, at httpx's cost per read.

A caller's own ``http_client`` never comes here: it is used exactly as given.
"""

from __future__ import annotations

import logging
import sys
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

import httpx

from .http_library import UnsupportedTransport
from .tasks import on_asyncio

if TYPE_CHECKING:  # pragma: no cover
    from .aiohttp_client import AiohttpClient
    from .transport import HttpClient, HttpResponse

__all__ = ["AutoClient", "HttpxClient", "make_http_client"]

TRANSPORTS = ("auto", "httpx", "aiohttp")

logger = logging.getLogger("fluxstream")
#: ``transport="auto"`` said once that the installed aiohttp is not supported.
_warned_unsupported = False


def make_http_client(transport: str, timeout: httpx.Timeout, limits: httpx.Limits) -> Any:
    """The client for ``AsyncClient(transport=...)``; ``ValueError`` for an unknown name."""
    if transport == "auto":
        return AutoClient(timeout=timeout, limits=limits)
    if transport == "httpx":
        return HttpxClient(limits=limits, timeout=timeout)
    if transport == "aiohttp":
        try:
            from .aiohttp_client import AiohttpClient
        except UnsupportedTransport:
            raise  # its own words: which aiohttp versions, and transport="httpx"
        except ImportError as exc:  # pragma: no cover - aiohttp is a dependency
            raise ImportError("transport='aiohttp' needs aiohttp: pip install aiohttp") from exc
        proxies = _environment_proxies()
        unusable = sorted(
            f"{name.upper()}_PROXY={_without_userinfo(url)}"
            for name, url in proxies.items()
            if urllib.parse.urlsplit(url).scheme not in ("http", "https")
        )
        if unusable:  # aiohttp speaks only to HTTP proxies: never ignore one silently
            raise ValueError(
                f"transport='aiohttp' cannot use the proxy in {', '.join(unusable)} (aiohttp "
                "supports http:// proxies only); use transport='httpx' or 'auto'"
            )
        return AiohttpClient(timeout=timeout, limits=limits, trust_env=bool(proxies))
    raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")


def _environment_proxies() -> dict[str, str]:
    """``HTTP_PROXY`` and the like, by scheme (``no``, the exceptions, left out)."""
    return {k: v for k, v in urllib.request.getproxies().items() if k != "no" and v}


def _proxies_in_environment() -> bool:
    return bool(_environment_proxies())


def _without_userinfo(url: str) -> str:
    """A proxy URL for an error message: its password never shown."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


class HttpxClient(httpx.AsyncClient):
    """``httpx.AsyncClient``, plus the resend of a request that failed on a kept-alive
    connection before any byte of a response (see :class:`_ConnectionProbe`): a server that
    closes its connections after each response (llama.cpp's does) closes the one the next
    request was just sent on, a few milliseconds too late for httpcore's check of idle
    connections. Such a request was never processed: it is sent again at once, once, on a
    new connection, without spending a retry of fluxstream's policy."""

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        probe = _ConnectionProbe(request.extensions.get("trace"))
        request.extensions["trace"] = probe
        try:
            return await super().send(request, **kwargs)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            if not probe.resendable(exc):
                raise
        await self._close_idle_connections(request.url)
        request.extensions["trace"] = _ConnectionProbe(probe.chained)
        return await super().send(request, **kwargs)

    async def _close_idle_connections(self, url: httpx.URL) -> None:
        """Close the pool's idle connections to ``url``'s origin: the server that closed one
        may have closed the others too, and the resend must go out on a new connection."""
        try:
            import httpcore

            pool = getattr(self._transport_for_url(url), "_pool", None)
            connections = list(getattr(pool, "connections", ()))
            origin = httpcore.Origin(url.raw_scheme, url.raw_host, url.port or (
                443 if url.scheme == "https" else 80
            ))
        except Exception:  # another httpx/httpcore layout: the pool's own checks remain
            return
        for connection in connections:
            if connection.is_idle() and connection.can_handle_request(origin):
                await connection.aclose()


class _ConnectionProbe:
    """httpcore's ``trace`` extension for one request: whether it opened a connection (any
    ``connection.*`` step) or went out on a pooled one. A caller's own trace still runs."""

    __slots__ = ("chained", "new_connection")

    def __init__(self, chained: Any) -> None:
        self.chained = chained
        self.new_connection = False

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        if name.startswith("connection."):
            self.new_connection = True
        if self.chained is not None:
            await self.chained(name, info)

    def resendable(self, exc: Exception) -> bool:
        """A pooled connection failed before any response: closed under the request (h11's
        "without sending a response": not one byte of a head), reset, or unwritable."""
        if self.new_connection:
            return False
        if isinstance(exc, httpx.RemoteProtocolError):
            return "without sending a response" in str(exc)
        return True


class AutoClient:
    """aiohttp on asyncio, httpx elsewhere (see the module docstring). Closed by ``aclose``."""

    def __init__(self, *, timeout: httpx.Timeout, limits: httpx.Limits) -> None:
        self.timeout = timeout
        self._limits = limits
        self._httpx: httpx.AsyncClient | None = None
        self._aio: Any = None
        self._closed = False
        if not _proxies_in_environment():
            aiohttp_client = _aiohttp_client_or_none()
            if aiohttp_client is not None:
                self._aio = aiohttp_client(timeout=timeout, limits=limits)

    def __repr__(self) -> str:
        return f"<fluxstream AutoClient aiohttp={'on asyncio' if self._aio else 'off'}>"

    @property
    def is_closed(self) -> bool:
        """:meth:`aclose` was called: nothing is sent any more (as ``httpx.AsyncClient``)."""
        return self._closed

    @property
    def uses_aiohttp(self) -> bool:
        """Whether requests made on asyncio go through aiohttp."""
        return self._aio is not None

    def _httpx_client(self) -> httpx.AsyncClient:
        if self._httpx is None:
            if self._closed:
                raise RuntimeError("Cannot send a request, as the client has been closed.")
            self._httpx = HttpxClient(limits=self._limits, timeout=self.timeout)
        return self._httpx

    def build_request(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Any = None,
    ) -> Any:
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        if self._aio is not None and on_asyncio() and not _mocked_by_respx():
            return self._aio.build_request(method, url, content=content, headers=headers, **extra)
        return self._httpx_client().build_request(
            method, url, content=content, headers=headers, **extra
        )

    def send(self, request: Any, *, stream: bool = True) -> Awaitable[Any]:
        """The chosen library's ``send`` of ``request``, to await (its own coroutine: no
        frame of this client's in every request's path)."""
        if isinstance(request, httpx.Request):
            return self._httpx_client().send(request, stream=stream)
        sent: Awaitable[Any] = self._aio.send(request, stream=stream)
        return sent

    async def aclose(self) -> None:
        self._closed = True
        try:
            if self._aio is not None:
                await self._aio.aclose()
        finally:
            if self._httpx is not None:
                await self._httpx.aclose()


def _aiohttp_client_or_none() -> type[AiohttpClient] | None:
    """The aiohttp adapter, or ``None`` where it cannot run: aiohttp missing, or a version
    the adapter refuses (said once, as a warning: the client runs on httpx)."""
    global _warned_unsupported
    try:
        from .aiohttp_client import AiohttpClient
    except UnsupportedTransport as exc:
        if not _warned_unsupported:
            _warned_unsupported = True
            logger.warning("transport='auto' runs on httpx: %s", exc)
        return None
    except ImportError:  # pragma: no cover - aiohttp is a dependency
        return None
    return AiohttpClient


def _mocked_by_respx() -> bool:
    """Whether respx (which patches httpx's transports) is mocking right now: tests that mock
    httpx keep mocking fluxstream's default client instead of reaching the network."""
    respx = sys.modules.get("respx")
    if respx is None:
        return False
    try:
        return any(mocker.routers for mocker in respx.mocks.Mocker.registry.values())
    except AttributeError:  # another respx version: assume it mocks
        return True


if TYPE_CHECKING:  # pragma: no cover - mypy holds these clients to the seam

    def _implement(
        auto: AutoClient, own: HttpxClient, given: httpx.AsyncClient, response: httpx.Response
    ) -> tuple[HttpClient, HttpClient, HttpClient, HttpResponse]:
        return auto, own, given, response
