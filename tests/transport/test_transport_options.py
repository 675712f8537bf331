"""Options and inputs that one transport honoured and the other ignored or refused: one
behaviour for each, on the default transport (aiohttp on asyncio) and on httpx.

* ``httpx.Limits(max_keepalive_connections=...)``: at most that many idle connections kept;
* a response head with a line over 8 KiB, or with 100+ headers: read (as httpx reads heads up
  to 100 KiB), and a head over 100 KiB refused the same way;
* ``HTTP_PROXY`` in the environment: honoured by ``transport="aiohttp"`` (or refused with a
  clear error for a proxy aiohttp cannot use), never ignored;
* a body in an encoding the client cannot decode (``br``, ``zstd`` without their packages):
  a typed error on both, and neither asks for an encoding it cannot decode;
* a non-ASCII header value: the same typed ``ValueError`` on both, nothing sent.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from scripted_http import LIFE, MSG, Conn, Script, chunk, chunked_head, reply_body, upstream

import fluxstream
from fluxstream._retry import RetryPolicy
from fluxstream.errors import APIConnectionError, FluxstreamError, StreamFailedError

pytestmark = pytest.mark.anyio

TRANSPORTS = ["auto", "httpx"]


def answer_with_head(extra: bytes, body: bytes | None = None) -> Script:
    async def script(conn: Conn, index: int) -> None:
        while await conn.read_request() is not None:
            content = chunk(reply_body() if body is None else body) + b"0\r\n\r\n"
            await conn.send(chunked_head(extra) + content)

    return script


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "extra",
    [
        b"x-long: " + b"a" * 20_000 + b"\r\n",
        b"".join(b"x-h%d: %d\r\n" % (i, i) for i in range(150)),
    ],
    ids=["a 20 KB header line", "150 headers"],
)
async def test_a_large_response_head_is_read_on_every_transport(
    transport: str, extra: bytes, anyio_backend: str
) -> None:
    async with upstream(answer_with_head(extra)) as up, fluxstream.AsyncClient(
        up.base, "k", transport=transport, retry=RetryPolicy.off()
    ) as client:
        with anyio.fail_after(LIFE):
            reply = await client.chat.stream(model="m", messages=MSG).until_done()
    assert reply.outcome is fluxstream.Outcome.DONE and reply.text == "hi"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_head_over_100_kb_is_refused_the_same_way(
    transport: str, anyio_backend: str
) -> None:
    extra = b"".join(b"x-h%d: %s\r\n" % (i, b"b" * 4000) for i in range(75))
    async with upstream(answer_with_head(extra)) as up, fluxstream.AsyncClient(
        up.base, "k", transport=transport, retry=RetryPolicy.off()
    ) as client:
        with anyio.fail_after(LIFE), pytest.raises(APIConnectionError) as info:
            await client.chat.stream(model="m", messages=MSG).until_done()
    assert isinstance(info.value.__cause__, httpx.RemoteProtocolError)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_max_keepalive_connections_bounds_the_idle_pool(
    server: Any, transport: str, anyio_backend: str
) -> None:
    limits = httpx.Limits(max_connections=10, max_keepalive_connections=1)
    async with fluxstream.AsyncClient(
        server.base_url, transport=transport, limits=limits
    ) as client:
        slow = {"X-Fluxstream-Fault": "drip=0.01"}  # no body complete before all three open
        streams = [
            client.chat.stream(model="m", messages=MSG, extra_headers=slow) for _ in range(3)
        ]
        for stream in streams:  # three responses open at once: three connections
            await stream.__aenter__()
        for stream in streams:
            async for _ in stream:
                pass
            await stream.aclose()
        with anyio.fail_after(LIFE):  # the records fill in the server's thread: polled
            while len(server.records.disconnects) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        # The kept connection is still open: the next request goes over it (a pool that had
        # closed the third too would open a fourth). An event, not a wait for a third close.
        with anyio.fail_after(LIFE):
            again = await client.chat.stream(model="m", messages=MSG).until_done()
        closed = len(server.records.disconnects)
        assert {s.outcome for s in streams} == {fluxstream.Outcome.DONE}
        assert again.outcome is fluxstream.Outcome.DONE
    assert len(server.records.requests) == 4
    assert len({r.connection for r in server.records.requests}) == 3, "the idle one reused"
    assert closed == 2, "one idle connection kept, the two others closed"


def _clear_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
async def test_http_proxy_in_the_environment_is_honoured(
    transport: str, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    if anyio_backend != "asyncio" and transport == "aiohttp":
        pytest.skip("aiohttp runs on asyncio only")
    async with upstream(answer_with_head(b"")) as proxy:
        _clear_proxies(monkeypatch)
        monkeypatch.setenv("HTTP_PROXY", proxy.base.removesuffix("/v1"))
        async with fluxstream.AsyncClient(
            "http://api.example.invalid/v1", "k", transport=transport, retry=RetryPolicy.off()
        ) as client:
            with anyio.fail_after(LIFE):
                reply = await client.chat.stream(model="m", messages=MSG).until_done()
    assert reply.outcome is fluxstream.Outcome.DONE
    request_line = proxy.requests[0].split(b"\r\n", 1)[0]
    assert request_line.startswith(b"POST http://api.example.invalid/v1/chat/completions ")


async def test_a_proxy_aiohttp_cannot_use_is_refused_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _clear_proxies(monkeypatch)
    monkeypatch.setenv("ALL_PROXY", "socks5://user:hunter2@127.0.0.1:1080")
    with pytest.raises(ValueError, match="ALL_PROXY") as info:
        fluxstream.AsyncClient("http://api.example.invalid/v1", "k", transport="aiohttp")
    assert "hunter2" not in str(info.value)
    assert "transport='httpx'" in str(info.value)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("coding", ["br", "zstd"])
async def test_a_body_in_an_encoding_the_client_cannot_decode_is_a_typed_error(
    transport: str, coding: str, anyio_backend: str
) -> None:
    pytest.importorskip("anyio")
    if coding == "br" and _importable("brotli", "brotlicffi"):
        pytest.skip("brotli is installed here: br is decoded")
    if coding == "zstd" and _importable("zstandard", "backports.zstd", "compression.zstd"):
        pytest.skip("a zstd decoder is installed here: zstd is decoded")
    extra = b"content-encoding: %s\r\n" % coding.encode()
    script = answer_with_head(extra, body=b"\x8b\x00\x80garbage-not-" + coding.encode())
    async with upstream(script) as up, fluxstream.AsyncClient(
        up.base, "k", transport=transport, retry=RetryPolicy.off()
    ) as client:
        with anyio.fail_after(LIFE), pytest.raises(StreamFailedError, match=coding):
            await client.chat.stream(model="m", messages=MSG).until_done()
    accepted = _header(up.requests[0], b"accept-encoding")
    assert coding.encode() not in accepted, "asked for an encoding it cannot decode"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_non_ascii_header_value_is_refused_before_sending(
    transport: str, anyio_backend: str
) -> None:
    async with upstream(answer_with_head(b"")) as up, fluxstream.AsyncClient(
        up.base, "k", transport=transport, retry=RetryPolicy.off()
    ) as client:
        stream = client.chat.stream(
            model="m", messages=MSG, extra_headers={"x-note": "caf\u00e9 s3cret"}
        )
        with anyio.fail_after(LIFE), pytest.raises(ValueError) as info:
            await stream.until_done()
    assert isinstance(info.value, FluxstreamError)
    assert "x-note" in str(info.value) and "s3cret" not in str(info.value)
    assert not up.requests, "nothing may be sent"


def _header(head: bytes, name: bytes) -> bytes:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return b""


def _importable(*modules: str) -> bool:
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        return True
    return False
