"""What the transport layer needs to know about the HTTP client it was handed.

fluxstream works with ``httpx.AsyncClient``, its maintained fork ``httpx2.AsyncClient`` and
clients built on them (``httpx_aiohttp.HttpxAiohttpClient``). The forks raise their own
exception classes, so the classes to catch are looked up on the library the client comes from
instead of being imported from ``httpx`` alone.

Also here: turning an error response into a typed exception (status first, then the provider's
JSON error or a short excerpt of an HTML/text body), keeping a request's credentials out of
what a server sends back, and the words for a failure (a duration, a socket error, a host that
does not resolve). What a client and its responses must have, and what a transport may offer
beyond that, is :mod:`fluxstream._io.transport`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .._core.headers import CREDENTIAL_NAME
from .._core.rate_limits import RateLimits
from .._timeouts import Deadline
from ..errors import (
    APIStatusError,
    AuthenticationError,
    NotFoundError,
    RateLimitError,
    RequestHeaderError,
)

__all__ = [
    "HttpErrors", "RequestHeaderError", "UnsupportedTransport", "credentials_of", "os_text",
    "seconds", "status_error", "unresolvable", "unresolved_host", "without_credentials",
]

_EXCERPT_CHARS = 300

#: The shortest credential (or the shortest piece of one cut off at a body's end) hidden.
_SHORTEST_SECRET = 6
_HIDDEN = "***"


def credentials_of(headers: Any) -> list[str]:
    """The credentials a request carries, to keep out of what a server sends back: the value
    of each header whose name says it is one (:data:`CREDENTIAL_NAME`), and for a
    ``Bearer``/``Basic`` value its token too (a server may echo either); longest first."""
    found: set[str] = set()
    for name, value in headers.items():
        if not isinstance(value, str) or not CREDENTIAL_NAME.search(str(name)):
            continue
        found.add(value)
        token = value.partition(" ")[2].strip()
        if token:
            found.add(token)
    return sorted((v for v in found if len(v) >= _SHORTEST_SECRET), key=len, reverse=True)


def without_credentials(text: str, secrets: Iterable[str]) -> str:
    """``text`` (a body a server sent) with every one of ``secrets`` in it hidden: a catch-all
    route or an echo service (httpbin's ``/anything``) sends the request's headers back, and
    its body goes into an error's message. The start of a secret cut off at the end of
    ``text`` (a body read only in part) is hidden too."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, _HIDDEN)
        for size in range(min(len(secret), len(text)) - 1, _SHORTEST_SECRET - 1, -1):
            if text.endswith(secret[:size]):
                text = text[:-size] + _HIDDEN
                break
    return text


#: The name-resolution failures worth no retry: the name does not exist (``EAI_NONAME``),
#: has no address (``EAI_NODATA``), or resolving failed for good (``EAI_FAIL``). A temporary
#: failure (``EAI_AGAIN``: no answer from the resolver) is retried like any connect error.
_UNRESOLVABLE = frozenset(
    getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA", "EAI_FAIL")
    if hasattr(socket, name)
)


def unresolvable(exc: BaseException) -> bool:
    """``exc`` (or what it was raised from) is a host name that does not resolve, and will
    not for a while: a retry would fail the same way."""
    found = unresolved_host(exc)
    return found is not None and found.errno in _UNRESOLVABLE


def unresolved_host(exc: BaseException) -> socket.gaierror | None:
    """The name-resolution failure under an HTTP library's connect error (httpx keeps it as
    the cause of the cause, aiohttp as the cause), if that is what it is."""
    seen = 0
    cause: BaseException | None = exc
    while cause is not None and seen < 8:
        if isinstance(cause, socket.gaierror):
            return cause
        cause = cause.__cause__ or cause.__context__
        seen += 1
    return None


class UnsupportedTransport(ImportError):
    """The HTTP library installed is not one a transport of fluxstream's can run on (a
    version whose internals it was not checked against): the message says which versions are,
    and how to choose another transport."""


class _NeverRaised(Exception):
    """Stands for an exception class a library does not have."""


@dataclass(frozen=True)
class HttpErrors:
    """The exception classes of one httpx-compatible library."""

    timeout: type[BaseException]
    read_timeout: type[BaseException]
    #: The library's timeout classes before a response, with the deadline each one is.
    timeouts: tuple[tuple[type[BaseException], Deadline], ...]
    transport: type[BaseException]
    #: Any failure of a request (transport, decoding, redirects): the library's RequestError.
    request: type[BaseException]
    #: A body the library could not decode (its content encoding).
    decoding: type[BaseException]

    @classmethod
    def for_client(cls, client: Any) -> HttpErrors:
        module = _library_of(type(client))
        return cls(
            timeout=module.TimeoutException,
            read_timeout=module.ReadTimeout,
            timeouts=tuple(
                (getattr(module, name, _NeverRaised), deadline)
                for name, deadline in (
                    ("ConnectTimeout", Deadline.CONNECT),
                    ("WriteTimeout", Deadline.WRITE),
                    ("PoolTimeout", Deadline.POOL),
                    ("ReadTimeout", Deadline.HEAD),  # before a response: the head's wait
                )
            ),
            transport=module.TransportError,
            request=module.RequestError,
            decoding=getattr(module, "DecodingError", _NeverRaised),
        )


    def deadline_of(self, exc: BaseException) -> Deadline:
        """Which deadline a timeout of the library (raised before a response) is."""
        for kind, deadline in self.timeouts:
            if isinstance(exc, kind):
                return deadline
        return Deadline.CONNECT


def _library_of(client_type: type) -> ModuleType:
    """The httpx-like top-level module a client class (or one of its bases) comes from;
    fluxstream's own clients raise httpx's classes (their transports translate into them)."""
    for klass in client_type.__mro__:
        root = klass.__module__.partition(".")[0]
        if root == "fluxstream":
            continue
        module = sys.modules.get(root)
        if module is not None and hasattr(module, "TransportError") and hasattr(
            module, "AsyncClient"
        ):
            return module
    import httpx

    return httpx


def os_text(exc: BaseException) -> str:
    """A socket error as a person reads it: ``Connection reset by peer``."""
    errno = getattr(exc, "errno", None)
    return os.strerror(errno) if errno else (str(exc) or type(exc).__name__)


def seconds(value: float | None) -> str:
    """A duration for an error message: ``0.5s``, not the ``0.49999199800004135s`` a deadline
    computed from two clock readings leaves (3 significant digits)."""
    if value is None:
        return "no limit"
    rounded = float(f"{value:.3g}") if value < 100 else round(value, 1)
    return f"{rounded:g}s" if rounded < 1e6 else f"{value:.0f}s"


def status_error(status: int, headers: Any, body: bytes) -> APIStatusError:
    """A typed exception for a non-2xx response; never includes request headers (the key)."""
    message, etype, code, param, parsed, excerpt = _describe_body(body, headers)
    limits = RateLimits(headers)
    kwargs: dict[str, Any] = {
        "type": etype,
        "code": code,
        "param": param,
        "body": parsed,
        "body_excerpt": excerpt,
        "request_id": limits.request_id,
        "retry_after": limits.retry_after,
        "rate_limits": limits,
    }
    if status in (401, 403):
        return AuthenticationError(status, message, **kwargs)
    if status == 404:
        return NotFoundError(status, message, **kwargs)
    if status == 429:
        return RateLimitError(status, message, **kwargs)
    return APIStatusError(status, message, **kwargs)


def _describe_body(
    body: bytes, headers: Any
) -> tuple[str, str | None, str | None, str | None, Any, str | None]:
    text = body.decode("utf-8", "replace")
    try:
        parsed = json.loads(text) if text.strip() else None
    except (ValueError, RecursionError):  # RecursionError: JSON nested past the stack
        parsed = None
    if isinstance(parsed, dict):
        err = parsed.get("error", parsed)
        if isinstance(err, str):
            return err, None, None, None, parsed, None
        if isinstance(err, dict):
            message = err.get("message") or err.get("detail") or parsed.get("detail")
            if message is None:
                message = json.dumps(err)[:_EXCERPT_CHARS]
            return (
                str(message),
                _opt_str(err.get("type")),
                _opt_str(err.get("code")),
                _opt_str(err.get("param")),
                parsed,
                None,
            )
    excerpt = " ".join(text.split())[:_EXCERPT_CHARS]
    ctype = headers.get("content-type", "unknown content type")
    message = f"non-JSON error body ({ctype})" + (f": {excerpt}" if excerpt else "")
    return message, None, None, None, None, excerpt or None


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
