"""The Redis relay across OS processes: producers and followers in processes of their own,
producers killed with SIGKILL, a cancel from a follower's process, Redis itself killed."""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import anyio
import pytest
from relay_support import Followed, RedisServer, Worker, expected_text, follow_all, request

import fluxstream
from fluxstream.errors import RelayKeyError, RelayUnavailableError, show_key
from fluxstream.relay import PRODUCER_LOST, RedisReplyLog
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio


def test_producer_and_followers_in_three_processes(
    redis_server: RedisServer, upstream: ServerThread, workers: list[Worker]
) -> None:
    key = "procs-three-processes"
    req = request(tokens=150)
    first = Worker("follow", redis_server.url, key, "start")
    second = Worker("follow", redis_server.url, key, "middle,end")
    workers += [first, second]
    producer = Worker("produce", redis_server.url, upstream.base_url, "5", key, "150", "0.006")
    workers.append(producer)
    assert producer.line() == "ready"
    assert producer.line() == f"done {key} done"
    results = [first.json(), second.json(), second.json()]
    assert [r["join"] for r in results] == ["start", "middle", "end"]
    assert results[1]["ended_at_join"] is False and results[2]["ended_at_join"] is True
    for result in results:
        assert result["text"] == expected_text(req), result["join"]
        assert result["offsets_ok"] and result["positions_ok"]
        assert result["outcome"] == "done"


async def test_cancel_from_a_follower_process_stops_the_upstream_promptly(
    redis_server: RedisServer, server_factory: Any, workers: list[Worker]
) -> None:
    """A cancel from another process closes the producer's upstream request long before the
    reply would end (2000 tokens at 10 ms: 20 s). Quiet, it takes a few tens of
    milliseconds; the bound is 2 s because four processes (canceller, Redis, producer,
    server) share two loaded cores here, and 200 ms failed under load with nothing wrong.
    The follower processes start before the reply (they wait for its key): a Python process
    can take seconds to start on a loaded machine, and a reply of 5 s once ended before the
    canceller had read its 15 deltas."""
    upstream: ServerThread = server_factory(profile="openai", faults="drip=0.01")
    key = "cancel-from-a-follower-process"
    log = RedisReplyLog(redis_server.url)
    req = request(tokens=2000)
    canceller = Worker("follow", redis_server.url, key, "start", "15")
    watcher = Worker("follow", redis_server.url, key, "start")
    workers += [canceller, watcher]
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        recorded = log.record(client.chat.stream(content_key=key, **req))
        async with recorded:
            async for _ in recorded:
                pass
    await log.aclose()
    assert recorded.outcome is fluxstream.Outcome.CANCELLED
    asked = canceller.json()["cancel_at"]
    # The server notes the disconnect when its next write fails (the drip is 10 ms): wait for
    # the record, whose time is the detection time, rather than race it.
    record = await upstream.records.wait_disconnect(10.0, completed=False)
    assert 0 <= record.time - asked < 2.0, record.time - asked
    for result in (canceller.json(), watcher.json()):
        assert result["outcome"] == "cancelled"
        assert result["offsets_ok"] and expected_text(req).startswith(result["text"])
        assert len(result["text"]) > 0


async def test_a_paused_producer_whose_reply_was_taken_over_closes_its_upstream(
    redis_server: RedisServer, upstream: ServerThread, workers: list[Worker]
) -> None:
    """A producer process paused longer than its lease (SIGSTOP: a stalled VM, a swap storm)
    while a follower takes its reply over. Resumed, it finds its lease gone at its next
    write and, as the stream's only consumer, closes its upstream request at once: the
    upstream sees the disconnect, and the rest of the reply is generated only once, by the
    taker, whose followers read it exactly."""
    import os
    import signal

    from redis.asyncio import Redis

    lease = 0.5
    key = "paused-producer"
    # 8 s at the producer's drip: paused and resumed mid-reply however long a loaded machine
    # takes to take the reply over (the upstream writes on into the socket meanwhile).
    req = request(tokens=800)
    producer = Worker("produce", redis_server.url, upstream.base_url, str(lease), key, "800",
                      "0.01", "only")
    workers.append(producer)
    assert producer.line() == "ready"
    # The follower's log keeps the default lease: it takes the reply over, and a taker's
    # lease of 0.5 s lapsed under a loaded machine's stall (the reply then ended cut short).
    # The producer process's own lease (0.5 s) is the one that lapses while it is paused.
    log = RedisReplyLog(redis_server.url)
    admin = Redis.from_url(redis_server.url)
    lease_key = log.keys(key)["lease"]
    seen: list[Followed] = []

    async def until(check: Any, within: float) -> None:
        with anyio.fail_after(within):
            for _ in range(int(within / 0.005) + 1):  # the deadline ends it first
                if await check():
                    return
                await anyio.sleep(0.005)

    async def written(entries: int) -> bool:
        return (await log._state(key)).last >= entries

    try:
        await until(lambda: written(5), 10.0)
        first_owner = await admin.get(lease_key)
        [sent] = upstream.records.requests
        os.kill(producer.process.pid, signal.SIGSTOP)

        async def taken() -> bool:
            owner = await admin.get(lease_key)
            return owner is not None and owner != first_owner

        async with fluxstream.AsyncClient(upstream.base_url) as client:
            async with anyio.create_task_group() as tg:

                async def follow() -> None:
                    seen.append(await follow_all(log, key, takeover=client))

                tg.start_soon(follow)
                await until(taken, 10.0)
                resumed_at = time.monotonic()
                os.kill(producer.process.pid, signal.SIGCONT)
                record = await upstream.records.wait_disconnect(
                    5.0, request=sent.seq, completed=False)
    finally:
        os.kill(producer.process.pid, signal.SIGCONT)
        await admin.aclose()
        await log.aclose()
    # At its first write once resumed (plus a loaded machine's slack for a process that was
    # stopped), not at the reply's end, seconds later.
    assert record.time - resumed_at < 3.0, record.time - resumed_at
    assert producer.line() == f"done {key} cancelled"
    answered = {r.request: r for r in upstream.records.responses}
    assert answered[sent.seq].ending == "client-disconnect"
    assert len(upstream.records.requests) == 2  # the producer's and the taker's, no more
    [one] = seen
    one.check()
    assert one.text == expected_text(req)
    assert one.end.outcome is fluxstream.Outcome.DONE


async def test_sigkilled_producers_are_taken_over_exactly_or_reported_lost(
    redis_server: RedisServer, upstream: ServerThread, workers: list[Worker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Four producer processes of five streams each (different speeds), ten streams followed
    with takeover (two followers racing for it), ten without; each process SIGKILLed once
    every one of its streams has written a number of entries drawn (seeded) for it. The kill
    is driven by what the log holds, not by the clock, so it lands mid-reply for every
    stream however loaded the machine: each of the twenty is taken over exactly or reported
    lost, every time."""
    caplog.set_level(logging.WARNING, logger="fluxstream.relay")
    rng = random.Random(14)
    lease = 0.6
    tokens = 300  # 1.8 to 3 s per stream at the drips below: each kill lands mid-reply
    req = request(tokens=tokens)
    expected = expected_text(req)
    groups: list[tuple[bool, list[str], Worker, int]] = []
    for group in range(4):
        keys = [f"kill-{group}-{i}" for i in range(5)]
        drips = ",".join(str(0.006 + 0.001 * i) for i in range(5))
        worker = Worker("produce", redis_server.url, upstream.base_url, str(lease),
                        ",".join(keys), str(tokens), drips)
        workers.append(worker)
        groups.append((group < 2, keys, worker, rng.randint(2, 12)))
    for _, _, worker, _ in groups:
        assert worker.line() == "ready"
    log = RedisReplyLog(redis_server.url, lease=lease)
    # Takers record with the default lease: one of 0.6 s lapsed under a loaded machine's
    # stall, and a reply whose two followers had both taken it over ended cut short.
    takers = RedisReplyLog(redis_server.url)
    results: dict[str, list[tuple[Followed, float]]] = {}
    killed_at: dict[str, float] = {}
    ended_before_kill: list[str] = []

    async def follower(key: str, takeover: Any) -> None:
        seen = Followed()
        with anyio.fail_after(30):
            async for item in (takers if takeover else log).follow(key, takeover=takeover):
                seen.events.append(item)
        results.setdefault(key, []).append((seen, time.monotonic()))

    async def killer(keys: list[str], worker: Worker, entries: int) -> None:
        """SIGKILL ``worker`` once each of its ``keys`` has ``entries`` entries."""
        with anyio.fail_after(20):
            for _ in range(4000):  # the deadline ends it first
                states = [await log._state(key) for key in keys]
                if all(state.last >= entries for state in states):
                    break
                await anyio.sleep(0.005)
        worker.kill()
        for key in keys:
            killed_at[key] = time.monotonic()
            if (await log._state(key)).ended:
                ended_before_kill.append(key)

    async with fluxstream.AsyncClient(upstream.base_url) as client:
        async with anyio.create_task_group() as tg:
            for takeover, keys, worker, entries in groups:
                for key in keys:
                    tg.start_soon(follower, key, client if takeover else None)
                    if takeover:  # a second follower races for the same takeover
                        tg.start_soon(follower, key, client)
                tg.start_soon(killer, keys, worker, entries)
    await log.aclose()
    await takers.aclose()
    assert ended_before_kill == []  # every kill landed mid-reply
    for takeover, keys, _, _ in groups:
        for key in keys:
            assert len(results[key]) == (2 if takeover else 1)
            for seen, ended in results[key]:
                seen.check()
                if takeover:
                    assert seen.text == expected, key
                    assert seen.end.outcome is fluxstream.Outcome.DONE
                else:
                    assert seen.end.outcome is fluxstream.Outcome.TRUNCATED
                    assert seen.end.reason == PRODUCER_LOST
                    assert expected.startswith(seen.text) and seen.text != expected
                    # Noticed within a lease of the kill (and a poll, on a loaded machine).
                    assert ended - killed_at[key] < lease + 2.0, ended - killed_at[key]
    # Each of the ten was taken over (by one of its two followers; a taker whose own lease
    # lapsed on a starved machine may be taken over again, never text twice).
    said = [r.getMessage() for r in caplog.records if "taking over" in r.getMessage()]
    for takeover, keys, _, _ in groups:
        for key in keys:
            taken = [m for m in said if f"producer of {show_key(key)} lost" in m]
            assert bool(taken) is takeover, key


async def test_redis_killed_mid_stream_the_producer_goes_on_followers_get_a_typed_error(
    upstream: ServerThread,
) -> None:
    redis = RedisServer().start()
    log = RedisReplyLog(redis.url, lease=1.0)
    follower_log = RedisReplyLog(redis.url, lease=1.0)
    try:
        req = request(tokens=150)
        errors: list[BaseException] = []

        async def follower() -> None:
            started = time.monotonic()
            try:
                async for _ in follower_log.follow("gone"):
                    pass
            except RelayUnavailableError as exc:
                errors.append(exc)
            assert time.monotonic() - started < 10

        async with fluxstream.AsyncClient(upstream.base_url) as client:
            async with anyio.create_task_group() as tg:
                recorded = log.record(client.chat.stream(content_key="gone", **req))
                async with recorded:
                    tg.start_soon(follower)
                    count = 0
                    async for event in recorded:
                        if isinstance(event, fluxstream.TextDelta):
                            count += 1
                            if count == 20:
                                redis.kill()
        assert recorded.reply.text == expected_text(req)
        assert recorded.outcome is fluxstream.Outcome.DONE
        assert isinstance(recorded.log_error, RelayUnavailableError)
        assert len(errors) == 1
        # Restarted (empty): the reply is gone, and saying so is a typed error.
        redis = RedisServer(port=redis.port).start()
        with pytest.raises(RelayKeyError):
            async for _ in follower_log.follow("gone"):
                pass
    finally:  # closed whatever failed: a log left open keeps its background tasks
        await log.aclose()
        await follower_log.aclose()
        redis.stop()


async def test_many_followers_share_a_few_redis_connections(
    redis_server: RedisServer, upstream: ServerThread
) -> None:
    """Commands are pipelined and one tailer read serves every waiting follower: 20 streams
    with 5 followers each cost a handful of connections, not 100 blocked ones."""
    import redis.asyncio as aioredis

    producer_log, follower_log = RedisReplyLog(redis_server.url), RedisReplyLog(redis_server.url)
    req = request(tokens=40)
    keys = [f"many-{i}" for i in range(20)]
    results: dict[str, list[Followed]] = {key: [] for key in keys}
    peak = 0
    admin = aioredis.Redis.from_url(redis_server.url)

    async def follower(key: str) -> None:
        seen = Followed()
        with anyio.fail_after(20):
            async for item in follower_log.follow(key):
                seen.events.append(item)
        results[key].append(seen)

    async with fluxstream.AsyncClient(upstream.base_url) as client:
        recorded = [producer_log.record(client.chat.stream(content_key=k, **req)) for k in keys]
        for r in recorded:
            await r.start()

        async def drain(r: Any) -> None:
            async with r:
                async for _ in r:
                    pass

        async with anyio.create_task_group() as tg:
            for key in keys:
                for _ in range(5):
                    tg.start_soon(follower, key)
            for r in recorded:
                tg.start_soon(drain, r)
            for _ in range(10):
                await anyio.sleep(0.05)
                peak = max(peak, len(await admin.client_list()))
    await admin.aclose()
    await producer_log.aclose()
    await follower_log.aclose()
    for key in keys:
        assert len(results[key]) == 5
        for seen in results[key]:
            seen.check()
            assert seen.text == expected_text(req)
    assert peak <= 12, peak
