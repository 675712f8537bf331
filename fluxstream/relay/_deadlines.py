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
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

__all__ = ["SLOT", "Deadlines", "of_loop"]

#: Granularity (seconds) of the waits' ends.
SLOT = 0.05
#: Seconds after a slot got its first wait when the futures of its waits that were settled
#: meanwhile (woken: most of them) are let go, and again as long again later, up to
#: :data:`COMPACTIONS` times while some are left: a slot held every wait's future, and the
#: entries it was woken with, until its time was up (a follower's poll, a second), and at a
#: wait per delta those were a third of what the garbage collector's young passes went over.
COMPACT_AFTER = 0.25
COMPACTIONS = 3


class Deadlines:
    """Futures of ``loop`` settled ``False`` when their time is up (rounded up to
    :data:`SLOT`); a future settled otherwise before then is left as it is. One per event
    loop: the slots are the loop's own, settled by its own timers."""

    __slots__ = (
        "_clock", "_filling", "_high", "_last", "_low", "_new_future", "_slots", "loop",
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
        #: The slots' lists by when their settled futures are let go next
        #: (:data:`COMPACT_AFTER`), with the looks left.
        self._filling: deque[tuple[float, list[asyncio.Future[bool]], int]] = deque()

    def add(self, wait: float, future: asyncio.Future[bool]) -> None:
        """Settle ``future`` ``False`` after ``wait`` seconds (or up to :data:`SLOT` more)."""
        at = (self._clock() + wait) / SLOT
        if self._low < at <= self._high:
            self._last.append(future)
        else:
            self._add_at(at, future)

    def future(self, wait: float) -> asyncio.Future[Any]:
        """A new future of the loop, settled ``False`` after ``wait`` seconds (see
        :meth:`add`) unless settled before."""
        future = self._new_future()
        at = (self._clock() + wait) / SLOT  # add, inline: one per follower and delta
        if self._low < at <= self._high:
            self._last.append(future)
        else:
            self._add_at(at, future)
        return future

    def _add_at(self, at: float, future: asyncio.Future[bool]) -> None:
        """Settle ``future`` in the slot ``at`` (the wait's end over :data:`SLOT`) rounds up
        to, which becomes the last slot."""
        slot = math.ceil(at)
        expiring = self._slots.get(slot)
        if expiring is None:
            expiring = self._slots[slot] = []
            self.loop.call_at(slot * SLOT, self._expire, slot)
            self._compact(expiring)
        expiring.append(future)
        self._last, self._low, self._high = expiring, slot - 1, slot

    def _compact(self, new: list[asyncio.Future[bool]]) -> None:
        """Let go of the settled futures of the slots whose look is due (each slot looked at
        every :data:`COMPACT_AFTER` from its first wait on, :data:`COMPACTIONS` times at
        most, while some of its waits are left), and note ``new``'s first look."""
        now = self._clock()
        filling = self._filling
        due = now + COMPACT_AFTER  # every look is due as long after this one: in order
        while filling and filling[0][0] <= now:
            _, futures, left = filling.popleft()
            futures[:] = [future for future in futures if not future.done()]
            if futures and left > 1:
                filling.append((due, futures, left - 1))
        filling.append((due, new, COMPACTIONS))

    def pending(self) -> list[asyncio.Future[bool]]:
        """The futures not settled yet (for tests: none may be left behind)."""
        return [f for futures in self._slots.values() for f in futures if not f.done()]

    def _expire(self, slot: int) -> None:
        if slot == self._high:  # no wait may join a slot whose time is up
            self._low = self._high = -math.inf
        futures = self._slots.pop(slot, [])
        for future in futures:
            if not future.done():
                future.set_result(False)
        futures.clear()  # a list still to be compacted holds nothing meanwhile


def of_loop(deadlines: Deadlines | None, loop: asyncio.AbstractEventLoop) -> Deadlines:
    """``deadlines`` if they are ``loop``'s, else new ones of ``loop`` (a log may serve one
    event loop after another: each keeps its own slots and timers)."""
    if deadlines is None or deadlines.loop is not loop:
        return Deadlines(loop)
    return deadlines
