"""Helpers of the web tests: real ASGI servers (uvicorn, hypercorn) started in this process
on a port of the OS's choosing, the apps (bare ASGI, Starlette, FastAPI) that answer with an
``EventStreamResponse``, an SSE page that rebuilds the text the way a page does, and an
in-process ASGI exchange for the tests that need many connections or many runs."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import anyio
import sniffio

import fluxstream
from fluxstream.relay import ReplyLog
from fluxstream.web import EventStreamResponse

SERVERS = ("uvicorn", "hypercorn")
APPS = ("asgi", "starlette", "fastapi")

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


def messages(prompt: str = "web") -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


@dataclass
class Backing:
    """What the apps stream from: a client of the upstream, a log, the responses' options."""

    client: fluxstream.AsyncClient
    log: ReplyLog | None = None
    options: dict[str, Any] = field(default_factory=dict)
    #: More arguments of each live stream (``raise_for_outcome``, ``resume`` ...).
    stream_options: dict[str, Any] = field(default_factory=dict)

    def live(self, max_tokens: int, headers: dict[str, str] | None = None) -> EventStreamResponse:
        stream = self.client.chat.stream(
            model="m@fill-max-tokens", messages=messages(), max_tokens=max_tokens,
            extra_headers=headers or {},
            **self.stream_options,
        )
        return EventStreamResponse(stream, **self.options)

    def followed(self, key: str) -> EventStreamResponse:
        assert self.log is not None
        return EventStreamResponse.follow(self.log, key, **self.options)


def _int(query: dict[str, str], name: str, default: int) -> int:
    return int(query.get(name, default))


def make_app(kind: str, backing: Backing) -> ASGIApp:
    """``GET /live?max_tokens=N[&fault=...]`` and ``GET /replies/{key}`` in the framework
    ``kind`` (``asgi``: a bare ASGI callable)."""
    if kind == "asgi":
        async def app(scope: Scope, receive: Any, send: Any) -> None:
            if scope["type"] == "lifespan":
                while (await receive())["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
                return
            path: str = scope["path"]
            query = dict(
                pair.split("=", 1) for pair in scope["query_string"].decode().split("&") if pair
            )
            if path == "/live":
                fault = query.get("fault")
                response = backing.live(
                    _int(query, "max_tokens", 30),
                    {"X-Fluxstream-Fault": fault.replace("%3D", "=")} if fault else None,
                )
            else:
                response = backing.followed(path.removeprefix("/replies/"))
            await response(scope, receive, send)

        return app
    if kind == "starlette":
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        async def live(request: Request) -> Response:
            fault = request.query_params.get("fault")
            response = backing.live(int(request.query_params.get("max_tokens", 30)),
                                    {"X-Fluxstream-Fault": fault} if fault else None)
            assert isinstance(response, Response)
            return response

        async def followed(request: Request) -> Response:
            response = backing.followed(request.path_params["key"])
            assert isinstance(response, Response)
            return response

        return Starlette(routes=[Route("/live", live), Route("/replies/{key}", followed)])
    assert kind == "fastapi"
    from fastapi import FastAPI

    api = FastAPI()

    @api.get("/live")
    async def live_endpoint(max_tokens: int = 30, fault: str | None = None) -> Any:
        return backing.live(max_tokens, {"X-Fluxstream-Fault": fault} if fault else None)

    @api.get("/replies/{key}")
    async def followed_endpoint(key: str) -> Any:
        return backing.followed(key)

    return api


@asynccontextmanager
async def serving(server: str, app: ASGIApp) -> AsyncIterator[str]:
    """``app`` under ``server`` on this event loop, on a free port: its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    async with anyio.create_task_group() as tasks:
        if server == "uvicorn":
            import uvicorn

            config = uvicorn.Config(app, log_level="warning", lifespan="off")
            running = uvicorn.Server(config)
            tasks.start_soon(lambda: running.serve(sockets=[sock]))
            with anyio.fail_after(10):
                while not running.started:  # noqa: ASYNC110 - uvicorn sets a plain flag
                    await anyio.sleep(0.01)
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                running.should_exit = True
        else:
            import hypercorn.asyncio
            import hypercorn.trio
            from hypercorn.config import Config

            trio = sniffio.current_async_library() == "trio"
            serve: Any = hypercorn.trio.serve if trio else hypercorn.asyncio.serve

            settings = Config()
            settings.bind = [f"fd://{sock.detach()}"]
            settings.accesslog = None
            settings.errorlog = None
            stop = anyio.Event()
            tasks.start_soon(lambda: serve(app, settings, shutdown_trigger=stop.wait))
            with anyio.fail_after(10):
                while True:  # started: it accepts a connection
                    try:
                        probe = await anyio.connect_tcp("127.0.0.1", port)
                    except OSError:
                        await anyio.sleep(0.01)
                        continue
                    await probe.aclose()
                    break
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                stop.set()


@asynccontextmanager
async def live_app(
    upstream_url: str, server: str, app_kind: str = "asgi", *, transport: str = "auto",
    options: dict[str, Any] | None = None, stream_options: dict[str, Any] | None = None,
) -> AsyncIterator[str]:
    """An app streaming live replies of ``upstream_url`` under ``server``: its base URL."""
    async with fluxstream.AsyncClient(upstream_url, api_key="k", transport=transport) as client:
        backing = Backing(client, options=options or {}, stream_options=stream_options or {})
        async with serving(server, make_app(app_kind, backing)) as base:
            yield base


@dataclass
class Page:
    """What a page keeps: the text by offset (choice 0), the last id, what it saw."""

    text: list[str] = field(default_factory=list)
    last_id: str | None = None
    kinds: list[str] = field(default_factory=list)
    outcome: str | None = None
    twice: int = 0

    def apply(self, name: str, data: str, event_id: str | None) -> None:
        if event_id:
            self.last_id = event_id
        self.kinds.append(name)
        body = json.loads(data)
        if name == "text" and body["choice"] == 0:
            offset = body["offset"]
            if offset < len(self.text):
                self.twice += 1
            chars = list(body["text"])
            self.text[offset:offset + len(chars)] = chars
        elif name == "end":
            self.outcome = body["outcome"]

    @property
    def shown(self) -> str:
        return "".join(self.text)


def page_of(body: bytes) -> Page:
    """The page after the events of one whole SSE body."""
    page = Page()
    for name, data, event_id in read_events(body):
        page.apply(name, data, event_id)
    return page


def read_events(body: bytes) -> list[tuple[str, str, str | None]]:
    """``(event, data, id)`` of each event in an SSE body."""
    decoder = fluxstream.SSEDecoder()
    return [(e.event, e.data, e.id) for e in decoder.feed(body)]


class Answer(NamedTuple):
    """A whole HTTP answer read off the wire."""

    status: int
    headers: dict[str, str]
    body: bytes
    #: The body's end was sent (a chunked body's last chunk), not an aborted connection.
    complete: bool


async def http_get(base: str, path: str, headers: dict[str, str] | None = None) -> Answer:
    """One whole GET over a raw connection (HTTP/1.1, ``Connection: close``)."""
    host, _, port = base.removeprefix("http://").partition(":")
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    async with await anyio.connect_tcp(host, int(port)) as conn:
        await conn.send(("\r\n".join(lines) + "\r\n\r\n").encode())
        raw = bytearray()
        with anyio.fail_after(20):
            while True:
                try:
                    raw += await conn.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
    head, _, rest = bytes(raw).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    found = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    if found.get("transfer-encoding") == "chunked":
        body, complete = dechunk(rest)
    else:
        body, complete = rest, len(rest) == int(found.get("content-length", -1))
    return Answer(int(status_line.split()[1]), found, body, complete)


def dechunk(data: bytes) -> tuple[bytes, bool]:
    """A chunked body's bytes, and whether its last chunk came."""
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            return bytes(out), True
        out += data[:size]
        data = data[size + 2:]
    return bytes(out), False


async def visit(
    http: Any, url: str, page: Page, *, cut: int | None = None,
) -> int:
    """One connection of ``page`` to ``url`` (an ``httpx.AsyncClient``), with its
    ``Last-Event-ID``: applies the events it gets; after ``cut`` of them the connection is
    closed, as a network drop or a reload closes it. The status."""
    headers = {"last-event-id": page.last_id} if page.last_id else {}
    decoder = fluxstream.SSEDecoder()
    seen = 0
    async with http.stream("GET", url, headers=headers) as response:
        if response.status_code != 200:
            await response.aread()
            return int(response.status_code)
        async for chunk in response.aiter_bytes():
            for event in decoder.feed(chunk):
                page.apply(event.event, event.data, event.id)
                seen += 1
                if cut is not None and seen >= cut:
                    return 200
    return 200


@dataclass
class Exchange:
    """One request to an ASGI app in this process, its body read by a page: the status and
    headers, and the page's events applied as each send arrives; after ``cut`` events the
    page leaves (``http.disconnect``)."""

    page: Page
    cut: int | None = None
    status: int | None = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    sent: int = 0
    on_event: Callable[[Page], None] | None = None
    #: Awaited after each send (a page that takes its time).
    pause: Callable[[Exchange], Awaitable[None]] | None = None

    async def run(self, app: ASGIApp, path: str = "/") -> int:
        gone = anyio.Event()
        decoder = fluxstream.SSEDecoder()
        requested = False
        headers = [(b"last-event-id", self.page.last_id.encode())] if self.page.last_id else []

        async def receive() -> dict[str, Any]:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if gone.is_set():
                raise OSError("the page is gone")  # as a server's send to a closed socket
            if message["type"] == "http.response.start":
                self.status = message["status"]
                self.headers = list(message.get("headers", []))
                return
            if self.status != 200:
                return
            for event in decoder.feed(message.get("body", b"")):
                self.page.apply(event.event, event.data, event.id)
                self.sent += 1
                if self.on_event is not None:
                    self.on_event(self.page)
                if self.cut is not None and self.sent >= self.cut:
                    gone.set()
            if self.pause is not None:
                await self.pause(self)

        scope = {"type": "http", "method": "GET", "path": path, "headers": headers,
                 "query_string": b"", "http_version": "1.1"}
        await app(scope, receive, send)
        gone.set()
        assert self.status is not None
        return self.status
