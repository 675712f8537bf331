"""The aiohttp adapter's exception table: each aiohttp (or OS) failure, the httpx class it is.

``fluxstream/_io/aiohttp_errors.py`` maps aiohttp's exceptions to httpx's in one ordered table
(``EXCEPTION_MAP``, first match wins). Table-driven: every sample below is an exception
aiohttp raises, in the phase it raises it (connecting: the send, up to the head; reading: a
read of the body), with the httpx class the layers above must see, written here and not read
from the table. Every row of the table is the first match of some sample (no dead row, none
untested), and the table agrees with ``HttpErrors``, which classifies what it produces: every
target is a request error, each timeout is the deadline it stands for, a host that does not
resolve is still found under the ``ConnectError``.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import types
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import httpx
import pytest

from fluxstream._io.aiohttp_client import AiohttpClient
from fluxstream._io.aiohttp_errors import EXCEPTION_MAP, ExceptionRule, translate
from fluxstream._io.aiohttp_private import ContentEncodingError, HttpProcessingError
from fluxstream._io.http_library import HttpErrors, unresolvable
from fluxstream._timeouts import Deadline

KEY = types.SimpleNamespace(host="api.example", port=443, ssl=True)  # aiohttp's ConnectionKey


def _caused(exc: BaseException, cause: BaseException) -> BaseException:
    exc.__cause__ = cause
    return exc


@dataclass(frozen=True)
class Sample:
    name: str
    make: Callable[[], BaseException]
    connecting: bool
    #: The httpx class it must become; ``None``: not a transport's error, raised unchanged.
    expected: type[BaseException] | None


SAMPLES = [
    Sample("connect timeout", lambda: aiohttp.ConnectionTimeoutError("connect"), True,
           httpx.ConnectTimeout),
    Sample("no head byte for the read timeout", lambda: aiohttp.SocketTimeoutError("read"), True,
           httpx.ReadTimeout),
    Sample("no body byte for the read timeout", lambda: aiohttp.SocketTimeoutError("read"), False,
           httpx.ReadTimeout),
    Sample("a timeout in a read", asyncio.TimeoutError, False, httpx.ReadTimeout),
    Sample("no pool slot in time", asyncio.TimeoutError, True, httpx.PoolTimeout),
    Sample("connection refused",
           lambda: aiohttp.ClientConnectorError(KEY, OSError(errno.ECONNREFUSED, "refused")),
           True, httpx.ConnectError),
    Sample("a host that does not resolve",
           lambda: _caused(
               getattr(aiohttp, "ClientConnectorDNSError", aiohttp.ClientConnectorError)(
                   KEY, socket.gaierror(socket.EAI_NONAME, "Name or service not known")),
               socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
           ),
           True, httpx.ConnectError),
    Sample("a TLS handshake refused",
           lambda: aiohttp.ClientConnectorSSLError(KEY, OSError(1, "bad handshake")), True,
           httpx.ConnectError),
    Sample("a body cut by a reset",
           lambda: _caused(aiohttp.ClientPayloadError("cut"),
                           ConnectionResetError(errno.ECONNRESET, "reset")),
           False, httpx.ReadError),
    Sample("a gzip body that is not gzip",
           lambda: _caused(aiohttp.ClientPayloadError("bad"),
                           ContentEncodingError("Can not decode content-encoding: gzip")),
           False, httpx.DecodingError),
    Sample("a coding without its decoder, at the head",
           lambda: aiohttp.ClientResponseError(
               None, (), status=400,
               message="Can not decode content-encoding: br. Please install Brotli"),
           True, httpx.DecodingError),
    Sample("closed before a response", aiohttp.ServerDisconnectedError, True,
           httpx.RemoteProtocolError),
    Sample("closed inside the body", aiohttp.ServerDisconnectedError, False,
           httpx.RemoteProtocolError),
    Sample("a body shorter than its framing",
           lambda: aiohttp.ClientPayloadError("Response payload is not completed"), False,
           httpx.RemoteProtocolError),
    Sample("a malformed chunk",
           lambda: _caused(aiohttp.ClientPayloadError("malformed"),
                           HttpProcessingError(message="bad chunk size")),
           False, httpx.RemoteProtocolError),
    Sample("a malformed head",
           lambda: aiohttp.ClientResponseError(
               None, (), status=400, message="Invalid status line"),
           True, httpx.RemoteProtocolError),
    Sample("a proxy's refusal",
           lambda: aiohttp.ClientHttpProxyError(
               None, (), status=407, message="Proxy Authentication Required"),
           True, httpx.RemoteProtocolError),
    Sample("a URL aiohttp cannot send", lambda: aiohttp.InvalidURL("ftp://x"), True,
           httpx.UnsupportedProtocol),
    Sample("a request that could not be written",
           lambda: aiohttp.ClientConnectionResetError("reset"), True, httpx.WriteError),
    Sample("a reset while reading", lambda: aiohttp.ClientConnectionResetError("reset"), False,
           httpx.ReadError),
    Sample("a reset after the request went out",
           lambda: aiohttp.ClientOSError(errno.ECONNRESET, "reset"), True, httpx.ReadError),
    Sample("the OS's own reset", lambda: ConnectionResetError(errno.ECONNRESET, "reset"), False,
           httpx.ReadError),
    Sample("a header aiohttp refuses to send", lambda: ValueError("newline in header"), True,
           httpx.LocalProtocolError),
    Sample("a ValueError while reading (not the transport's)", lambda: ValueError("x"), False,
           None),
    Sample("not a transport's error", lambda: RuntimeError("bug"), True, None),
]


def _named(name: str) -> Sample:
    return next(s for s in SAMPLES if s.name == name)


def _first_rule(exc: BaseException, connecting: bool) -> ExceptionRule | None:
    return next((r for r in EXCEPTION_MAP if r.matches(exc, connecting=connecting)), None)


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_each_failure_becomes_its_httpx_class(sample: Sample) -> None:
    exc = sample.make()
    mapped = translate(exc, connecting=sample.connecting)
    if sample.expected is None:
        assert mapped is exc
        return
    assert type(mapped) is sample.expected
    assert str(mapped) and "400, message=" not in str(mapped)  # words, not aiohttp's repr


def test_every_row_of_the_table_is_the_first_match_of_a_sample() -> None:
    used = {id(_first_rule(s.make(), s.connecting)) for s in SAMPLES}
    unused = [rule for rule in EXCEPTION_MAP if id(rule) not in used]
    assert unused == []


def test_the_table_agrees_with_what_httperrors_classifies() -> None:
    errors = HttpErrors.for_client(AiohttpClient(timeout=httpx.Timeout(1.0),
                                                 limits=httpx.Limits()))
    deadlines = {
        httpx.ConnectTimeout: Deadline.CONNECT, httpx.PoolTimeout: Deadline.POOL,
        httpx.ReadTimeout: Deadline.HEAD,  # before a response: the head's wait
    }
    for rule in EXCEPTION_MAP:
        made = rule.to("x")
        assert isinstance(made, errors.request), rule
        if isinstance(made, errors.timeout):
            assert errors.deadline_of(made) is deadlines[rule.to], rule
        elif rule.to is httpx.DecodingError:
            assert isinstance(made, errors.decoding)
        else:
            assert isinstance(made, errors.transport), rule
    assert errors.read_timeout is httpx.ReadTimeout


def test_a_host_that_does_not_resolve_is_found_under_the_connect_error() -> None:
    """What ``Channel`` asks before retrying: the resolver's failure stays the cause."""
    exc = _named("a host that does not resolve").make()
    mapped = translate(exc, connecting=True)
    mapped.__cause__ = exc  # as the adapter raises it: ``raise mapped from exc``
    assert unresolvable(mapped)
    assert str(mapped) == "cannot connect to api.example:443: Name or service not known"
    refused = translate(_named("connection refused").make(), connecting=True)
    assert not unresolvable(refused)
