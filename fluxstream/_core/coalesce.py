"""Coalescing: join the items that arrive within one interval, generic over what is joined.

``ReplyStream.text(coalesce=0.016)`` joins text deltas per screen frame; ``objects()`` and a
relay need the same pacing for other items. Two parts:

* :class:`Pacer` (sans-IO): the rule. The first item goes out at once; after that at most one
  batch per interval, and nothing is held longer than one interval waiting for more.
* :class:`Coalesced`: drives a :class:`Source` by that rule, as an async iterator of joined
  batches. It is a plain iterator object, not an async generator, so breaking out of an
  ``async for`` leaves no suspended generator (and no task) behind to be finalized later.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, Protocol, TypeVar

__all__ = ["Coalesced", "FuncSource", "Pacer", "Picked", "Source"]

E = TypeVar("E")
E_co = TypeVar("E_co", covariant=True)
T = TypeVar("T")
U = TypeVar("U")


class Pacer(Generic[T]):
    """When to emit a batch of ``T`` (sans-IO: ``now`` is passed in)."""

    def __init__(self, interval: float) -> None:
        if interval <= 0:
            raise ValueError("coalesce must be a positive number of seconds")
        self.interval = interval
        self.pending: list[T] = []
        #: When the current frame ends; ``None`` until the first batch went out.
        self.frame_end: float | None = None

    def add(self, item: T, now: float) -> list[T] | None:
        """Take ``item``; a batch to emit now (the first item, or the frame is over)."""
        self.pending.append(item)
        if self.frame_end is None or now >= self.frame_end:
            return self.flush(now)
        return None

    def wait(self, now: float) -> float | None:
        """Seconds more items may be awaited before the pending batch is due (``None``:
        nothing pending, wait as long as it takes)."""
        if not self.pending:
            return None
        return 0.0 if self.frame_end is None else self.frame_end - now

    def flush(self, now: float) -> list[T]:
        """The pending batch; a new frame starts."""
        batch, self.pending = self.pending, []
        self.frame_end = now + self.interval
        return batch


class Source(Protocol[E_co]):
    """What :class:`Coalesced` reads: an async iterator that can tell whether an item is
    ready without waiting, and wait for one with a deadline that interrupts only the wait."""

    async def __anext__(self) -> E_co: ...

    def ready(self) -> bool:
        """An item (or the end) can be had without waiting."""
        ...

    def ready_within(self, seconds: float) -> Awaitable[bool]:
        """Whether an item (or the end) is ready within ``seconds``."""
        ...


class FuncSource(Generic[E]):
    """A :class:`Source` made of three functions (the owner keeps its internals private)."""

    def __init__(
        self,
        next: Callable[[], Awaitable[E]],
        ready: Callable[[], bool],
        ready_within: Callable[[float], Awaitable[bool]],
    ) -> None:
        self._next = next
        self.ready = ready
        self.ready_within = ready_within

    async def __anext__(self) -> E:
        return await self._next()


class Picked(Generic[E, T]):
    """The items of ``source`` that ``pick`` keeps, one by one (no coalescing), as a plain
    iterator object: like :class:`Coalesced`, nothing is left suspended after a ``break``."""

    def __init__(self, source: AsyncIterator[E], pick: Callable[[E], T | None]) -> None:
        self._source = source
        self._pick = pick

    def __aiter__(self) -> Picked[E, T]:
        return self

    async def __anext__(self) -> T:
        while True:
            picked = self._pick(await self._source.__anext__())
            if picked is not None:
                return picked

    async def aclose(self) -> None:
        """As an async generator's ``aclose``: nothing to release (the source owns it)."""


class Coalesced(Generic[E, T, U]):
    """Items of ``source`` that ``pick`` keeps (``None``: skip), joined per ``interval``.

    :param join: turns one batch into what is yielded (``"".join`` for text).
    """

    def __init__(
        self,
        source: Source[E],
        interval: float,
        pick: Callable[[E], T | None],
        join: Callable[[list[T]], U],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._pacer: Pacer[T] = Pacer(interval)
        self._pick = pick
        self._join = join
        self._clock = clock
        self._ended = False
        #: The error that ended the source while items were held: raised after they are.
        self._error: Exception | None = None

    def __aiter__(self) -> Coalesced[E, T, U]:
        return self

    async def __anext__(self) -> U:
        source, pacer, clock = self._source, self._pacer, self._clock
        error = self._error
        if error is not None and not pacer.pending:
            self._error = None
            raise error
        while not self._ended:
            wait = pacer.wait(clock())
            if (
                wait is not None
                and not source.ready()
                and (wait <= 0 or not await source.ready_within(wait))
            ):
                return self._join(pacer.flush(clock()))
            try:
                item = await source.__anext__()
            except StopAsyncIteration:
                self._ended = True
                break
            except Exception as exc:  # the stream's error: what is held comes first
                if not pacer.pending:
                    raise
                self._ended = True
                self._error = exc
                break
            picked = self._pick(item)
            if picked is not None:
                batch = pacer.add(picked, clock())
                if batch is not None:
                    return self._join(batch)
        if pacer.pending:
            return self._join(pacer.flush(clock()))
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop early (as an async generator's ``aclose``): nothing more is read."""
        self._ended = True
        self._error = None
        self._pacer.pending.clear()
