"""The FastAPI chat page (``examples/chat_page.py``) in headless Chromium, where pages break.

Each test loads the page, which asks for a reply of the embedded server and follows it with
an ``EventSource``; the page marks its title ``TWICE`` if a character arrives twice, and the
text it shows must equal the reply every time:

* a reload mid-reply follows the same reply again and shows it exactly;
* Stop ends the reply ``cancelled`` and closes the upstream request (the server's records);
* a worker killed mid-reply (two worker processes sharing a Redis log) is taken over by the
  other, which the page reaches through a proxy when the first is gone;
* a proxy that cuts connections idle past a limit, while the model pauses longer than that,
  cuts nothing when the app's heartbeats are shorter than the limit, and (the control) cuts
  the page's event stream when they are not -- which the page then survives by reconnecting
  with ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import aclosing, contextmanager
from typing import Any

import anyio
import httpx
import pytest
from browser_support import ROOT, chromium, load_example, needs_chromium, rendered, serve_app

import fluxstream
from fluxstream.relay import MemoryReplyLog
from fluxstream.server import ServerThread, expected_reply

pytest.importorskip("fastapi")
pytestmark = needs_chromium
PROMPT = "page"


def expected_text() -> str:
    return expected_reply({
        "model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 200,
        "stream": True, "stream_options": {"include_usage": True},
    }).text


class IdleCuttingProxy:
    """A TCP proxy on 127.0.0.1: each connection goes to the first of ``backends`` (ports)
    that accepts it, as a load balancer's health check would send it; with ``idle`` set, a
    connection with no byte either way for ``idle`` seconds is cut, as proxies and load
    balancers do. ``cuts`` counts the cut connections that carried an event stream."""

    def __init__(self, backends: list[int], idle: float | None = None) -> None:
        self.backends = backends
        self.idle = idle
        self.cuts = 0
        self.streams = 0  # connections that carried an event stream
        self.streaming = threading.Event()  # set by the first
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> IdleCuttingProxy:
        self.thread.start()
        started: Future[asyncio.Server] = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._connection, "127.0.0.1", 0), self.loop)  # type: ignore[assignment]
        self.server = started.result(10)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            self.server.close()
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        for port in self.backends:
            try:
                back_reader, back_writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                continue
        else:
            writer.transport.abort()
            return
        last = [time.monotonic()]
        stream = [False]

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter,
                       to_client: bool) -> None:
            while data := await source.read(65536):
                last[0] = time.monotonic()
                if to_client and not stream[0] and b"text/event-stream" in data:
                    stream[0] = True
                    self.streams += 1
                    self.streaming.set()
                sink.write(data)
                await sink.drain()

        pipes = [asyncio.ensure_future(pipe(reader, back_writer, False)),
                 asyncio.ensure_future(pipe(back_reader, writer, True))]
        try:
            while not any(p.done() for p in pipes):
                if self.idle is not None and time.monotonic() - last[0] > self.idle:
                    self.cuts += stream[0]
                    break
                await asyncio.wait(pipes, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for p in pipes:
                p.cancel()
            writer.transport.abort()
            back_writer.transport.abort()


@contextmanager
def page_app(upstream: ServerThread, heartbeat: float = 15.0) -> Iterator[int]:
    example = load_example("chat_page")
    with serve_app(example.make_app(MemoryReplyLog(), upstream.base_url,
                                    heartbeat=heartbeat)) as port:
        yield port


def test_reload_mid_reply_shows_the_reply_exactly() -> None:
    with ServerThread(profile="openai", faults="drip=0.004") as upstream, \
            page_app(upstream) as port:
        title, text = rendered(chromium(
            f"http://127.0.0.1:{port}/?auto={PROMPT}&reload=40", "--dump-dom"))
    assert title == "ended: done"  # never TWICE
    assert text == expected_text()
    assert len(upstream.records.requests) == 1  # the reload followed; it did not ask again


def test_stop_cancels_the_upstream() -> None:
    # The reply drips for 6 s: Stop, pressed after 30 characters, lands mid-reply however
    # late a loaded machine delivers it (at 4 ms a drip, the whole reply took 0.8 s and was
    # sometimes all shown before Stop reached the app).
    with ServerThread(profile="openai", faults="drip=0.03") as upstream, \
            page_app(upstream) as port:
        title, text = rendered(chromium(
            f"http://127.0.0.1:{port}/?auto={PROMPT}&stop=30", "--dump-dom"))
        assert title == "ended: cancelled"
        assert expected_text().startswith(text) and 30 <= len(text) < len(expected_text())
        assert upstream.records.find_disconnect(completed=False) is not None


@pytest.mark.parametrize(("heartbeat", "cut"), [(0.25, False), (60.0, True)],
                         ids=["heartbeats", "control-without"])
def test_a_proxy_idle_cut_is_kept_away_by_heartbeats(heartbeat: float, cut: bool) -> None:
    """The model pauses 6 s mid-reply; the proxy cuts what is idle for 3 s: twelve
    heartbeats' worth, so a loaded machine that stalls the app's thread for a second or two
    does not let the heartbeats' connection go idle (with a limit of 1.5 s it had only 1.25 s
    of slack), and the pause is still twice the limit for the control."""
    faults = "drip=0.003,stall=6,stall-after-events=25"
    with ServerThread(profile="openai", faults=faults) as upstream, \
            page_app(upstream, heartbeat=heartbeat) as port, \
            IdleCuttingProxy([port], idle=3.0) as proxy:
        title, text = rendered(chromium(
            f"http://127.0.0.1:{proxy.port}/?auto={PROMPT}", "--dump-dom"))
    assert title == "ended: done"
    assert text == expected_text()
    assert proxy.streams >= 1
    if cut:  # without heartbeats the stream was cut, and the page reconnected past it
        assert proxy.cuts >= 1 and proxy.streams >= 2
    else:
        assert proxy.cuts == 0 and proxy.streams == 1


class Worker:
    """``examples/chat_page.py --serve`` in a process of its own, on a Redis log."""

    def __init__(self, upstream: str, redis_url: str) -> None:
        with socket.socket() as probe:  # a free port for the worker (it binds it itself)
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "chat_page.py"), "--serve",
             "--port", str(self.port), "--upstream", upstream],
            env={**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        )

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.process.stderr.read()  # type: ignore[union-attr]
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("the worker did not listen")

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        if self.process.stderr is not None:
            self.process.stderr.close()


async def kill_mid_reply(redis_url: str, key: str, worker: Worker, proxy: IdleCuttingProxy,
                         deltas: int) -> None:
    """Follow ``key`` and kill ``worker`` once ``deltas`` text deltas were recorded and the
    page follows the reply. This follower stops there: a follower that does not take over
    ends a reply whose producer is gone (``producer lost``), and the test is about the page's
    follower, which takes over."""
    from fluxstream.relay import RedisReplyLog

    log = RedisReplyLog(redis_url)
    texts = 0
    try:
        with anyio.fail_after(60):
            async with aclosing(log.follow(key)) as followed:
                async for item in followed:
                    texts += isinstance(item.event, fluxstream.TextDelta)
                    if texts >= deltas:
                        # The page follows the reply (through the proxy): now the kill.
                        assert await anyio.to_thread.run_sync(proxy.streaming.wait, 30)
                        worker.kill()
                        return
        raise AssertionError("the reply ended before the kill")
    finally:
        await log.aclose()


async def recorded_end(redis_url: str, key: str) -> Any:
    """The ``End`` the log holds for ``key`` (the reply has ended: a replay)."""
    from fluxstream.relay import RedisReplyLog

    log = RedisReplyLog(redis_url)
    try:
        with anyio.fail_after(30):
            return [item.event async for item in log.follow(key)][-1]
    finally:
        await log.aclose()


def test_a_killed_worker_is_taken_over_and_the_page_shows_the_reply(redis_server: Any) -> None:
    # The first request stalls after 24 events until the kill (a model still writing): the
    # kill waits for the page to follow, and under load a headless browser may take longer to
    # start than the whole reply takes, which ended the reply before the kill. The second
    # worker's resume is served cleanly (``fail-first=1``).
    faults = "drip=0.03,stall=120,stall-after-events=24,fail-first=1"
    with ServerThread(profile="openai", faults=faults) as upstream:
        first, second = Worker(upstream.base_url, redis_server.url), Worker(
            upstream.base_url, redis_server.url)
        try:
            first.wait_ready()
            second.wait_ready()
            with IdleCuttingProxy([first.port, second.port]) as proxy:
                base = f"http://127.0.0.1:{proxy.port}"
                key = httpx.post(f"{base}/replies", json={"prompt": PROMPT},
                                 timeout=30).json()["key"]  # the first worker produces it
                with ThreadPoolExecutor(1) as pool:
                    page = pool.submit(chromium, f"{base}/#{key}", "--dump-dom")
                    anyio.run(kill_mid_reply, redis_server.url, key, first, proxy, 20)
                    title, text = rendered(page.result(120))
                end = anyio.run(recorded_end, redis_server.url, key)
        finally:
            first.kill()
            second.kill()
        assert first.process.returncode == -signal.SIGKILL
        assert isinstance(end, fluxstream.End) and end.outcome is fluxstream.Outcome.DONE
        assert title == "ended: done"
        assert text == expected_text()
        # The second worker resumed the model's reply: a second request, after the first.
        assert len(upstream.records.requests) == 2
