"""Time-outs of many waiting followers on asyncio, one timer per slot of time.

A follower waits for the next entry at most a poll's time (it then looks whether the
producer is still alive). A timer per wait kept a thousand timers in the loop's heap for a
thousand followers, re-sorted at every wake-up, and an anyio cancel scope per wait cost
about half of a follower's CPU per delta: here a wait's end is rounded up to a slot of
:data:`SLOT` seconds, and one timer settles every wait that ends in it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

__all__ = ["SLOT", "Deadlines", "of_loop"]

#: Granularity (seconds) of the waits' ends.
SLOT = 0.05
#: Futures the slots hold, settled ones included, before the settled ones (woken waits: most
#: of them) are let go: four times as many as were left the last time, and this many more.
#: A slot held every wait's future, and the entries it was woken with, until its time was up
#: (a follower's poll, a second): at a wait per delta those were a third of what the garbage
#: collector's young passes went over. Counted, not timed: the work is at most about one
#: look per wait, whatever the speed.
HELD = 64


class Deadlines:
    """Futures of ``loop`` settled ``False`` when their time is up (rounded up to
    :data:`SLOT`); a future settled otherwise before then is left as it is. One per event
    loop: the slots are the loop's own, settled by its own timers."""

    __slots__ = (
        "_clock", "_held", "_high", "_last", "_limit", "_low", "_new_future", "_slots", "loop",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        #: ``loop.time``: the clock itself when it is asyncio's own (one call per wait,
        #: not a Python method around it).
        self._clock: Callable[[], float] = (
            time.monotonic if getattr(loop.time, "__func__", None) is asyncio.BaseEventLoop.time
            else loop.time
        )
        #: ``loop.create_future``: the future's own constructor when that is all it does.
        self._new_future: Callable[[], asyncio.Future[Any]] = (
            partial(asyncio.Future, loop=loop)
            if getattr(loop.create_future, "__func__", None)
            is asyncio.BaseEventLoop.create_future
            else loop.create_future
        )
        #: Per slot: the futures whose wait ends then.
        self._slots: dict[int, list[asyncio.Future[bool]]] = {}
        #: The slot of the last wait, pending: its futures, and the span of ``end / SLOT``
        #: that rounds up to it (``_low < end / SLOT <= _high``, as ``math.ceil`` decides):
        #: the waits of one wake-up end in one slot, found by two comparisons
        #: (tests/relay/test_relay_follow_waits.py holds it to ``math.ceil``).
        self._last: list[asyncio.Future[bool]] = []
        self._low = self._high = -math.inf
        #: The futures the slots hold, and how many they may before the settled ones are
        #: let go (:data:`HELD`).
        self._held = 0
        self._limit = HELD

    def future(self, wait: float) -> asyncio.Future[Any]:
        """A new future of the loop, settled ``False`` after ``wait`` seconds (or up to
        :data:`SLOT` more) unless settled before."""
        future = self._new_future()
        at = (self._clock() + wait) / SLOT
        if self._low < at <= self._high:
            self._last.append(future)
        else:
            self._add_at(at, future)
        self._held += 1
        if self._held >= self._limit:
            self._let_go()
        return future

    def _add_at(self, at: float, future: asyncio.Future[bool]) -> None:
        """Settle ``future`` in the slot ``at`` (the wait's end over :data:`SLOT`) rounds up
        to, which becomes the last slot."""
        slot = math.ceil(at)
        expiring = self._slots.get(slot)
        if expiring is None:
            expiring = self._slots[slot] = []
            self.loop.call_at(slot * SLOT, self._expire, slot)
        expiring.append(future)
        self._last, self._low, self._high = expiring, slot - 1, slot

    def _let_go(self) -> None:
        """Let go of the settled futures of every slot (see :data:`HELD`)."""
        held = 0
        for futures in self._slots.values():
            futures[:] = [future for future in futures if not future.done()]
            held += len(futures)
        self._held = held
        self._limit = 4 * held + HELD

    def pending(self) -> list[asyncio.Future[bool]]:
        """The futures not settled yet (for tests: none may be left behind)."""
        return [f for futures in self._slots.values() for f in futures if not f.done()]

    def _expire(self, slot: int) -> None:
        if slot == self._high:  # no wait may join a slot whose time is up
            self._low = self._high = -math.inf
        futures = self._slots.pop(slot, ())
        self._held -= len(futures)
        for future in futures:
            if not future.done():
                future.set_result(False)


def of_loop(deadlines: Deadlines | None, loop: asyncio.AbstractEventLoop) -> Deadlines:
    """``deadlines`` if they are ``loop``'s, else new ones of ``loop`` (a log may serve one
    event loop after another: each keeps its own slots and timers)."""
    if deadlines is None or deadlines.loop is not loop:
        return Deadlines(loop)
    return deadlines
