"""Relay failures the contract suite does not reach: takeovers, cancels and stops racing the
producer, a stuck or closed Redis, a reply recreated under its follower, producers that
vanish or consume slowly. Each case once failed (a hang, a leak, a lost reply). Memory and
Redis logs alike where the case applies to both."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from relay_support import (
    RedisServer,
    died_at_once,
    expected_text,
    follow_all,
    lapse_lease,
    request,
)

import fluxstream
from fluxstream.errors import RelayUnavailableError
from fluxstream.relay import ReplyLog
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MakeLog = Callable[..., ReplyLog]

#: One request per endpoint: (endpoint attribute, keyword arguments, upstream path).
ENDPOINTS = [
    ("chat", {"messages": [{"role": "user", "content": "take me over"}], "max_tokens": 30},
     "/v1/chat/completions"),
    ("responses", {"input": "take me over", "max_output_tokens": 30}, "/v1/responses"),
    ("messages", {"messages": [{"role": "user", "content": "take me over"}], "max_tokens": 30},
     "/v1/messages"),
]


@pytest.mark.parametrize(("endpoint", "kwargs", "path"), ENDPOINTS,
                         ids=[e[0] for e in ENDPOINTS])
async def test_a_takeover_before_the_first_entry_resends_to_the_same_endpoint(
    make_log: MakeLog, upstream: ServerThread, endpoint: str, kwargs: dict[str, Any], path: str
) -> None:
    """A producer that created its reply and died before writing anything leaves no resume
    token, only the request (``base``): the taker sends that request again -- to the API it was
    meant for. It used to send every such request to Chat Completions: a Responses reply
    ended ``producer lost`` (``Chat.stream()`` wants ``messages``), a Messages request went to
    the wrong API."""
    log = make_log()  # the taker's lease: the default, which a stalled loop does not outlast
    key = f"early-{endpoint}"
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        direct = await getattr(client, endpoint).complete(model="m", **kwargs)
        stream = getattr(client, endpoint).stream(model="m", content_key=key, **kwargs)
        base = stream.resume_token()
        base.pop("reply", None)
        await stream.aclose()
        await died_at_once(log, key, base)
        before = len(upstream.records.requests)
        seen = await follow_all(log, key, takeover=client)
    assert seen.end.outcome is fluxstream.Outcome.DONE, seen.end
    assert seen.text == direct.text
    assert [r.path for r in upstream.records.requests[before:]] == [path]


async def test_a_cancelled_reply_leaves_no_cancel_subscription_behind(
    redis_server: RedisServer, upstream: ServerThread
) -> None:
    """Every recorded stream subscribes to its cancel channel; a cancel fired the callbacks
    and forgot the channel without unsubscribing, so a worker kept one subscription (on its
    pub/sub connection and in Redis) per reply ever cancelled."""
    from redis.asyncio import Redis

    from fluxstream.relay import RedisReplyLog

    producer = RedisReplyLog(redis_server.url, prefix="failures-sub:")
    stopper = RedisReplyLog(redis_server.url, prefix="failures-sub:")
    probe = Redis.from_url(redis_server.url)
    try:
        async with fluxstream.AsyncClient(upstream.base_url) as client:
            for n in range(3):
                key = f"stop-{n}"
                req = {"messages": [{"role": "user", "content": "stop me"}], "max_tokens": 200}
                outcomes: list[Any] = []

                async def stop(key: str = key, outcomes: list[Any] = outcomes) -> None:
                    outcomes.append(await stopper.cancel(key))

                async with anyio.create_task_group() as tg, producer.record(
                    client.chat.stream(model="m@fill-max-tokens", content_key=key, **req)
                ) as recorded:
                    async for event in recorded:
                        if isinstance(event, fluxstream.TextDelta) and not outcomes:
                            outcomes.append(None)
                            tg.start_soon(stop)
                assert outcomes[-1] is fluxstream.Outcome.CANCELLED
        channels = [producer.keys(f"stop-{n}")["channel"] for n in range(3)]
        with anyio.fail_after(5):
            while True:
                counts = await probe.pubsub_numsub(*channels)
                if all(count == 0 for _, count in counts):
                    break
                await anyio.sleep(0.02)
        assert not producer._cancels._watchers
    finally:
        await probe.aclose()
        await producer.aclose()
        await stopper.aclose()


async def test_a_stuck_redis_is_reported_when_the_recorded_stream_closes(
    upstream: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis stops answering (SIGSTOP: connections stay open, nothing comes back) mid-reply.
    The stream still completes, the follower gets a typed error within the socket timeout,
    and closing the recorded stream waits at most its close wait for the end to be written
    -- after which ``log_error`` must say the end was not recorded. It was ``None``: the
    producer believed the reply recorded while the log held no end."""
    from fluxstream.relay import RedisReplyLog, producer

    monkeypatch.setattr(producer, "_CLOSE_WAIT", 0.5)
    redis = RedisServer().start()
    assert redis.process is not None
    stopped = False
    try:
        log = RedisReplyLog(redis.url, lease=1.0)
        follower_log = RedisReplyLog(redis.url, lease=1.0)
        req = request(tokens=60)
        errors: list[tuple[BaseException, float]] = []
        stopped_at = 0.0

        async def follower() -> None:
            try:
                async for _ in follower_log.follow("stuck"):
                    pass
            except RelayUnavailableError as exc:
                errors.append((exc, time.monotonic() - stopped_at))

        async with fluxstream.AsyncClient(upstream.base_url) as client:
            async with anyio.create_task_group() as tg:
                recorded = log.record(client.chat.stream(content_key="stuck", **req))
                async with recorded:
                    tg.start_soon(follower)
                    count = 0
                    async for event in recorded:
                        if isinstance(event, fluxstream.TextDelta):
                            count += 1
                            if count == 10:
                                os.kill(redis.process.pid, signal.SIGSTOP)
                                stopped, stopped_at = True, time.monotonic()
                closed_at = time.monotonic()
                assert recorded.reply.text == expected_text(req)
                assert recorded.outcome is fluxstream.Outcome.DONE
                assert recorded.log_error is not None
                assert closed_at - stopped_at < 5
        assert len(errors) == 1 and errors[0][1] < 12, errors
        os.kill(redis.process.pid, signal.SIGCONT)
        stopped = False
        await log.aclose()
        await follower_log.aclose()
    finally:
        if stopped:
            os.kill(redis.process.pid, signal.SIGCONT)
        redis.stop()


async def test_a_reply_silent_longer_than_the_ttl_is_not_forgotten_while_its_producer_lives(
    make_log: MakeLog,
) -> None:
    """``ttl`` is how long a reply is kept after its last write; a producer that is alive but
    has nothing to write (a model that thinks without streaming) only refreshes its lease.
    On Redis the refresh did not push the reply's TTL back, so a silence longer than ``ttl``
    expired the reply under a live producer: followers got ``RelayKeyError`` and the
    producer's next write made a reply without its request or first entries."""
    # The silence (3.5 s) outlasts the TTL (2 s) by far; the lease (1.5 s, refreshed every
    # half second) outlasts a loaded worker's stalled loop, and so does the TTL each refresh
    # pushes back. (A lease of 0.3 s lapsed whenever the loop stalled 0.2 s.)
    req = request(tokens=40)
    with ServerThread(faults="stall=3.5,stall-after-events=5") as stalling:
        log = make_log(ttl=2.0, lease=1.5)
        async with fluxstream.AsyncClient(stalling.base_url) as client:
            async with anyio.create_task_group() as tg:
                seen: list[Any] = []

                async def follower() -> None:
                    seen.append(await follow_all(log, "silent"))

                recorded = log.record(client.chat.stream(content_key="silent", **req))
                async with recorded:
                    await recorded.start()
                    tg.start_soon(follower)
                    async for _ in recorded:
                        pass
        assert recorded.log_error is None, recorded.log_error
    seen[0].check()
    assert seen[0].text == expected_text(req)
    assert seen[0].end.outcome is fluxstream.Outcome.DONE


async def test_a_follower_of_a_recreated_reply_waits_after_the_tailer_failed(
    redis_server: RedisServer,
) -> None:
    """The tailer's read failed (here its connection is killed; a Redis restart does the
    same) while it knew a reply up to entry 20. The reply is then gone and made again under
    the same key (Redis came back empty, the request was retried). The tailer kept believing
    that entry 20 existed, so a follower caught up at entry 1 never waited: it re-read Redis
    in a loop, thousands of round trips a second, for as long as the reply was silent."""
    from redis.asyncio import Redis

    from fluxstream.relay import Entry, RedisReplyLog

    log = RedisReplyLog(redis_server.url, prefix="failures-recreate:", lease=5.0)
    probe = Redis.from_url(redis_server.url)
    try:
        await log._create("again", "first", {})
        async with anyio.create_task_group() as tg:
            first: list[Any] = []

            async def follower() -> None:
                first.append(await follow_all(log, "again"))

            tg.start_soon(follower)
            for n in range(1, 21):  # live, so the follower waits on the tailer
                await anyio.sleep(0.01)
                entry = Entry(n, (fluxstream.TextDelta("again", 0, n - 1, "x"),))
                await log._append("again", "first", entry, token=None, final=False)
            end = Entry(21, (fluxstream.End(fluxstream.Outcome.DONE, None),),
                        {"outcome": "done"})
            await log._append("again", "first", end, token=None, final=True)
        assert len(first[0].events) == 21
        # The tailer still watches the reply (it lingers); Redis "restarts": every
        # connection of the log's tailer closes (its read's, and its subscription's to the
        # written channel, which wakes it when it is not reading).
        assert log._tailer._client_id is not None
        await probe.client_kill_filter(_id=log._tailer._client_id)
        await probe.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        with anyio.fail_after(5):  # until the tailer's read failed and it gave up
            for _ in range(1000):  # the deadline ends it first
                if log._tailer._task is None or log._tailer._task.done():
                    break
                await anyio.sleep(0.01)
        await probe.delete(*(name for name in log.keys("again").values()))
        await log._create("again", "second", {})
        entry = Entry(1, (fluxstream.TextDelta("again", 0, 0, "y"),))
        await log._append("again", "second", entry, token=None, final=False)

        reads = 0
        real_range = log._range

        async def counting_range(stream: str, after: int) -> list[Entry]:
            nonlocal reads
            reads += 1
            return await real_range(stream, after)

        log._range = counting_range  # type: ignore[method-assign]
        seen: list[Any] = []

        async def follow() -> None:
            async for item in log.follow("again"):
                seen.append(item)
                arrived.set()

        arrived = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            with anyio.fail_after(10):  # the entry there is, however late the machine
                await arrived.wait()
            counted_from = reads
            await anyio.sleep(0.6)  # the reply silent: the follower waits, not reads
            tg.cancel_scope.cancel()
        assert [item.event.text for item in seen] == ["y"]
        reads -= counted_from
        assert reads < 30, f"{reads} reads of Redis in 0.6 s of a silent reply"
    finally:
        await probe.aclose()
        await log.aclose()


async def test_the_memory_log_bounds_replies_whose_producer_vanished() -> None:
    """``max_replies`` bounds the memory log, and a reply is forgotten ``ttl`` after its end.
    A reply whose producer vanished without an end (its lease lapsed: the loop was blocked
    past the lease, the recorder's writes failed) and that nobody followed to end it was
    neither: the log grew by one such reply per lost producer, forever."""
    from fluxstream.relay import MemoryReplyLog

    log = MemoryReplyLog(max_replies=5, ttl=3600.0, lease=0.05)
    for n in range(20):
        await log._create(f"vanished-{n}", f"owner-{n}", {})
    await anyio.sleep(0.1)  # every lease lapsed
    await log._create("live", "owner", {})
    assert len(log._replies) <= 5
    assert "live" in log._replies

    short = MemoryReplyLog(ttl=0.05, lease=0.02)
    await short._create("vanished", "owner", {})
    await anyio.sleep(0.15)  # lease lapsed, and ttl since
    await short._create("next", "owner", {})
    assert list(short._replies) == ["next"]
    # Forgotten means forgotten: the key can be recorded again (as on Redis, whose keys expire).
    await short._create("vanished", "again", {})
    await short._create("forgotten", "owner", {})
    await anyio.sleep(0.15)
    assert not (await short._state("forgotten")).exists
    await short._create("forgotten", "again", {})


async def test_stop_during_a_takeover_ends_the_reply_cancelled_and_resumes_nothing(
    make_log: MakeLog, upstream: ServerThread
) -> None:
    """The producer died and a follower took the reply over; then the user presses Stop. A
    taker that is cancelled releases its lease (so that a taker merely closed by its own
    follower can be replaced), and with the lease free the followers raced the cancel: they
    ended the reply ``truncated`` / ``producer lost`` -- or took it over again, sending the
    request upstream once more after Stop. (A race: 3 runs of this test in 4 failed.)"""
    req = {"messages": [{"role": "user", "content": "stop my taker"}], "max_tokens": 400}
    # The takers' lease is the default: one of 0.3 s lapsed under a taker whose loop a loaded
    # machine stalled, and another follower took the reply over -- a request sent twice.
    log, stopper = make_log(), make_log()
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        for round_ in range(5):
            key = f"stop-taker-{round_}"
            stream = client.chat.stream(model="m@fill-max-tokens", content_key=key, **req)
            base = stream.resume_token()
            base.pop("reply", None)
            await stream.aclose()
            await died_at_once(log, key, base)
            before = len(upstream.records.requests)
            outcomes: list[Any] = []
            results: dict[int, Any] = {}

            async def follower(n: int, key: str = key, results: dict[int, Any] = results) -> None:
                results[n] = await follow_all(log, key, takeover=client)

            async with anyio.create_task_group() as tg:
                for n in range(3):
                    tg.start_soon(follower, n)
                with anyio.fail_after(10):  # until the taker streams: its first entry
                    for _ in range(2000):  # the deadline ends it first
                        if (await log._state(key)).last:
                            break
                        await anyio.sleep(0.01)
                outcomes.append(await stopper.cancel(key))
            assert outcomes == [fluxstream.Outcome.CANCELLED], round_
            for seen in results.values():
                assert seen.end.outcome is fluxstream.Outcome.CANCELLED, (round_, seen.end)
            assert len(upstream.records.requests) == before + 1, f"sent again after Stop {round_}"


async def test_cancel_of_a_reply_that_vanishes_meanwhile_ends_within_its_wait(
    make_log: MakeLog, log_kind: str, redis_server: RedisServer
) -> None:
    """``cancel`` polls until the end is recorded. A reply that vanished while it polled
    (expired, evicted, Redis restarted empty) has no lease and cannot be ended, and the loop
    went round without its deadline or its sleep: ``cancel`` never returned (on the memory
    log, whose calls do not yield, the whole event loop froze)."""
    from redis.asyncio import Redis

    from fluxstream.errors import RelayKeyError

    log = make_log(lease=5.0)
    await log._create("vanishing", "alive", {})
    probe = Redis.from_url(redis_server.url)
    real_state = log._state

    async def yielding_state(key: str) -> Any:
        await anyio.lowlevel.checkpoint()  # so fail_after can stop the old loop on memory
        return await real_state(key)

    log._state = yielding_state  # type: ignore[method-assign]

    async def vanish() -> None:
        await anyio.sleep(0.1)
        if log_kind == "memory":
            log._replies.clear()  # type: ignore[attr-defined]
        else:
            await probe.delete(*log.keys("vanishing").values())  # type: ignore[attr-defined]

    try:
        started = time.monotonic()
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(vanish)
                with pytest.raises(RelayKeyError):
                    await log.cancel("vanishing", wait=1.0)
        assert time.monotonic() - started < 2
    finally:
        await probe.aclose()


async def test_a_stuck_redis_on_a_client_without_timeouts_bounds_every_call(
    upstream: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RedisReplyLog(redis_client)`` with the client's defaults (no connect or socket
    timeout) and a Redis that accepts connections but answers nothing (SIGSTOP; a hung or
    overloaded server looks the same). Each round trip is bounded, but taking a connection
    from the pool -- connect and handshake -- was not: the producer's ``async with`` never got
    to open the upstream request, and a follower never returned."""
    from redis.asyncio import Redis

    from fluxstream.relay import RedisReplyLog, _redis_connection, producer

    monkeypatch.setattr(_redis_connection, "ROUND_TRIP", 1.0)
    monkeypatch.setattr(producer, "_CLOSE_WAIT", 0.5)
    redis = RedisServer().start()
    assert redis.process is not None
    os.kill(redis.process.pid, signal.SIGSTOP)
    client_p, client_f = Redis.from_url(redis.url), Redis.from_url(redis.url)
    try:
        log, follower_log = RedisReplyLog(client_p), RedisReplyLog(client_f)
        req = request(tokens=20)
        with anyio.fail_after(8):
            with pytest.raises(RelayUnavailableError):
                async for _ in follower_log.follow("hung"):
                    pass
            async with fluxstream.AsyncClient(upstream.base_url) as client:
                async with log.record(client.chat.stream(content_key="hung", **req)) as recorded:
                    async for _ in recorded:
                        pass
        assert recorded.reply.text == expected_text(req)
        assert isinstance(recorded.log_error, RelayUnavailableError)
        await log.aclose()
        await follower_log.aclose()
    finally:
        os.kill(redis.process.pid, signal.SIGCONT)
        for made in (client_p, client_f):
            await made.aclose()
        redis.stop()


async def test_a_recorded_stream_nobody_consumes_loses_its_lease(
    make_log: MakeLog, upstream: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``await recorded.start()`` makes the key followable at once (the example app does it
    before handing the stream to a task); if the stream is then never consumed (the hand-off
    failed, the client went away before the response began), the log's writer refreshed its
    lease forever: followers never ended, and the writer and the cancel watch kept the stream
    (and its request) alive for good. Unconsumed for long, it now stops recording: the lease
    lapses and followers end ``producer lost``."""
    import gc
    import weakref

    from fluxstream.relay import producer

    monkeypatch.setattr(producer, "_ABANDONED_MIN", 0.3, raising=False)
    log = make_log(lease=0.1)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        recorded = log.record(client.chat.stream(content_key="abandoned", **request(tokens=20)))
        await recorded.start()
        gone = weakref.ref(recorded)
        del recorded
        seen = await follow_all(log, "abandoned")
    assert seen.end.outcome is fluxstream.Outcome.TRUNCATED
    assert seen.end.reason == "producer lost"
    gc.collect()
    assert gone() is None, gc.get_referrers(gone())


async def test_an_unconsumed_stream_whose_lease_is_lost_is_let_go(
    make_log: MakeLog, upstream: ServerThread
) -> None:
    """The other way an unconsumed stream stops recording: its lease lapses first (a loaded
    worker's loop stalled past it, before the abandonment bound). The recording stopped,
    but the log's cancel watch still held the recorder, and through it the stream, its
    request and its upstream connection, for as long as the log lived. (Seen as the test
    above failing under load: its lease of 0.1 s lapsed before the bound of 1 s.)"""
    import gc
    import weakref

    log = make_log()
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        recorded = log.record(client.chat.stream(content_key="lapsed", **request(tokens=20)))
        await recorded.start()
        gone = weakref.ref(recorded)
        del recorded
        await lapse_lease(log, "lapsed")  # as a stall past the lease does
        seen = await follow_all(log, "lapsed")
        assert seen.end.reason == "producer lost"
        # The writer's next refresh (a third of the lease on) finds the lease lost.
        with anyio.move_on_after(10):
            while gone() is not None:
                gc.collect()
                await anyio.sleep(0.05)
        assert gone() is None, "the log still holds a stream whose recording stopped"


async def test_a_slow_consumer_keeps_recording(
    make_log: MakeLog, upstream: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side of the bound above: a consumer that waits in ``anext`` (a silent
    model) or takes a while between events, within the bound, is recorded to the end."""
    from fluxstream.relay import producer

    monkeypatch.setattr(producer, "_ABANDONED_MIN", 0.3, raising=False)
    # Each pause (2 s) outlasts the lease (1.5 s), so the recording lives only through the
    # writer's refreshes while nobody reads, and stays well within the abandonment bound
    # (10 leases, 15 s). The lease is refreshed every half second, so a loaded worker's
    # loop stalled for up to a second loses nothing; leases of 50 ms and then 0.2 s lapsed
    # under scheduler noise (a stall of 33 ms, then of ~130 ms). Two pauses are enough.
    lease, pause, pauses = 1.5, 2.0, 2
    log = make_log(lease=lease)
    assert lease < pause < 10 * lease / 2  # what the test is about, whatever the numbers
    req = request(tokens=6)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        async with log.record(client.chat.stream(content_key="slow", **req)) as recorded:
            events = 0
            async for _ in recorded:
                events += 1
                if events <= pauses:
                    await anyio.sleep(pause)
    assert recorded.log_error is None
    seen = await follow_all(log, "slow")
    assert seen.text == expected_text(req)
    assert seen.end.outcome is fluxstream.Outcome.DONE
