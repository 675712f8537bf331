"""The HTTP client fluxstream creates when the caller does not inject one.

``transport="auto"`` (the default) picks, per request, by the running event loop:

* **asyncio** -> :class:`fluxstream._aiohttp.AiohttpClient` (aiohttp): the cheapest per read and
  per request, and flat with the number of concurrent streams (``benchmarks/README.md``,
  "Transport");
* **trio** (or any other loop) -> an ``httpx.AsyncClient``, exactly the client fluxstream
  created before (httpcore on anyio).

Proxies configured in the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``) keep
the whole client on httpx, which implements those rules (``NO_PROXY``, SOCKS) as before; so
does an active ``respx`` mock (tests that mock httpx keep mocking fluxstream).
Both paths raise **httpx's** exception classes, so the layers above never ask which ran.

A caller's own ``http_client`` never comes here: it is used exactly as given.
"""

from __future__ import annotations

import sys
import urllib.request
from collections.abc import Mapping
from typing import Any

import httpx
import sniffio

__all__ = ["AutoClient", "make_http_client"]

TRANSPORTS = ("auto", "httpx", "aiohttp")


def make_http_client(transport: str, timeout: httpx.Timeout, limits: httpx.Limits) -> Any:
    """The client for ``AsyncClient(transport=...)``; ``ValueError`` for an unknown name."""
    if transport == "auto":
        return AutoClient(timeout=timeout, limits=limits)
    if transport == "httpx":
        return httpx.AsyncClient(limits=limits, timeout=timeout)
    if transport == "aiohttp":
        try:
            from ._aiohttp import AiohttpClient
        except ImportError as exc:  # pragma: no cover - aiohttp is a dependency
            raise ImportError("transport='aiohttp' needs aiohttp: pip install aiohttp") from exc
        return AiohttpClient(timeout=timeout, limits=limits)
    raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")


def _proxies_in_environment() -> bool:
    return any(scheme != "no" for scheme in urllib.request.getproxies())


class AutoClient:
    """aiohttp on asyncio, httpx elsewhere (see the module docstring). Closed by ``aclose``."""

    def __init__(self, *, timeout: httpx.Timeout, limits: httpx.Limits) -> None:
        self.timeout = timeout
        self._limits = limits
        self._httpx: httpx.AsyncClient | None = None
        self._aio: Any = None
        self._closed = False
        if not _proxies_in_environment():
            try:
                from ._aiohttp import AiohttpClient
            except ImportError:  # pragma: no cover - aiohttp is a dependency
                pass
            else:
                self._aio = AiohttpClient(timeout=timeout, limits=limits)

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
            self._httpx = httpx.AsyncClient(limits=self._limits, timeout=self.timeout)
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
        if self._aio is not None and _on_asyncio() and not _mocked_by_respx():
            return self._aio.build_request(method, url, content=content, headers=headers, **extra)
        return self._httpx_client().build_request(
            method, url, content=content, headers=headers, **extra
        )

    async def send(self, request: Any, *, stream: bool = True) -> Any:
        if isinstance(request, httpx.Request):
            return await self._httpx_client().send(request, stream=stream)
        return await self._aio.send(request, stream=stream)

    async def aclose(self) -> None:
        self._closed = True
        try:
            if self._aio is not None:
                await self._aio.aclose()
        finally:
            if self._httpx is not None:
                await self._httpx.aclose()


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


def _on_asyncio() -> bool:
    try:
        return sniffio.current_async_library() == "asyncio"
    except sniffio.AsyncLibraryNotFoundError:
        return False
