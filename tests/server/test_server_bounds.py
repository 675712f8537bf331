"""The embedded server bounds what one request and many connections may cost.

``fluxstream serve`` is public, so a request body is capped (``max_body_bytes``: a 413 with a
JSON error body in the dialect's own shape past it), a body that would decode to far more
objects than its size (a few MiB of ``{},{},...`` took ~50x its size in memory) is refused
before decoding, and connections are capped (``max_connections``): one beyond the cap waits
in the kernel's backlog until a connection ends, and idle keep-alive connections are closed
to make room for it.
"""

from __future__ import annotations

import json
import socket
import tracemalloc
from collections.abc import Iterator

import anyio
import anyio.abc
import httpx
import pytest

from fluxstream.server import Server, ServerThread, serve
from fluxstream.server.app import MAX_JSON_VALUES

CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "hi"}]
MiB = 1024 * 1024


def _chat_body(size: int) -> bytes:
    """A chat request of exactly ``size`` bytes (the prompt pads it)."""
    head = json.dumps({"model": "m", "messages": [{"role": "user", "content": ""}]})
    pad = size - len(head)
    assert pad >= 0
    return head.replace('"content": ""', '"content": "' + "a" * pad + '"').encode()


@pytest.fixture(scope="module")
def small() -> Iterator[ServerThread]:
    with ServerThread(max_body_bytes=4096) as server:
        yield server


def test_a_body_over_max_body_bytes_is_a_413_with_a_json_error(small: ServerThread) -> None:
    with httpx.Client(base_url=small.url, timeout=10) as http:
        assert http.post(CHAT, content=_chat_body(4096)).status_code == 200  # at the cap
        over = http.post(CHAT, content=_chat_body(4097))
        assert over.status_code == 413
        assert over.headers["connection"] == "close"
        assert over.json()["error"]["type"] == "invalid_request_error"
        assert "4096" in over.json()["error"]["message"]
        # Chunked, with no Content-Length to judge by: counted as it arrives.
        chunked = http.post(CHAT, content=iter([_chat_body(3000)[:-2], b" " * 2000, b"}]}"]))
        assert chunked.status_code == 413
        # Anthropic's shape on its path.
        body = json.dumps({"model": "m", "max_tokens": 5, "messages": USER,
                           "metadata": {"pad": "x" * 5000}}).encode()
        messages = http.post("/v1/messages", content=body)
        assert messages.status_code == 413
        assert messages.json()["type"] == "error"
        assert messages.json()["error"]["type"] == "request_too_large"
        # And the server goes on answering.
        assert http.post(CHAT, json={"model": "m", "messages": USER}).status_code == 200


def test_a_body_of_more_json_values_than_the_server_decodes_is_a_413() -> None:
    """A few hundred KiB of ``{},`` decode to tens of MiB of dicts: refused before decoding.
    Commas and brackets inside strings are text, not values: a long prompt full of them
    is served."""
    flood = ('{"model":"m","messages":[{"role":"user","content":"hi"}],"metadata":['
             + ",".join(["{}"] * (MAX_JSON_VALUES + 1)) + "]}").encode()
    prose = json.dumps({"model": "m", "messages": [
        {"role": "user", "content": "[{a}, " * (MAX_JSON_VALUES + 1)}]}).encode()
    with ServerThread() as server, httpx.Client(base_url=server.url, timeout=30) as http:
        refused = http.post(CHAT, content=flood)
        assert refused.status_code == 413, refused.text[:200]
        assert "JSON values" in refused.json()["error"]["message"]
        assert not server.records.requests  # never decoded, never recorded
        assert http.post(CHAT, content=prose).status_code == 200


def _post_raw(port: int, body: bytes) -> bytes:
    """POST ``body`` and return the status line (a raw socket: no client-side copies)."""
    head = (f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    received = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head)
        sock.sendall(body)
        for _ in range(100_000):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    return bytes(received).split(b"\r\n", 1)[0]


def _shapes(size: int) -> dict[str, bytes]:
    one = '{"role":"user","content":"x"}'
    return {
        "one-string": _chat_body(size),
        "tiny-objects": ('{"model":"m","messages":[{"role":"user","content":"hi"}],'
                         '"metadata":[' + ",".join(["{}"] * (size // 3)) + "]}").encode(),
        "many-messages": ('{"model":"m","messages":['
                          + ",".join([one] * (size // (len(one) + 1))) + "]}").encode(),
    }


@pytest.mark.parametrize("shape", ["one-string", "tiny-objects", "many-messages"])
def test_a_large_request_costs_a_small_multiple_of_its_size(shape: str) -> None:
    """Peak memory (tracemalloc, both ends in this process) while the server answers one
    7.7 MiB request: it was 6x (one string) to 48x (tiny objects) the body's size."""
    body = _shapes(int(7.7 * MiB))[shape]
    with ServerThread() as server:
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            status = _post_raw(server.port, body)
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    assert status.split()[1] in (b"200", b"413"), status
    assert peak < 5 * len(body), f"{shape}: peak {peak / MiB:.1f} MiB for {len(body) / MiB:.1f}"


def test_bad_bounds_are_refused() -> None:
    for options in ({"max_body_bytes": 0}, {"max_connections": 0}, {"max_connections": 1.5}):
        with pytest.raises(ValueError):
            Server(**options)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- connections


async def _request(stream: anyio.abc.SocketStream, fault: str | None = None) -> None:
    body = json.dumps({"model": "m", "messages": USER, "stream": True}).encode()
    extra = f"X-Fluxstream-Fault: {fault}\r\n" if fault else ""
    head = (f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    await stream.send(head + body)


async def _read_until(stream: anyio.abc.SocketStream, marker: bytes) -> bytes:
    seen = bytearray()
    for _ in range(10_000):
        if marker in seen:
            return bytes(seen)
        seen += await stream.receive()
    raise AssertionError(f"{marker!r} not received")


async def _until_closed(stream: anyio.abc.SocketStream) -> bytes:
    seen = bytearray()
    for _ in range(10_000):
        try:
            seen += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return bytes(seen)
    raise AssertionError("the connection was not closed")


async def test_a_connection_beyond_max_connections_waits_for_one_to_end(
    anyio_backend: str,
) -> None:
    """Two streams in the middle of a long stall hold both slots: a third connection is not
    served (it waits in the backlog, costing the server nothing) until one of them ends."""
    async with serve(max_connections=2) as server:
        busy = [await anyio.connect_tcp("127.0.0.1", server.port) for _ in range(2)]
        for stream in busy:
            await _request(stream, "stall=60")
            with anyio.fail_after(10):
                await _read_until(stream, b"data: ")  # mid-response now
        third = await anyio.connect_tcp("127.0.0.1", server.port)
        try:
            await _request(third)
            with anyio.move_on_after(0.5):
                early = await third.receive()
                raise AssertionError(f"served beyond the cap: {early[:40]!r}")
            assert server.records.connections == 2
            await busy[0].aclose()
            with anyio.fail_after(10):
                answer = await _read_until(third, b"data: [DONE]")
            assert answer.startswith(b"HTTP/1.1 200")
            assert server.records.connections == 3
        finally:
            await third.aclose()
            await busy[1].aclose()


async def test_idle_keep_alive_connections_make_room_at_the_cap(anyio_backend: str) -> None:
    """Connections that finished a request and wait for the next one (a client's pool) do not
    keep a new connection waiting: at the cap the oldest idle one is closed, as servers close
    idle keep-alive connections whenever they like."""
    async with serve(max_connections=2) as server:
        idle = [await anyio.connect_tcp("127.0.0.1", server.port) for _ in range(2)]
        for stream in idle:
            await _request(stream)
            with anyio.fail_after(10):
                await _read_until(stream, b"data: [DONE]")
        third = await anyio.connect_tcp("127.0.0.1", server.port)
        try:
            await _request(third)
            with anyio.fail_after(10):
                answer = await _read_until(third, b"data: [DONE]")
            assert answer.startswith(b"HTTP/1.1 200")
            with anyio.fail_after(10):  # the oldest idle one was closed
                rest = await _until_closed(idle[0])
            assert b"HTTP/1.1" not in rest  # (only the end of the first answer, if anything)
        finally:
            await third.aclose()
            for stream in idle:
                await stream.aclose()
