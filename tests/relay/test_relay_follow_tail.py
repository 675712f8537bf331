"""A follower's shortcut through its log's tail (``ReplyLog._tail``: the entries already
known taken at once, a wait on a future instead of a read coroutine or a cancel scope per
delta) against the general path it replaces (``_read`` alone), on both logs: the same
items at the same positions, whatever the interleaving of writes, reads, waits that time
out and followers that join mid-reply; and a wait that is cancelled or times out leaves
nothing behind."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from fluxstream._events import End, Outcome, TextDelta
from fluxstream.relay import MemoryReplyLog, Position, ReplyLog
from fluxstream.relay.codec import Entry, end_record, parse_position

pytestmark = pytest.mark.anyio

MakeLog = Callable[..., ReplyLog]

#: Seeds of the random schedules (each one a different interleaving, the same on every run).
SEEDS = range(8)


def reads_alone(log: ReplyLog) -> ReplyLog:
    """``log`` (its state shared: a shallow copy) with no tail: every step of a follower
    goes through ``_read``, the general path."""
    general = copy.copy(log)
    general._tail = lambda key: None  # type: ignore[method-assign]
    return general


async def follow_into(log: ReplyLog, key: str, after: Position, into: list[Any]) -> None:
    async for item in log.follow(key, after=after):
        into.append((str(item.position), item.event))


@pytest.mark.parametrize("seed", SEEDS)
async def test_followers_through_the_tail_yield_what_reads_alone_yield(
    make_log: MakeLog, seed: int
) -> None:
    """Random schedules (seeded): entries of one to three deltas appended in bursts, pauses
    long enough for a poll to time out, followers of both paths joining at random positions
    of what is stored so far; every follower gets exactly the stored events after its
    position, in order, once, and the two paths the same."""
    draw = random.Random(seed)
    # A poll of lease / 4 = 0.6 s: pauses of 0.7 s make waits time out mid-reply, and the
    # lease outlives a pause and a loaded machine's stall of a second and a half on top (a
    # lapse would end the reply early; with a lease of 1.2 s, a stall of 0.85 s would).
    log, other = make_log(lease=2.4), make_log(lease=2.4)
    general = reads_alone(other)
    key = f"tail-{seed}"
    assert log._tail(key) is not None and general._tail(key) is None
    owner = log._new_owner()
    await log._create(key, owner, {})
    stored: list[tuple[str, Any]] = []
    followed: list[tuple[str, int, list[Any]]] = []
    entries = draw.randint(8, 30)
    with anyio.fail_after(60):
        async with anyio.create_task_group() as followers:
            for number in range(1, entries + 1):
                for _ in range(draw.randint(0, 2)):  # followers joining now, both paths
                    at = draw.randint(0, len(stored))
                    after = parse_position(stored[at - 1][0] if at else None)
                    for name, source in (("tail", log), ("read", general)):
                        into: list[Any] = []
                        followed.append((name, at, into))
                        followers.start_soon(follow_into, source, key, after, into)
                events = tuple(
                    TextDelta("text", 0, number * 10 + i, f"t{number}.{i}")
                    for i in range(draw.randint(1, 3))
                )
                await log._append(key, owner, Entry(number, events), token=None, final=False)
                stored.extend((f"{number}-{i}", event) for i, event in enumerate(events))
                pause = draw.choice([0, 0, 0, 0, 0.001, 0.02, 0.7])
                if pause:
                    await anyio.sleep(pause)
                else:
                    for _ in range(draw.randint(0, 3)):
                        await anyio.lowlevel.checkpoint()
            end = Entry(
                entries + 1, (End(Outcome.DONE, None),),
                end_record(Outcome.DONE, None, None, None),
            )
            await log._append(key, owner, end, token=None, final=True)
            stored.append((f"{entries + 1}-0", end.events[0]))
    assert followed, "the schedule started no follower"
    for name, at, items in followed:
        assert items == stored[at:], (name, at)


async def test_a_memory_wait_cancelled_or_timed_out_leaves_the_others_waiting() -> None:
    """On the memory log a follower's wait is a future: one cancelled and one timed out take
    only themselves off the reply's waiters (none is left behind, no time-out pending), and
    the one still waiting is woken by the entry."""
    log = MemoryReplyLog(lease=2.0)
    owner = log._new_owner()
    await log._create("k", owner, {})
    reply = log._replies["k"]
    woken: list[Any] = []

    async def follow(into: list[Any]) -> None:
        async for item in log.follow("k"):
            into.append(item.event)
            return

    with anyio.fail_after(20):
        async with anyio.create_task_group() as waits:
            waits.start_soon(follow, woken)
            async with anyio.create_task_group() as cancelled:
                cancelled.start_soon(follow, [])
                for _ in range(1000):  # until both wait
                    if len(reply.waiting) == 2:
                        break
                    await anyio.sleep(0.005)
                assert len(reply.waiting) == 2
                cancelled.cancel_scope.cancel()
            assert len(reply.waiting) == 1
            tail = log._tail("k")
            assert tail is not None
            timed_out = tail.next(0, 0.01)
            assert timed_out is not None and not isinstance(timed_out, list)
            assert await timed_out is False
            tail.unwait(timed_out)
            assert len(reply.waiting) == 1
            entry = Entry(1, (TextDelta("k", 0, 0, "a"),))
            await log._append("k", owner, entry, token=None, final=False)
    assert woken == [entry.events[0]]
    assert reply.waiting == [] and log._deadlines is not None
    assert not log._deadlines.pending()


@pytest.mark.trio_only
async def test_the_memory_log_on_trio_has_no_tail(anyio_backend: str) -> None:
    """trio has no asyncio futures: its followers read through ``_read`` (anyio), and still
    get every entry."""
    log = MemoryReplyLog()
    assert log._tail("k") is None
    owner = log._new_owner()
    await log._create("k", owner, {})
    got: list[Any] = []
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow_into, log, "k", Position(0, 0), got)
            await anyio.sleep(0.01)
            entry = Entry(1, (TextDelta("k", 0, 0, "a"),))
            await log._append("k", owner, entry, token=None, final=False)
            end = Entry(2, (End(Outcome.DONE, None),), end_record(Outcome.DONE, None, None, None))
            await log._append("k", owner, end, token=None, final=True)
    assert got == [("1-0", entry.events[0]), ("2-0", end.events[0])]


def test_a_memory_log_on_one_loop_after_another_times_its_waits_out_on_each() -> None:
    """The waits' time-outs are timers of the loop that waits: a log that served one event
    loop and then another (each ``asyncio.run``) times out the second one's waits too, with
    slots of its own."""
    import asyncio

    log = MemoryReplyLog()
    loops: list[Any] = []

    async def wait_once() -> bool:
        if "k" not in log._replies:
            await log._create("k", log._new_owner(), {})
        tail = log._tail("k")
        assert tail is not None
        waiter = tail.next(0, 0.01)
        assert isinstance(waiter, asyncio.Future)
        woken = await asyncio.wait_for(waiter, 10)
        tail.unwait(waiter)
        assert log._deadlines is not None
        loops.append(log._deadlines.loop)
        return bool(woken)

    assert asyncio.run(wait_once()) is False
    assert asyncio.run(wait_once()) is False
    assert loops[0] is not loops[1]
    assert log._replies["k"].waiting == []


def test_the_waits_use_the_loops_own_clock_and_futures_when_it_has_its_own() -> None:
    """A wait reads ``time.monotonic`` and makes an ``asyncio.Future`` itself only when those
    are what the loop's ``time`` and ``create_future`` do; a loop with a clock and futures of
    its own (here an hour behind the monotonic clock) is asked for them, so its waits still
    end on time: by the monotonic clock this one's would end an hour late."""
    import asyncio

    from fluxstream.relay._deadlines import Deadlines

    made: list[Any] = []

    class OwnClock(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return super().time() - 3600.0

        def create_future(self) -> asyncio.Future[Any]:
            future = super().create_future()
            made.append(future)
            return future

    async def wait_on(loop: asyncio.AbstractEventLoop) -> tuple[Any, Any]:
        future = Deadlines(loop).future(0.01)
        return future, await asyncio.wait_for(future, 10)

    own = OwnClock()
    try:
        future, result = own.run_until_complete(wait_on(own))
    finally:
        own.close()
    assert result is False and made[0] is future  # the loop's own future, timed out
    plain = asyncio.new_event_loop()
    try:  # asyncio's own loop: the shortcuts, the same result
        assert plain.run_until_complete(wait_on(plain))[1] is False
        deadlines = Deadlines(plain)
        assert deadlines.future(1.0).get_loop() is plain
    finally:
        plain.close()
