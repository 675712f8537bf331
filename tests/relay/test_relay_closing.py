"""Closing a Redis log while it still records or reads (a worker shutting down mid-reply):
recording stops and is reported, and nothing of the log stays connected. A round trip out
at that moment fails once its connection is closed; it must not be taken for a connection Redis
closed meanwhile and sent again on a new one: that connection would outlive the log (a
descriptor per close), and a write sent twice finds its entry already there and reports the
lease lost rather than the log closed. On a real Redis, each with its own server so that
every client it lists is the test's."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator

import anyio
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError
from relay_support import RedisServer, expected_text, request
from waiting import until

import fluxstream
from fluxstream.errors import RelayUnavailableError
from fluxstream.relay._redis_connection import pack
from fluxstream.relay._redis_pipeliner import Pipeliner
from fluxstream.relay._redis_writes import WriteChannel
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

#: A command Redis answers only after this long: a round trip surely out when closed, and
#: one sent again would keep its sender far past :data:`FAILED_WITHIN` (within the channel's
#: bound of a round trip, ``ROUND_TRIP``, 10 s).
BLOCKED = pack(["BLPOP", "nothing-ever", "8"])

#: Seconds within which a round trip out at the close fails: at once, given a loaded
#: machine's slack -- not the 8 s of the command sent again.
FAILED_WITHIN = 4


@pytest.fixture
async def own_redis() -> AsyncIterator[tuple[RedisServer, Redis]]:
    """A Redis of this test alone, and a probe client of it (one connection, the probe's)."""
    server = RedisServer().start()
    probe = Redis.from_url(server.url)
    try:
        yield server, probe
    finally:
        await probe.aclose()
        server.stop()


async def blocked_clients(probe: Redis) -> int:
    return sum(1 for client in await probe.client_list() if client["cmd"] == "blpop")


async def until_blocked(probe: Redis) -> None:
    """Until Redis holds the command (bounded: 5 s)."""
    for _ in range(500):
        if await blocked_clients(probe):
            return
        await anyio.sleep(0.01)
    raise AssertionError("the command never reached Redis")


async def other_clients(probe: Redis) -> list[dict[str, str]]:
    """The server's clients but the probe, once none is left or 5 s passed: Redis notices a
    closed socket when it next looks, later on a loaded machine; a connection left open
    stays in the list."""
    for _ in range(250):  # 5 s, bounded
        others = [
            c for c in await probe.client_list() if c["cmd"] not in ("client", "client|list")
        ]
        if not others:
            break
        await anyio.sleep(0.02)
    return others


async def test_a_write_channel_closed_mid_round_trip_fails_it_and_sends_nothing_again(
    own_redis: tuple[RedisServer, Redis],
) -> None:
    server, probe = own_redis
    redis = Redis.from_url(server.url)

    async def fallback(commands: list[bytes]) -> list[object]:
        raise AssertionError("one sender: the fallback is never used")

    channel = WriteChannel(redis, fallback)
    try:
        sending = asyncio.get_running_loop().create_task(channel.send([BLOCKED]))
        await until_blocked(probe)
        await channel.aclose()
        with anyio.fail_after(FAILED_WITHIN):  # not the 8 s the command would take sent again
            with pytest.raises(ConnectionError):
                await sending
        with pytest.raises(ConnectionError):
            await channel.send([pack(["PING"])])
        assert await other_clients(probe) == []
    finally:
        await redis.aclose()


async def test_a_pipeliner_closed_mid_round_trip_fails_it_and_sends_nothing_again(
    own_redis: tuple[RedisServer, Redis],
) -> None:
    server, probe = own_redis
    redis = Redis.from_url(server.url)
    pipeline = Pipeliner(redis)
    try:
        calling = asyncio.get_running_loop().create_task(pipeline.call_packed([BLOCKED]))
        await until_blocked(probe)
        await pipeline.aclose()
        with anyio.fail_after(FAILED_WITHIN):
            with pytest.raises(ConnectionError):
                await calling
        with pytest.raises(ConnectionError):
            await pipeline.call("PING")
        assert await other_clients(probe) == []
    finally:
        await redis.aclose()


@pytest.mark.parametrize("write_out", [False, True], ids=["between-writes", "write-out"])
async def test_a_closed_redis_log_stops_recording_and_opens_no_connection(
    own_redis: tuple[RedisServer, Redis], upstream: ServerThread, write_out: bool
) -> None:
    """``aclose()`` while a stream is still recorded (a worker shutting down): the log's own
    client was closed, yet the next write simply opened a new connection, recording went on
    unreported, and that connection stayed open for good (a leaked descriptor per close).

    ``write-out``: Redis stopped (SIGSTOP) so that the writer's round trip is surely out when
    the log closes. It was sent again on a new connection, and once Redis ran again it found
    its entry written by the first one (``RelayLeaseLostError: entry N exists``)."""
    from fluxstream.relay import RedisReplyLog

    server, probe = own_redis
    assert server.process is not None
    log = RedisReplyLog(server.url)
    stopped = False
    try:
        async with fluxstream.AsyncClient(upstream.base_url) as client:
            req = request(tokens=120)
            async with log.record(client.chat.stream(content_key="closed", **req)) as recorded:
                count = 0
                async for _ in recorded:
                    count += 1
                    if count == 10:
                        if write_out:
                            os.kill(server.process.pid, signal.SIGSTOP)
                            stopped = True
                            await until(
                                lambda: log._write_channel._busy, "a write is out")  # type: ignore[union-attr]
                        await log.aclose()
                        writes_at_close = recorded.writes
                        if stopped:
                            os.kill(server.process.pid, signal.SIGCONT)
                            stopped = False
        assert recorded.reply.text == expected_text(req)
        assert isinstance(recorded.log_error, RelayUnavailableError), recorded.log_error
        assert recorded.writes <= writes_at_close + 1
        with anyio.fail_after(FAILED_WITHIN):
            with pytest.raises(RelayUnavailableError):
                async for _ in log.follow("closed"):
                    pass
        assert await other_clients(probe) == []
    finally:
        if stopped:
            os.kill(server.process.pid, signal.SIGCONT)
        await log.aclose()


async def test_a_log_closed_while_a_read_is_out_keeps_no_connection(
    own_redis: tuple[RedisServer, Redis],
) -> None:
    """A follower's first command is out (Redis stopped) when the log closes: the pipeliner
    sent it again on a new connection, which stayed open in the closed client's pool."""
    from fluxstream.relay import RedisReplyLog

    server, probe = own_redis
    assert server.process is not None
    log = RedisReplyLog(server.url)
    await log.redis.ping()  # scripts and connections as a running log has them
    stopped = False

    async def follow() -> None:
        async for _ in log.follow("never-made"):
            pass

    try:
        os.kill(server.process.pid, signal.SIGSTOP)
        stopped = True
        following = asyncio.get_running_loop().create_task(follow())
        pipeline = log._pipeline
        await until(lambda: pipeline._connection is not None, "the follower's command is out")
        await log.aclose()
        os.kill(server.process.pid, signal.SIGCONT)
        stopped = False
        with anyio.fail_after(FAILED_WITHIN):
            with pytest.raises(RelayUnavailableError):
                await following
        assert await other_clients(probe) == []
    finally:
        if stopped:
            os.kill(server.process.pid, signal.SIGCONT)
        await log.aclose()


async def test_a_watch_let_go_while_the_log_closes_opens_no_connection(
    own_redis: tuple[RedisServer, Redis],
) -> None:
    """A recording that stops while its log closes lets its cancel watch go: the channel's
    unsubscribe, sent from a task of its own, ran after the pub/sub connection was closed,
    and redis-py's ``PubSub`` opened a new connection for it, which nobody closed (a
    descriptor and a Redis client per close; seen under load as a client whose last command
    was ``unsubscribe``)."""
    from fluxstream.relay._redis_cancel_watch import CancelWatch

    server, probe = own_redis
    redis = Redis.from_url(server.url)
    watch = CancelWatch(redis, lambda: 1.0)

    async def not_flagged() -> bool:
        return False

    def cancelled() -> None:
        raise AssertionError("nobody cancels")

    try:
        await watch.watch("{p}:x", cancelled, not_flagged)
        closing = asyncio.get_running_loop().create_task(watch.aclose())
        # Until the close is past its listener, into closing the pub/sub connection: a loop
        # pass at a time, so the watch is let go while that close is under way.
        for _ in range(10_000):
            if watch._listener is None:
                break
            await asyncio.sleep(0)
        else:
            raise AssertionError("the close never stopped the listener")
        running = asyncio.all_tasks()
        watch.unwatch("{p}:x", cancelled)
        started = asyncio.all_tasks() - running  # the unsubscribe's own task, if any
        with anyio.fail_after(FAILED_WITHIN):
            await closing
            if started:
                await asyncio.wait(started)
        assert await other_clients(probe) == []
    finally:
        await redis.aclose()
