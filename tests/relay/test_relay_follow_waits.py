"""A follower's wait, two shortcuts against the general path each replaces: the Redis
tailer's ``next`` for a follower at the latest entry of a watched stream (what ``waiter``
does, inline) and the waits' time-outs joining the slot of the wait before (what
``math.ceil`` gives, by two comparisons). Random states and clocks, seeded."""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import Any

import pytest

from fluxstream.relay._deadlines import SLOT, Deadlines
from fluxstream.relay._redis_tailer import Tailer

#: Seeds of the random states (each a different draw, the same on every run).
SEEDS = range(6)


def tailer_state(tailer: Tailer) -> tuple[Any, ...]:
    """What a wait may change in a tailer: the waiters per stream (how many), the streams
    lingering, the latest entry of each, the RESP ids the next read asks after, and whether
    the watched streams changed."""
    return (
        {name: len(futures) for name, futures in tailer._waiters.items()},
        sorted(tailer._linger), dict(tailer._latest), list(tailer._nums), list(tailer._ids),
        tailer._version,
    )


async def _states(seed: int, general: bool) -> list[tuple[Any, ...]]:
    """A tailer driven through a random sequence of follower steps (``next``), with waiters
    woken now and then; with ``general``, ``next`` takes the general path (``waiter``) for
    every wait. Each step's result and the tailer's state after it."""
    draw = random.Random(seed)
    tailer = Tailer(None, None, lambda raw: raw)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    reading = loop.create_task(asyncio.sleep(3600))  # a live read task: no read is started
    tailer._task = reading
    interrupts: list[str] = []
    tailer._interrupt = lambda: interrupts.append("cut")  # type: ignore[method-assign]
    if general:
        tailer.next = lambda stream, after, wait: (  # type: ignore[method-assign]
            Tailer.next(tailer, stream, after, wait)
            if tailer._latest.get(stream) is None or tailer._latest[stream] > after
            or (stream not in tailer._waiters and stream not in tailer._linger)
            else tailer.waiter(stream, after, wait)
        )
    streams = [f"s{i}" for i in range(4)]
    now = time.monotonic()
    for name in streams[:3]:  # watched: lingering at a latest entry (the fourth is not)
        tailer._latest[name] = 2
        tailer._linger[name] = now + 60
    tailer._build()
    states: list[tuple[Any, ...]] = []
    futures: list[asyncio.Future[Any]] = []
    try:
        for _ in range(200):
            name = draw.choice(streams)
            latest = tailer._latest.get(name, 0)
            after = draw.choice([latest, latest, latest, latest + 1, max(0, latest - 1)])
            tailer._blocked_on = draw.choice([{}, {name: 0}, {"other": 0}])
            tailer._closed = draw.random() < 0.05
            step = tailer.next(name, after, draw.choice([0.05, 0.3, 1.0]))
            if isinstance(step, asyncio.Future):
                futures.append(step)
                shown: Any = ("future", step.done() and step.result())
            else:
                shown = step
            if draw.random() < 0.2:  # a read found an entry of this stream
                tailer._set_latest(name, tailer._latest.get(name, 0) + 1)
                tailer._wake(name, None)
            states.append((shown, tailer_state(tailer), len(interrupts)))
    finally:
        reading.cancel()
        for future in futures:
            future.cancel()
    return states


@pytest.mark.parametrize("seed", SEEDS)
def test_the_tailers_next_waits_as_its_general_waiter_does(seed: int) -> None:
    """A follower at the latest entry of a watched stream gets its future from ``next``
    itself; the tailer is left exactly as ``waiter`` leaves it, step after step (waiters,
    lingers, latest entries, ids, the watched streams' version, the interrupts of a read
    out without the stream), and every other case still goes to ``waiter``."""
    fast = asyncio.run(_states(seed, general=False))
    assert fast == asyncio.run(_states(seed, general=True))
    assert any(shown == ("future", False) for shown, _, _ in fast)


class _Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("seed", SEEDS)
def test_a_waits_time_out_joins_the_slot_math_ceil_gives_it(seed: int) -> None:
    """Whatever the clock, the wait and the slots already expired, a wait's future is
    settled by the timer of slot ``ceil((now + wait) / SLOT)``: the shortcut that puts it in
    the slot of the wait before (two comparisons) never picks another one, at a slot's
    exact edges included, and never one whose time is up."""
    draw = random.Random(seed)
    loop = asyncio.new_event_loop()
    try:
        deadlines = Deadlines(loop)
        clock = deadlines._clock = _Clock(draw.uniform(0, 1e6))  # type: ignore[assignment]
        edges = 0
        for _ in range(3000):
            clock.now += draw.choice([0.0, 0.0, 1e-9, 0.001, 0.02, SLOT, 0.3])
            if draw.random() < 0.2:  # now exactly on a slot's edge
                clock.now = math.ceil(clock.now / SLOT) * SLOT
            wait = draw.choice([0.0, 0.05, 0.3, 1.0, draw.uniform(0, 2)])
            at = (clock.now + wait) / SLOT
            edges += at == math.floor(at)
            future = deadlines.future(wait)
            slot = math.ceil(at)
            assert any(f is future for f in deadlines._slots[slot]), (clock.now, wait)
            if draw.random() < 0.1:  # the timers of the slots whose time is up fire
                for due in [s for s in deadlines._slots if s * SLOT <= clock.now + 0.1]:
                    deadlines._expire(due)
                    assert due not in deadlines._slots
        assert edges > 50
        pending = deadlines.pending()
        assert len(pending) == sum(map(len, deadlines._slots.values()))
        for futures in list(deadlines._slots.values()):
            for future in futures:
                future.cancel()
    finally:
        loop.close()


def test_settled_waits_are_let_go_and_the_others_still_time_out() -> None:
    """The slots let go of their settled futures (woken waits, with the entries they were
    woken with) once they hold :data:`HELD` more than four times those left the last time,
    where they held them until the slot's time was up: what they hold stays bounded by the
    waits not settled, each of which stays in its own slot and still times out; nothing
    else is settled, and a wait settled later is let go at a later look."""
    import weakref

    from fluxstream.relay._deadlines import HELD

    loop = asyncio.new_event_loop()
    try:
        deadlines = Deadlines(loop)
        clock = deadlines._clock = _Clock(5000.0)  # type: ignore[assignment]
        draw = random.Random(3)
        pending: list[tuple[int, asyncio.Future[Any]]] = []
        woken: list[weakref.ref[asyncio.Future[Any]]] = []
        for _ in range(2000):  # no slot's time comes: only letting go frees a future
            clock.now += draw.choice([0.0, 0.0001, 0.0005])
            future = deadlines.future(1.0)
            slot = math.ceil((clock.now + 1.0) / SLOT)
            if draw.random() < 0.9:
                future.set_result([object()])  # woken with its entries
                woken.append(weakref.ref(future))
            else:
                pending.append((slot, future))
            del future
            held = sum(map(len, deadlines._slots.values()))
            assert held <= 4 * len(pending) + HELD
        assert sum(ref() is not None for ref in woken) <= 4 * len(pending) + HELD < len(woken) / 2
        assert len({slot for slot, _ in pending}) > 1
        assert all(
            any(f is future for f in deadlines._slots[slot]) for slot, future in pending
        )
        late = [weakref.ref(future) for _, future in pending[1:]]
        for _, future in pending[1:]:
            future.set_result([object()])
        del pending[1:], future
        for _ in range(HELD + 4 * len(late) + 1):
            deadlines.future(1.0).cancel()
        assert late and all(ref() is None for ref in late)
        for slot in sorted(deadlines._slots):
            deadlines._expire(slot)
        assert all(future.result() is False for _, future in pending)
        assert not deadlines._slots and not deadlines.pending()
        assert deadlines._held == 0
    finally:
        loop.close()
