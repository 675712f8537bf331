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


class Deadlines:
    """Futures of ``loop`` settled ``False`` when their time is up (rounded up to
    :data:`SLOT`); a future settled otherwise before then is left as it is. One per event
    loop: the slots are the loop's own, settled by its own timers."""

    __slots__ = ("_clock", "_new_future", "_slots", "loop")

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

    def add(self, wait: float, future: asyncio.Future[bool]) -> None:
        """Settle ``future`` ``False`` after ``wait`` seconds (or up to :data:`SLOT` more)."""
        slot = math.ceil((self._clock() + wait) / SLOT)
        expiring = self._slots.get(slot)
        if expiring is None:
            expiring = self._slots[slot] = []
            self.loop.call_at(slot * SLOT, self._expire, slot)
        expiring.append(future)

    def future(self, wait: float) -> asyncio.Future[Any]:
        """A new future of the loop, settled ``False`` after ``wait`` seconds (see
        :meth:`add`) unless settled before."""
        future = self._new_future()
        self.add(wait, future)
        return future

    def pending(self) -> list[asyncio.Future[bool]]:
        """The futures not settled yet (for tests: none may be left behind)."""
        return [f for futures in self._slots.values() for f in futures if not f.done()]

    def _expire(self, slot: int) -> None:
        for future in self._slots.pop(slot, ()):
            if not future.done():
                future.set_result(False)


def of_loop(deadlines: Deadlines | None, loop: asyncio.AbstractEventLoop) -> Deadlines:
    """``deadlines`` if they are ``loop``'s, else new ones of ``loop`` (a log may serve one
    event loop after another: each keeps its own slots and timers)."""
    if deadlines is None or deadlines.loop is not loop:
        return Deadlines(loop)
    return deadlines
