"""aiohttp's (and the OS's) exceptions, as the httpx exception classes they correspond to.

The aiohttp adapter raises **httpx's** classes, so the error handling above it
(:class:`~fluxstream._io.http_library.HttpErrors`, the retry and resume rules) never asks
which transport ran. :data:`EXCEPTION_MAP` is the translation: one ordered table, read top to
bottom, the first row that matches wins (as httpx's own ``HTTPCORE_EXC_MAP`` maps httpcore's
exceptions). A row matches an exception by its class, in a phase (``connecting``: the send,
until the response head; ``reading``: a read of the body; or both), and, for the two cases
that depend on what the exception holds, by a named rule (:func:`cut_by_socket`,
:func:`undecodable`). What the message says is :func:`describe`'s: the words, never aiohttp's
internals.

What the table keeps true (``tests/transport/test_aiohttp_exception_map.py``): a
``ConnectError`` means no connection was made, so the request never left (what a retry is
told), and nothing else is one; a reset after that is a ``ReadError``; a body cut short by the
server's close is a ``RemoteProtocolError``; a silent socket is a ``ReadTimeout``; every target
is an ``httpx.RequestError``, the class :class:`HttpErrors` catches; a host name that does not
resolve stays the cause of the ``ConnectError``, where
:func:`~fluxstream._io.http_library.unresolvable` finds it.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import aiohttp
import httpx

from .aiohttp_private import ContentEncodingError, HttpProcessingError, parser_text
from .http_library import os_text

__all__ = ["EXCEPTION_MAP", "ExceptionRule", "cut_by_socket", "describe", "translate",
           "undecodable"]

#: When a row applies: while connecting (the send, up to the response head), while reading
#: the body, or in both.
Phase = Literal["connecting", "reading", "both"]


def cut_by_socket(exc: BaseException) -> bool:
    """A body error caused by the socket (a reset), not by what the server sent."""
    return isinstance(exc.__cause__, OSError)


def undecodable(exc: BaseException) -> bool:
    """The body's content encoding cannot be decoded: its data is broken (in the body), or no
    decoder for it is installed (aiohttp says so at the head)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ContentEncodingError):
            return True
        cause = cause.__cause__
    return "content-encoding" in parser_text(exc).lower()


@dataclass(frozen=True)
class ExceptionRule:
    """One row of :data:`EXCEPTION_MAP`: ``raised`` becomes ``to`` in ``phase``, if ``when``
    (a named look at the exception's contents) says so too."""

    raised: type[BaseException] | tuple[type[BaseException], ...]
    to: type[httpx.RequestError]
    phase: Phase = "both"
    when: Callable[[BaseException], bool] | None = None

    def matches(self, exc: BaseException, *, connecting: bool) -> bool:
        if self.phase != "both" and (self.phase == "connecting") is not connecting:
            return False
        return isinstance(exc, self.raised) and (self.when is None or self.when(exc))


#: aiohttp's exception -> httpx's, first match wins. aiohttp's timeouts are ``TimeoutError``s
#: (and so ``OSError``s), and its connector errors ``OSError``s: the specific rows come first.
EXCEPTION_MAP: tuple[ExceptionRule, ...] = (
    ExceptionRule(aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout),
    # No byte for ``read`` seconds (the head's or the body's).
    ExceptionRule(aiohttp.SocketTimeoutError, httpx.ReadTimeout),
    ExceptionRule(asyncio.TimeoutError, httpx.ReadTimeout, "reading"),
    # Waiting for a pool slot (aiohttp's ``connect``).
    ExceptionRule(asyncio.TimeoutError, httpx.PoolTimeout, "connecting"),
    # The only ConnectError: no connection was made, so the request never left (what a
    # ConnectError tells a retry). Anything failing later may have reached the server.
    ExceptionRule(aiohttp.ClientConnectorError, httpx.ConnectError),
    # A body cut by a reset: the socket's error, as httpx reports it.
    ExceptionRule(aiohttp.ClientPayloadError, httpx.ReadError, when=cut_by_socket),
    # gzip turned garbage, a coding without its decoder: no drop, no retry.
    ExceptionRule(
        (aiohttp.ClientPayloadError, aiohttp.ClientResponseError), httpx.DecodingError,
        when=undecodable,
    ),
    # The server closed the connection (before the head, or inside the body's framing).
    ExceptionRule(
        (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError), httpx.RemoteProtocolError
    ),
    # A malformed response head (aiohttp's parser refused it; a proxy's refusal too).
    ExceptionRule(aiohttp.ClientResponseError, httpx.RemoteProtocolError),
    ExceptionRule(aiohttp.InvalidURL, httpx.UnsupportedProtocol),
    # The request could not be written.
    ExceptionRule(aiohttp.ClientConnectionResetError, httpx.WriteError, "connecting"),
    # Sent on a connection made (or reused), then reset or closed before the head: the
    # request may have been read, so not a ConnectError (httpx's ReadError).
    ExceptionRule((aiohttp.ClientError, OSError), httpx.ReadError),
    # A header aiohttp refuses to send: what httpx raises for it.
    ExceptionRule(ValueError, httpx.LocalProtocolError, "connecting"),
)


def translate(exc: BaseException, *, connecting: bool) -> BaseException:
    """aiohttp's (or asyncio's, or the OS's) exception -> the httpx exception it corresponds
    to (:data:`EXCEPTION_MAP`); ``exc`` itself when no row matches (not a transport's error).
    The caller raises the result ``from exc``."""
    for rule in EXCEPTION_MAP:
        if rule.matches(exc, connecting=connecting):
            return rule.to(describe(exc, connecting=connecting))
    return exc


def describe(exc: BaseException, *, connecting: bool) -> str:
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
            return f"the response body cannot be decoded: {parser_text(cause)}"
        if isinstance(cause, HttpProcessingError):
            return f"the response body broke off: {parser_text(cause)}"
        if isinstance(cause, OSError):
            return f"the response body broke off: {os_text(cause)}"
        return str(exc).replace("Response payload is not completed", "the response body broke off")
    if isinstance(exc, aiohttp.ClientResponseError):
        if undecodable(exc):  # at the head: aiohttp names the coding and the package it needs
            return parser_text(exc)
        cause = exc.__cause__  # aiohttp's parser refused the head
        return f"malformed response head: {parser_text(cause if cause is not None else exc)}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return (
            "the server closed the connection without a response"
            if connecting else "the server closed the connection"
        )
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    return str(exc) or type(exc).__name__
