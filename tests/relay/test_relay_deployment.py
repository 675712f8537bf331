"""Several producer processes behind one Redis: the deployment a service runs when one
event loop cannot record every stream (a worker per core, each with its own
``RedisReplyLog``), with followers that know nothing of which worker records a reply.

Two producer processes (``relay_worker.py produce``, started and killed here by pid) record
into one real Redis; this process follows replies of both on one log of its own."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from relay_support import Followed, RedisServer, Worker, expected_text, request

import fluxstream
from fluxstream.relay import PRODUCER_LOST, RedisReplyLog
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

#: Streams per producer process, followers per stream.
STREAMS = 4
FOLLOWERS = 2


def start_producers(
    redis_url: str, base_url: str, run: str, *, lease: float, tokens: int, drip: float,
    slow: dict[str, float] | None = None,
) -> list[tuple[Worker, list[str]]]:
    """Two producer processes of ``STREAMS`` replies each, every reply created once both
    said ``ready``; the replies named in ``slow`` drip at their own pace."""
    producers = []
    for name in ("a", "b"):
        keys = [f"deploy-{run}-{name}{i}" for i in range(STREAMS)]
        drips = ",".join(str((slow or {}).get(key, drip)) for key in keys)
        worker = Worker("produce", redis_url, base_url, str(lease), ",".join(keys), str(tokens),
                        drips)
        producers.append((worker, keys))
    return producers


def done_lines(worker: Worker, count: int) -> dict[str, str]:
    """The ``done KEY OUTCOME`` lines of a producer process, by key."""
    outcomes = {}
    for _ in range(count):
        _, key, outcome = worker.line().split()
        outcomes[key] = outcome
    return outcomes


async def test_two_producer_processes_one_redis_followers_of_both_and_a_cancel(
    redis_server: RedisServer, upstream: ServerThread, workers: list[Worker]
) -> None:
    run = "two-and-a-cancel"
    tokens = 200  # ~1.2 s per reply at a 6 ms drip
    req = request(tokens=tokens)
    expected = expected_text(req)
    # One reply of the second process, cancelled by its first follower after 10 deltas: it
    # drips for 10 s, so the cancel lands mid-reply however late a loaded machine starts the
    # followers (at the others' pace it had sometimes ended before its follower's cancel).
    cancelled = f"deploy-{run}-b1"
    producers = start_producers(
        redis_server.url, upstream.base_url, run, lease=5.0, tokens=tokens, drip=0.006,
        slow={cancelled: 0.05},
    )
    workers += [worker for worker, _ in producers]
    for worker, _ in producers:
        assert worker.line() == "ready"
    assert cancelled == producers[1][1][1]
    log = RedisReplyLog(redis_server.url)
    results: dict[str, list[Followed]] = {}

    async def follower(key: str, cancel_after: int) -> None:
        seen = Followed()
        deltas = 0
        with anyio.fail_after(30):
            async for item in log.follow(key):
                seen.events.append(item)
                if isinstance(item.event, fluxstream.TextDelta):
                    deltas += 1
                    if deltas == cancel_after:
                        await log.cancel(key)
        results.setdefault(key, []).append(seen)

    async with anyio.create_task_group() as tg:
        for _, keys in producers:
            for key in keys:
                for i in range(FOLLOWERS):
                    tg.start_soon(follower, key, 10 if key == cancelled and i == 0 else 0)
    await log.aclose()
    outcomes = {}
    for worker, keys in producers:
        outcomes.update(done_lines(worker, len(keys)))
        worker.finish()
        assert worker.process.returncode == 0
    for _, keys in producers:
        for key in keys:
            assert len(results[key]) == FOLLOWERS
            for seen in results[key]:
                seen.check()  # positions increase, offsets contiguous: no text twice
                if key == cancelled:
                    assert seen.end.outcome is fluxstream.Outcome.CANCELLED
                    assert expected.startswith(seen.text) and seen.text != expected
                else:
                    assert seen.text == expected, key
                    assert seen.end.outcome is fluxstream.Outcome.DONE, key
            # The cancel reached the process recording that reply, and only that reply.
            assert outcomes[key] == ("cancelled" if key == cancelled else "done"), key


async def test_one_of_two_producer_processes_killed_mid_reply(
    redis_server: RedisServer, upstream: ServerThread, workers: list[Worker]
) -> None:
    """SIGKILL one producer process mid-reply: its replies end ``truncated`` ("producer
    lost") for plain followers, or are taken over and end exact; the other process's
    replies are untouched. Every follower ends within its bound, never with text twice."""
    run = "one-killed"
    lease = 0.6
    tokens = 300  # ~1.8 s per reply: the kill below lands mid-reply
    req = request(tokens=tokens)
    expected = expected_text(req)
    producers = start_producers(
        redis_server.url, upstream.base_url, run, lease=lease, tokens=tokens, drip=0.006
    )
    workers += [worker for worker, _ in producers]
    for worker, _ in producers:
        assert worker.line() == "ready"
    (victim, lost_keys), (survivor, kept_keys) = producers
    takeover_keys = set(lost_keys[:2])
    log = RedisReplyLog(redis_server.url, lease=lease)
    # Takers record with the default lease: one of 0.6 s can lapse under a loaded machine's
    # stall, and the reply then ends cut short for its followers.
    takers = RedisReplyLog(redis_server.url)
    results: dict[str, list[tuple[Followed, float]]] = {}
    killed_at = 0.0
    seen_of_victim = 0
    kill_now = anyio.Event()

    async def follower(key: str, takeover: Any) -> None:
        nonlocal seen_of_victim
        seen = Followed()
        with anyio.fail_after(30):
            async for item in (takers if takeover else log).follow(key, takeover=takeover):
                seen.events.append(item)
                if key in lost_keys and isinstance(item.event, fluxstream.TextDelta):
                    seen_of_victim += 1
                    if seen_of_victim == 40:
                        kill_now.set()
        results.setdefault(key, []).append((seen, time.monotonic()))

    async def killer() -> None:
        nonlocal killed_at
        with anyio.fail_after(20):
            await kill_now.wait()
        victim.kill()
        killed_at = time.monotonic()

    async with fluxstream.AsyncClient(upstream.base_url) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(killer)
            for key in lost_keys + kept_keys:
                for _ in range(FOLLOWERS):
                    tg.start_soon(follower, key, client if key in takeover_keys else None)
    await log.aclose()
    await takers.aclose()
    assert killed_at > 0
    outcomes = done_lines(survivor, len(kept_keys))
    survivor.finish()
    truncated = 0
    for key in kept_keys:
        assert outcomes[key] == "done"
        for seen, _ in results[key]:
            seen.check()
            assert seen.text == expected and seen.end.outcome is fluxstream.Outcome.DONE
    for key in lost_keys:
        assert len(results[key]) == FOLLOWERS
        for seen, ended in results[key]:
            seen.check()  # positions increase, offsets contiguous: no text twice
            if key in takeover_keys:  # taken over by this process, resumed exactly
                assert seen.text == expected, key
                assert seen.end.outcome is fluxstream.Outcome.DONE
            elif seen.end.outcome is not fluxstream.Outcome.DONE:
                assert seen.end.outcome is fluxstream.Outcome.TRUNCATED
                assert seen.end.reason == PRODUCER_LOST
                assert expected.startswith(seen.text)
                # Noticed within a lease of the kill (and a poll, on a loaded machine).
                assert ended - killed_at < lease + 2.0, ended - killed_at
                truncated += 1
    # The kill came mid-reply: the plain followers of the killed process were cut short.
    assert truncated >= FOLLOWERS
