"""The HTTP client fluxstream creates (``transport="auto"``): aiohttp on asyncio, httpx on trio.

Real sockets against the embedded server on 127.0.0.1: which transport ran, that both keep the
guarantees (read timeout as httpx means it, connections back to the pool, typed errors, prompt
cancellation), and that the choice never touches a caller's own client.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from waiting import WITHIN

import fluxstream
from fluxstream._io.aiohttp_client import AiohttpClient, AiohttpRequest
from fluxstream._io.default_client import AutoClient
from fluxstream._retry import RetryPolicy
from fluxstream.server import ServerThread, serve
from fluxstream.server.script import expected_reply

pytestmark = [pytest.mark.anyio, pytest.mark.auto_transport]

MSG = [{"role": "user", "content": "Stream me a reply about transports"}]
KEY = "sk-transport-SECRET-42"
#: "At once", with room for a loaded worker's stalls (0.2 s was not).
PROMPT = 1.0


@pytest.fixture
async def server() -> AsyncIterator[Any]:
    async with serve(port=0) as srv:
        yield srv


def _expected_text() -> str:
    body = {"model": "m", "messages": MSG, "stream": True}
    return expected_reply(body).choices[0].text


async def test_default_client_uses_aiohttp_on_asyncio_and_httpx_on_trio(
    server: Any, anyio_backend: str
) -> None:
    async with fluxstream.AsyncClient(server.base_url, KEY) as client:
        http = client.http_client
        assert isinstance(http, AutoClient) and http.uses_aiohttp
        request = http.build_request("POST", f"{server.base_url}/chat/completions", content=b"{}")
        on_asyncio = anyio_backend == "asyncio"
        assert isinstance(request, AiohttpRequest) is on_asyncio
        assert isinstance(request, httpx.Request) is not on_asyncio
        reply = await client.chat.complete(model="m", messages=MSG)
    assert reply.outcome == "done"
    assert reply.text == _expected_text()


async def test_connections_go_back_to_the_pool(server: Any) -> None:
    async with fluxstream.AsyncClient(server.base_url) as client:
        for _ in range(3):
            assert (await client.chat.complete(model="m", messages=MSG)).outcome == "done"
    connections = {r.connection for r in server.records.requests}
    assert len(server.records.requests) == 3
    assert len(connections) == 1, "every stream was read to its end: one kept-alive connection"


async def test_read_timeout_ends_a_silent_stream_on_time(server: Any) -> None:
    stall = {"X-Fluxstream-Fault": "stall=30,stall-after-events=3"}
    async with fluxstream.AsyncClient(
        server.base_url, timeouts=fluxstream.Timeouts(idle=0.4)
    ) as client:
        stream = client.chat.stream(model="m", messages=MSG, extra_headers=stall)
        started = None
        with pytest.raises(fluxstream.IdleTimeoutError, match=r"0\.4s"):
            async for event in stream:
                if started is None and isinstance(event, fluxstream.TextDelta):
                    started = time.monotonic()
        assert started is not None
        waited = time.monotonic() - started
    # the stall lasts 30 s: the bound leaves a loaded worker room (1.5 s left it 1.1 s)
    assert 0.35 <= waited < 5, f"timed out after {waited:.2f}s for a 0.4s limit"
    assert stream.reply.outcome == "failed" and stream.reply.choices[0].text


async def test_a_slow_consumer_is_not_a_silent_server(server: Any) -> None:
    """The read timeout limits how long one read waits for bytes (httpx's meaning), not the
    time between two reads: bytes that arrived while the caller was busy are not a timeout."""
    async with fluxstream.AsyncClient(
        # 1 s: a read that truly waits never nears it on a loaded machine (0.2 s could)
        server.base_url, timeouts=fluxstream.Timeouts(idle=1.0)
    ) as client:
        async with client.chat.stream(model="m", messages=MSG) as stream:
            texts = []
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta):
                    if not texts:
                        await anyio.sleep(2.5)  # two and a half read timeouts, bytes buffered
                    texts.append(event.text)
    assert stream.reply.outcome == "done"
    assert "".join(texts) == _expected_text()


async def test_refused_connection_is_a_connection_error_not_a_timeout(anyio_backend: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    async with fluxstream.AsyncClient(
        f"http://127.0.0.1:{port}/v1", retry=RetryPolicy.off()
    ) as client:
        with pytest.raises(fluxstream.APIConnectionError) as info:
            await client.chat.complete(model="m", messages=MSG)
    assert not isinstance(info.value, fluxstream.APITimeoutError)
    assert isinstance(info.value.__cause__, httpx.ConnectError)


async def test_cancel_closes_the_upstream_at_once(server: Any, anyio_backend: str) -> None:
    """Closed by the break, seen by the server within ``PROMPT``; reading the body to its
    end instead (0.5 s between events) would take seconds and end ``completed``."""
    slow = {"X-Fluxstream-Fault": "drip=0.5"}
    async with fluxstream.AsyncClient(server.base_url) as client:
        async with client.chat.stream(model="m", messages=MSG, extra_headers=slow) as stream:
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta):
                    break
        closed_at = time.monotonic()
        record = await server.records.wait_disconnect(timeout=WITHIN, completed=False)
    assert record.time - closed_at < PROMPT
    assert stream.outcome == "cancelled"


async def test_cancel_from_another_task_ends_a_waiting_read(server: Any) -> None:
    stall = {"X-Fluxstream-Fault": "stall=10,stall-after-events=3"}
    async with fluxstream.AsyncClient(server.base_url) as client:
        stream = client.chat.stream(model="m", messages=MSG, extra_headers=stall)
        reading = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def cancel_soon() -> None:
                await reading.wait()  # the response is open; the read then waits in the stall
                stream.cancel()

            tg.start_soon(cancel_soon)
            with anyio.fail_after(10):  # a bound, not a measure: the check is below
                async for _ in stream:
                    reading.set()
        closed_at = time.monotonic()
        # Waits for the event; the bound only keeps a broken close from hanging the test.
        record = await server.records.wait_disconnect(timeout=10.0, completed=False)
    assert stream.outcome == "cancelled"
    assert record.time - closed_at < PROMPT  # the stall lasts 10 s


async def test_an_injected_client_is_used_as_given(server: Any) -> None:
    async with httpx.AsyncClient() as http:
        async with fluxstream.AsyncClient(server.base_url, http_client=http) as client:
            assert client.http_client is http
            assert (await client.chat.complete(model="m", messages=MSG)).outcome == "done"
        assert not http.is_closed


async def test_proxy_in_the_environment_keeps_the_default_on_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    client = fluxstream.AsyncClient("https://api.example.test/v1", api_key="sk-k")
    try:
        assert isinstance(client.http_client, AutoClient)
        assert not client.http_client.uses_aiohttp
        request = client.http_client.build_request("POST", "https://api.example.test/v1/x")
        assert isinstance(request, httpx.Request)
    finally:
        await client.aclose()


async def test_unknown_transport_is_refused() -> None:
    with pytest.raises(ValueError, match="transport"):
        fluxstream.AsyncClient("http://127.0.0.1:1/v1", transport="curl")


async def test_no_secret_in_reprs(server: Any) -> None:
    async with fluxstream.AsyncClient(server.base_url, KEY) as client:
        stream = client.chat.stream(model="m", messages=MSG)
        async with stream:
            request = client._settings.requests.build(
                "chat/completions", {"model": "m"}, {}, client.timeouts
            )
            texts = [repr(client), repr(client.http_client), repr(request), repr(stream),
                     repr(stream._response) if getattr(stream, "_response", None) else ""]
            async for _ in stream:
                pass
    assert not any("SECRET" in t for t in texts), texts


def test_one_client_across_two_event_loops() -> None:
    """``asyncio.run`` twice with the same client: the second loop gets its own session."""
    with ServerThread(profile="openai") as running:
        client = fluxstream.AsyncClient(running.base_url)

        async def once() -> str:
            return (await client.chat.complete(model="m", messages=MSG)).text

        assert asyncio.run(once()) == _expected_text()
        assert asyncio.run(once()) == _expected_text()
        asyncio.run(client.aclose())


@pytest.mark.asyncio_only  # aiohttp runs on asyncio only
async def test_aiohttp_transport_explicitly(server: Any, anyio_backend: str) -> None:
    async with fluxstream.AsyncClient(server.base_url, transport="aiohttp") as client:
        assert isinstance(client.http_client, AiohttpClient)
        assert (await client.chat.complete(model="m", messages=MSG)).outcome == "done"


def test_http2_responses_are_never_aborted_by_socket() -> None:
    """An HTTP/2 connection carries other streams too: such responses fall back to a cancel
    scope per read instead of a socket shutdown; fluxstream's own HTTP/1.1 responses abort."""
    from fluxstream._io.transport import ControlledResponse, ResponseControls, controls_of

    class H2Response:
        def __init__(self) -> None:
            self.extensions = {"http_version": b"HTTP/2", "network_stream": object()}

    class OwnResponse(ControlledResponse):
        def __init__(self) -> None:
            self.extensions = {"http_version": b"HTTP/1.1"}

        def abort(self) -> None:
            pass

        def controls(self) -> ResponseControls:
            return ResponseControls(abort=self.abort)

    assert controls_of(H2Response()).abort is None
    assert controls_of(OwnResponse()).abort is not None


def _shown(exc: BaseException) -> list[str]:
    """What a user reads: the error, and the HTTP library's error it names as its cause."""
    return [str(exc)] + ([str(exc.__cause__)] if exc.__cause__ is not None else [])


@pytest.mark.parametrize("transport", ["auto", "httpx"])
async def test_a_refused_plain_http_connection_reads_plainly(
    transport: str, anyio_backend: str
) -> None:
    """No ``ssl:default`` (aiohttp's TLS setting) in the error of an http:// URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with fluxstream.AsyncClient(
        f"http://127.0.0.1:{port}/v1", transport=transport, retry=RetryPolicy.off()
    ) as client:
        with pytest.raises(fluxstream.APIConnectionError) as info:
            await client.chat.complete(model="m", messages=MSG)
    texts = _shown(info.value)
    assert not any("ssl" in text.lower() for text in texts), texts
    if transport == "auto" and anyio_backend == "asyncio":
        assert f"cannot connect to 127.0.0.1:{port}: Connection refused" in str(info.value)


@pytest.mark.parametrize("transport", ["auto", "httpx"])
async def test_timeouts_are_printed_rounded(transport: str, anyio_backend: str) -> None:
    """A deadline computed from clock readings is shown as ``0.5s``, never ``0.4999919...s``."""
    import re

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts in the kernel, never answers: no response head
    port = listener.getsockname()[1]
    try:
        async with fluxstream.AsyncClient(
            f"http://127.0.0.1:{port}/v1", transport=transport,
            timeouts=fluxstream.Timeouts(first_token=0.5),
            retry=RetryPolicy.off(),
        ) as client:
            stream = client.chat.stream(model="m", messages=MSG)
            with anyio.fail_after(5), pytest.raises(fluxstream.FluxstreamError) as info:
                await stream.complete()
    finally:
        listener.close()
    texts = _shown(info.value)
    # What is left of 0.5 s when the request goes out (a few ms less on a busy machine).
    assert any(re.search(r"within 0\.\d{1,3}s", text) for text in texts), texts
    assert not any(re.search(r"\d\.\d{4,}", text) for text in texts), texts
