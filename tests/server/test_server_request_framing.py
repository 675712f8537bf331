"""The embedded server refuses the request shapes that let a proxy and a server disagree about
where a request ends (request smuggling), on raw sockets.

Teams put this server behind their own proxies, so a request whose length two parsers can read
two ways must never be served: a proxy that goes by ``Content-Length`` forwards the bytes after
a chunked body as part of one request, the server would answer them as a second one. RFC 9112
section 6.1 (both headers: close the connection), 6.3 (a ``Transfer-Encoding`` not ending in
``chunked``: 400 and close; conflicting ``Content-Length`` values: 400) and 5.2 (obs-fold: 400
or unfold; refused here, since a proxy that does not unfold sees another header).
Each case is written as the attacker would, with a second request smuggled behind the first:
the answer must be one 400 (or 501 for a coding it does not know) and the connection closed,
the smuggled request never answered nor recorded.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from fluxstream.server import ServerThread

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false}'
SMUGGLED = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def running() -> Iterator[ServerThread]:
    with ServerThread(profile="openai") as server:
        yield server


def _exchange(server: ServerThread, raw: bytes) -> bytes:
    """Send ``raw`` and read until the server closes (bounded by a socket timeout, which
    fails the test rather than hangs it: a server that keeps the connection open is wrong)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(raw)
        received = bytearray()
        for _ in range(1000):
            try:
                data = sock.recv(65536)
            except TimeoutError:
                pytest.fail(f"the server kept the connection open after {bytes(received)!r}")
            if not data:
                return bytes(received)
            received += data
    pytest.fail("too many reads")  # pragma: no cover


def _chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def _post(headers: bytes, body: bytes) -> bytes:
    return b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n" + body


CASES = {
    # Content-Length covers the smuggled request; chunked framing ends before it.
    "content-length-and-chunked": _post(
        b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n"
        % (len(_chunked(BODY)) + len(SMUGGLED)),
        _chunked(BODY) + SMUGGLED,
    ),
    "chunked-and-content-length": _post(
        b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", _chunked(BODY) + SMUGGLED
    ),
    "duplicate-content-length": _post(
        b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(BODY), len(BODY) + len(SMUGGLED)),
        BODY + SMUGGLED,
    ),
    "content-length-list": _post(
        b"Content-Length: %d, %d\r\n" % (len(BODY), len(BODY) + len(SMUGGLED)), BODY + SMUGGLED
    ),
    "transfer-encoding-not-chunked": _post(
        b"Transfer-Encoding: gzip\r\n", _chunked(BODY) + SMUGGLED
    ),
    "chunked-then-another-coding": _post(
        b"Transfer-Encoding: chunked, identity\r\n", _chunked(BODY) + SMUGGLED
    ),
    "chunked-then-another-header": _post(
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
        _chunked(BODY) + SMUGGLED,
    ),
    "space-before-colon": _post(
        b"Content-Length: %d\r\nTransfer-Encoding : chunked\r\n" % (len(BODY) + len(SMUGGLED)),
        _chunked(BODY) + SMUGGLED,
    ),
    "empty-transfer-encoding": _post(b"Transfer-Encoding:\r\n", _chunked(BODY) + SMUGGLED),
    "obs-fold-transfer-encoding": _post(
        b"X-Padding: a\r\n Transfer-Encoding: chunked\r\nContent-Length: %d\r\n" % len(BODY),
        BODY + SMUGGLED,
    ),
    "obs-fold-tab": _post(
        b"Content-Length: %d\r\nX-Note: one\r\n\ttwo\r\n" % len(BODY), BODY + SMUGGLED
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_request_with_ambiguous_framing_gets_a_400_and_a_closed_connection(
    running: ServerThread, case: str
) -> None:
    before = len(running.records.requests)
    received = _exchange(running, CASES[case])
    assert received.count(b"HTTP/1.1 ") == 1, received
    assert received.startswith(b"HTTP/1.1 400 "), received
    head = received.partition(b"\r\n\r\n")[0].lower()
    assert b"\r\nconnection: close" in head
    assert b"bad request" in received
    # Neither the ambiguous request nor the smuggled one was served.
    assert len(running.records.requests) == before


def test_a_transfer_coding_it_does_not_know_before_chunked_is_a_501(
    running: ServerThread,
) -> None:
    """``gzip, chunked`` is well framed (chunked is last) but not a coding the server decodes:
    RFC 9112 section 6.1 asks for a 501, and the connection closes (the body is unread)."""
    received = _exchange(
        running, _post(b"Transfer-Encoding: gzip, chunked\r\n", _chunked(BODY) + SMUGGLED)
    )
    assert received.count(b"HTTP/1.1 ") == 1, received
    assert received.startswith(b"HTTP/1.1 501 "), received


def test_well_framed_requests_are_still_served_on_one_connection(running: ServerThread) -> None:
    """The refusals are exact: chunked alone, Content-Length alone (repeated with one value,
    as RFC 9112 allows) and a value with inner spaces are served, and kept alive."""
    plain = _post(b"Content-Length: %d\r\n" % len(BODY), BODY)
    chunked = _post(b"Transfer-Encoding: Chunked\r\n", _chunked(BODY))
    repeated = _post(b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(BODY), len(BODY)), BODY)
    spaced = _post(b"Content-Length: %d\r\nX-Note: one  two\r\n" % len(BODY), BODY)
    closing = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    received = _exchange(running, plain + chunked + repeated + spaced + closing)
    assert received.count(b"HTTP/1.1 200 ") == 5, received
    assert b"HTTP/1.1 4" not in received
