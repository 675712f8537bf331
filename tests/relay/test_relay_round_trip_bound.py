"""The write channel's bound on a round trip (``_redis_connection.ROUND_TRIP``), on a real
Redis: a round trip Redis does not answer in time fails with ``TimeoutError`` within the
bound of its own start (whatever round trips came before), the next one goes on a new
connection, a cancel from outside stays a cancel, and a round trip answered in time leaves
nothing behind that could cancel the writer later. What ``asyncio.timeout`` around each
round trip did; the channel keeps one timer between round trips instead.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from relay_support import RedisServer

from fluxstream.relay import _redis_connection
from fluxstream.relay._redis_connection import pack
from fluxstream.relay._redis_writes import WriteChannel

pytestmark = pytest.mark.anyio

BOUND = 0.3


async def no_fallback(commands: list[bytes]) -> list[object]:
    raise AssertionError("one sender: the fallback is never used")


@pytest.fixture
async def channel(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[WriteChannel]:
    monkeypatch.setattr(_redis_connection, "ROUND_TRIP", BOUND)
    redis = Redis.from_url(redis_server.url)
    made = WriteChannel(redis, no_fallback)
    try:
        yield made
    finally:
        await made.aclose()
        await redis.aclose()


def blocked(seconds: int = 8) -> bytes:
    """A command Redis answers only after ``seconds``: a hung round trip meanwhile."""
    return pack(["BLPOP", f"nothing-ever-{uuid.uuid4().hex}", str(seconds)])


#: Seconds within which a hung round trip fails: its bound, with a loaded machine's slack --
#: not the 8 s Redis would take to answer it.
WITHIN = 5.0


async def timed_out(channel: WriteChannel) -> float:
    """A hung round trip's ``TimeoutError``, and how long after its start it came."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await channel.send([blocked()])
    return loop.time() - started


async def test_a_hung_round_trip_fails_within_the_bound_and_the_next_goes_on(
    channel: WriteChannel,
) -> None:
    took = await timed_out(channel)
    assert BOUND - 0.01 <= took < WITHIN  # its bound, not the 8 s Redis would take
    assert await channel.send([pack(["PING"])]) == [b"PONG"]  # on a new connection
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_hung_round_trip_after_others_is_bounded_from_its_own_start(
    channel: WriteChannel,
) -> None:
    """A round trip answered in time, then one that hangs started half a bound later: it
    fails a bound after its own start, not the first's."""
    assert await channel.send([pack(["PING"])]) == [b"PONG"]
    await asyncio.sleep(BOUND / 2)
    took = await timed_out(channel)
    assert BOUND - 0.01 <= took < WITHIN
    took = await timed_out(channel)  # and again, right after a timeout
    assert BOUND - 0.01 <= took < WITHIN


async def test_round_trips_answered_in_time_leave_no_cancel_behind(
    channel: WriteChannel,
) -> None:
    for _ in range(5):
        assert await channel.send([pack(["PING"])]) == [b"PONG"]
    await asyncio.sleep(BOUND * 2)  # past every bound: nothing fires at this task
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    assert await channel.send([pack(["PING"])]) == [b"PONG"]


async def test_a_cancel_from_outside_stays_a_cancel(
    channel: WriteChannel, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round trip is cancelled once Redis holds it, well before its bound: a bound of two
    seconds (not :data:`BOUND`), so that a loaded machine's stalled loop does not let the
    bound pass first (the round trip's outcome would then rightly be ``TimeoutError``)."""
    bound = 2.0
    monkeypatch.setattr(_redis_connection, "ROUND_TRIP", bound)
    probe = Redis.from_url(redis_server.url)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        sending = loop.create_task(channel.send([blocked()]))
        for _ in range(1000):  # until Redis holds it (bounded: the round trip's own bound)
            if any(c["cmd"] == "blpop" for c in await probe.client_list()) or sending.done():
                break
            await asyncio.sleep(0.005)
        sending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sending
    finally:
        await probe.aclose()
    assert await channel.send([pack(["PING"])]) == [b"PONG"]
    # Past the bound of the cancelled round trip: nothing fires.
    await asyncio.sleep(max(0.0, started + bound + 0.2 - loop.time()))
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
