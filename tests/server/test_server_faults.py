"""Fault injection over real sockets: write sizes, drops, stalls, drips, oversize events,
HTTP errors, transient failures, resuming after a drop, a malformed chunk, and a kept-alive
connection closed after the response. Runs on asyncio and trio."""

from __future__ import annotations

import itertools
import json
import time

import anyio
import httpx
import pytest
from test_server_support import (
    accumulate,
    araw_exchange,
    assert_matches,
    chat,
    parse_response,
    parse_sse,
    request_bytes,
)

from fluxstream.server import Server, expected_reply, serve
from fluxstream.server.faults import FaultError

pytestmark = pytest.mark.anyio

URL = "/v1/chat/completions"


def fault(spec: str, **more: str) -> dict[str, str]:
    return {"X-Fluxstream-Fault": spec, **more}


async def timed_reads(
    port: int, body: dict[str, object], headers: dict[str, str]
) -> list[tuple[float, bytes]]:
    """Raw exchange that keeps the arrival time of every read."""
    out: list[tuple[float, bytes]] = []
    with anyio.fail_after(20):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(request_bytes(URL, body, headers))
            while True:
                try:
                    out.append((time.monotonic(), await stream.receive()))
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return out


async def test_write_size_one_byte_gives_identical_body(aserver: Server) -> None:
    body = chat(max_tokens=8)
    clean = await araw_exchange(aserver.port, URL, body)
    tiny = await araw_exchange(aserver.port, URL, body, fault("write-size=1"))
    assert tiny.complete and tiny.body == clean.body
    paused = await araw_exchange(aserver.port, URL, body, fault("write-size=5,write-pause=0.001"))
    assert paused.body == clean.body and len(paused.reads) > 1


@pytest.mark.parametrize("cut", [1, 100, 333, 1000])
async def test_drop_after_bytes_is_exact_and_unterminated(aserver: Server, cut: int) -> None:
    body = chat(max_tokens=8)
    clean = await araw_exchange(aserver.port, URL, body)
    dropped = await araw_exchange(aserver.port, URL, body, fault(f"drop-after={cut}"))
    assert dropped.status == 200 and not dropped.complete
    assert dropped.body == clean.body[:cut]
    assert not dropped.raw.endswith(b"0\r\n\r\n")
    response = aserver.records.responses[-1]
    assert response.ending == "dropped" and response.body_bytes == cut
    assert (
        aserver.records.find_disconnect(completed=False) is None
    )  # the server closed, not the client


async def test_drop_is_a_protocol_error_for_httpx(aserver: Server) -> None:
    async with httpx.AsyncClient(base_url=aserver.base_url) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post("/chat/completions", json=chat(), headers=fault("drop-after=500"))
        # the pool recovers: the next request works on a new connection
        ok = await client.post("/chat/completions", json=chat())
        assert ok.status_code == 200


async def test_drop_after_events_cuts_mid_event(aserver: Server) -> None:
    body = chat(max_tokens=8)
    full = parse_sse((await araw_exchange(aserver.port, URL, body)).body).events
    dropped = await araw_exchange(aserver.port, URL, body, fault("drop-after-events=3"))
    parsed = parse_sse(dropped.body)
    assert not dropped.complete and parsed.partial
    assert [(e.id, e.data) for e in parsed.events] == [(e.id, e.data) for e in full[:3]]
    assert aserver.records.responses[-1].events == 3


async def test_drop_with_reset(aserver: Server) -> None:
    dropped = await araw_exchange(aserver.port, URL, chat(), fault("drop-after=200,drop-reset=1"))
    assert not dropped.complete and len(dropped.body) <= 200
    assert aserver.records.responses[-1].ending == "dropped"


async def test_resume_after_drop_gives_the_exact_stream(aserver: Server) -> None:
    body = chat(n=2, tools=None, stream_options={"include_usage": True})
    key = {"X-Fluxstream-Attempt-Key": "resume-1"}
    first = await araw_exchange(
        aserver.port, URL, body, {**fault("drop-after-events=4,fail-first=1"), **key}
    )
    events = parse_sse(first.body).events
    last_id = events[-1].id
    assert last_id == "4"
    second = await araw_exchange(
        aserver.port,
        URL,
        body,
        {**fault("drop-after-events=4,fail-first=1"), **key, "Last-Event-ID": last_id},
    )
    assert second.complete
    combined = events + parse_sse(second.body).events
    assert_matches(accumulate(combined), expected_reply(body))
    assert [r.attempt for r in aserver.records.requests] == [1, 2]


async def test_stall_then_continue(aserver: Server) -> None:
    body = chat(max_tokens=5)
    reads = await timed_reads(aserver.port, body, fault("stall=0.4,stall-after-events=2"))
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(reads)]
    assert max(gaps) >= 0.35
    raw = b"".join(piece for _, piece in reads)
    assert raw.endswith(b"0\r\n\r\n")


async def test_stall_with_heartbeats(aserver: Server) -> None:
    body = chat(max_tokens=5)
    response = await araw_exchange(
        aserver.port, URL, body, fault("stall=0.3,stall-after-events=1,stall-heartbeat=0.05")
    )
    parsed = parse_sse(response.body)
    assert 3 <= len(parsed.comments) <= 7 and set(parsed.comments) == {"ping"}
    assert_matches(accumulate(parsed.events), expected_reply(body))


async def test_drip(aserver: Server) -> None:
    body = chat(max_tokens=5)
    started = time.monotonic()
    response = await araw_exchange(aserver.port, URL, body, fault("drip=0.03"))
    elapsed = time.monotonic() - started
    events = parse_sse(response.body).events
    assert elapsed >= 0.03 * (len(events) - 1) * 0.9
    assert_matches(accumulate(events), expected_reply(body))


async def test_oversize_event(aserver: Server) -> None:
    body = chat(max_tokens=3)
    response = await araw_exchange(aserver.port, URL, body, fault("oversize=200000"))
    events = parse_sse(response.body).events
    big = [e for e in events if len(e.data or "") > 1000]
    assert len(big) == 1 and len((big[0].data or "").encode()) == 200000 and big[0].id is None
    assert events[1] is big[0]  # after the first event by default
    assert_matches(accumulate(events), expected_reply(body))


@pytest.mark.parametrize(
    ("spec", "status", "ctype"),
    [
        ("status=500", 500, "application/json"),
        ("status=502,status-body=html", 502, "text/html; charset=utf-8"),
        ("status=429,retry-after=2", 429, "application/json"),
        ("status=404", 404, "application/json"),
    ],
)
async def test_status_faults(aserver: Server, spec: str, status: int, ctype: str) -> None:
    async with httpx.AsyncClient(base_url=aserver.base_url) as client:
        response = await client.post("/chat/completions", json=chat(), headers=fault(spec))
    assert response.status_code == status and response.headers["content-type"] == ctype
    if ctype == "application/json":
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
    else:
        assert response.text.startswith("<html>")
    if status == 429:
        assert response.headers["retry-after"] == "2"
        assert response.json()["error"]["code"] == "rate_limit_exceeded"


async def test_fail_first_by_attempt_key_and_by_body(aserver: Server) -> None:
    async with httpx.AsyncClient(base_url=aserver.base_url) as client:

        async def attempt(key: str | None, body: dict[str, object]) -> int:
            headers = fault("fail-first=2,status=503")
            if key:
                headers["X-Fluxstream-Attempt-Key"] = key
            return (await client.post("/chat/completions", json=body, headers=headers)).status_code

        assert [await attempt("a", chat()) for _ in range(3)] == [503, 503, 200]
        assert await attempt("b", chat()) == 503
        assert [await attempt(None, chat("x")) for _ in range(3)] == [503, 503, 200]
        assert await attempt(None, chat("y")) == 503


async def test_delay_before_headers(aserver: Server) -> None:
    async with httpx.AsyncClient(base_url=aserver.base_url) as client:
        started = time.monotonic()
        async with client.stream(
            "POST", "/chat/completions", json=chat(), headers=fault("delay=0.2")
        ) as response:
            assert time.monotonic() - started >= 0.19
            await response.aread()


async def test_server_default_faults_and_per_request_override(anyio_backend: str) -> None:
    async with serve(faults="drop-after=50") as server:
        dropped = await araw_exchange(server.port, URL, chat())
        assert len(dropped.body) == 50 and not dropped.complete
        whole = await araw_exchange(server.port, URL, chat(), fault("drop-after=100000000"))
        assert whole.complete


def test_batched_writes_carry_the_same_bytes() -> None:
    """``batch=N`` changes only how the bytes are cut into writes, never the bytes."""
    import httpx as _httpx

    from fluxstream.server import ServerThread

    body = {"model": "m", "messages": [{"role": "user", "content": "batch me"}],
            "stream": True, "max_tokens": 200}
    with ServerThread(port=0) as srv, _httpx.Client() as http:
        url = srv.base_url + "/chat/completions"
        plain = http.post(url, json=body).content
        with http.stream("POST", url, json=body,
                         headers={"X-Fluxstream-Fault": "batch=8192"}) as response:
            reads = list(response.iter_raw())
    assert b"".join(reads) == plain
    assert len(reads) < 20 < plain.count(b"\n\n")


def keep_alive_request(headers: dict[str, str]) -> bytes:
    """A streamed chat request that leaves the connection open (no ``Connection: close``)."""
    raw = request_bytes(URL, chat(max_tokens=5), headers)
    return raw.replace(b"Connection: close\r\n", b"")


async def read_one_response(stream: anyio.abc.ByteStream) -> tuple[bytes, float]:
    """Read until the chunked terminator; the bytes and when the terminator arrived."""
    data = bytearray()
    while not data.endswith(b"\r\n0\r\n\r\n"):
        data += await stream.receive()
        if b"\r\n\r\n" in data and not data.startswith(b"HTTP/1.1 200 "):
            raise AssertionError(f"not a stream: {bytes(data)!r}")
    return bytes(data), time.monotonic()


async def wait_for_close(stream: anyio.abc.ByteStream) -> tuple[bytes, float]:
    """Read until the server closes; what arrived meanwhile and when it closed."""
    data = bytearray()
    while True:
        try:
            data += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return bytes(data), time.monotonic()


@pytest.mark.parametrize("seconds", [0.0, 0.4])
async def test_close_after_closes_a_kept_alive_connection_that_long_after_the_body(
    aserver: Server, seconds: float
) -> None:
    with anyio.fail_after(20):
        async with await anyio.connect_tcp("127.0.0.1", aserver.port) as stream:
            await stream.send(keep_alive_request(fault(f"close-after={seconds}")))
            raw, ended = await read_one_response(stream)
            extra, closed = await wait_for_close(stream)
    response = parse_response(raw)
    assert response.status == 200 and response.complete
    # The close is not announced: the client takes the connection for a reusable one.
    assert "connection" not in response.headers
    assert extra == b""
    assert closed - ended >= seconds * 0.9
    assert closed - ended < seconds + 3.0  # generous: a loaded machine
    assert aserver.records.responses[-1].ending == "complete"


async def test_close_after_leaves_a_request_sent_meanwhile_unanswered(aserver: Server) -> None:
    with anyio.fail_after(20):
        async with await anyio.connect_tcp("127.0.0.1", aserver.port) as stream:
            await stream.send(keep_alive_request(fault("close-after=0.3")))
            await read_one_response(stream)
            await stream.send(keep_alive_request({}))  # reuses the "kept-alive" connection
            extra, _ = await wait_for_close(stream)
    assert extra == b""  # closed without a byte of an answer
    assert len(aserver.records.requests) == 1


async def test_without_close_after_the_connection_serves_the_next_request(
    aserver: Server,
) -> None:
    with anyio.fail_after(20):
        async with await anyio.connect_tcp("127.0.0.1", aserver.port) as stream:
            await stream.send(keep_alive_request({}))
            await read_one_response(stream)
            await stream.send(keep_alive_request({}))
            second, _ = await read_one_response(stream)
    assert parse_response(second).complete
    assert [r.connection for r in aserver.records.requests] == [1, 1]


async def raw_reply(port: int, body: dict[str, object], headers: dict[str, str]) -> bytes:
    """Every byte the server sends until it closes, unparsed (a malformed body included)."""
    with anyio.fail_after(20):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(request_bytes(URL, body, headers))
            return (await wait_for_close(stream))[0]


def split_chunks(body: bytes) -> tuple[bytes, bytes]:
    """The data of the well-formed chunks at the start of ``body``, and what follows them
    (from the first size line that is not hex, or after the last whole chunk)."""
    data = bytearray()
    pos = 0
    while True:
        end = body.find(b"\r\n", pos)
        try:
            size = int(body[pos:end], 16)
        except ValueError:
            return bytes(data), body[pos:]
        start = end + 2
        if size == 0 or body[start + size : start + size + 2] != b"\r\n":
            return bytes(data), body[pos:]
        data += body[start : start + size]
        pos = start + size + 2


@pytest.mark.parametrize("cut", [0, 1, 100, 333])
async def test_bad_chunk_after_writes_a_bad_chunk_size_line_after_exactly_n_bytes(
    aserver: Server, cut: int
) -> None:
    body = chat(max_tokens=8)
    clean = await araw_exchange(aserver.port, URL, body)
    assert len(clean.body) > cut
    raw = await raw_reply(aserver.port, body, fault(f"bad-chunk-after={cut}"))
    head, _, chunks = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    data, rest = split_chunks(chunks)
    assert data == clean.body[:cut]
    assert rest == b"zz\r\n"  # then the close: no terminator, nothing after it
    response = aserver.records.responses[-1]
    assert response.ending == "dropped" and response.body_bytes == cut


async def test_bad_chunk_after_the_whole_body_replaces_the_terminator(aserver: Server) -> None:
    body = chat(max_tokens=8)
    clean = await araw_exchange(aserver.port, URL, body)
    size = len(clean.body)
    raw = await raw_reply(aserver.port, body, fault(f"bad-chunk-after={size}"))
    data, rest = split_chunks(raw.partition(b"\r\n\r\n")[2])
    assert data == clean.body and rest == b"zz\r\n"
    longer = await araw_exchange(aserver.port, URL, body, fault(f"bad-chunk-after={size + 1}"))
    assert longer.complete and longer.body == clean.body


async def test_bad_chunk_is_a_protocol_error_for_httpx(aserver: Server) -> None:
    async with httpx.AsyncClient(base_url=aserver.base_url) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post("/chat/completions", json=chat(),
                              headers=fault("bad-chunk-after=200"))


@pytest.mark.parametrize(
    "spec", ["close-after=-1", "close-after=x", "bad-chunk-after=-1", "bad-chunk-after=1.5"]
)
async def test_bad_values_of_the_connection_faults_are_refused(aserver: Server, spec: str) -> None:
    response = await araw_exchange(aserver.port, URL, chat(), fault(spec))
    assert response.status == 400 and spec.partition("=")[0].encode() in response.body


@pytest.mark.parametrize("status", [100, 101, 199])
async def test_an_informational_status_fault_is_refused_by_name(
    aserver: Server, status: int
) -> None:
    """A 1xx is not an answer a request can end with (the connection used to drop instead of
    sending it): refused when the fault is read, saying what a status fault takes."""
    response = await araw_exchange(aserver.port, URL, chat(), fault(f"status={status}"))
    assert response.status == 400
    assert b"'status'" in response.body and b"200" in response.body
    assert b"informational" in response.body
    with pytest.raises(FaultError, match=r"200 to 599.*informational"):
        Server(faults=f"status={status}")


@pytest.mark.parametrize(("status", "length"), [(204, None), (205, b"0"), (304, None)])
async def test_a_status_without_content_is_served_exactly(
    aserver: Server, status: int, length: bytes | None
) -> None:
    """204, 205 and 304 carry no content (RFC 9110 15.3.5, 15.3.6, 15.4.5): the answer has no
    body and no Content-Length it does not keep (205: ``0``), and the connection goes on to
    answer the request pipelined behind it."""
    body = json.dumps(chat()).encode()
    first = (
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % (URL.encode(), len(body))
        + b"X-Fluxstream-Fault: status=%d\r\n\r\n" % status
        + body
    )
    second = request_bytes("/v1/models", None)
    data = bytearray()
    with anyio.fail_after(10):
        async with await anyio.connect_tcp("127.0.0.1", aserver.port) as stream:
            await stream.send(first + second)
            while True:
                try:
                    data += await stream.receive(65536)
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
    head, _, rest = bytes(data).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status)
    headers = dict(line.lower().split(b": ", 1) for line in head.split(b"\r\n")[1:])
    assert headers.get(b"content-length") == length
    assert b"content-type" not in headers
    assert rest.startswith(b"HTTP/1.1 200 "), rest
