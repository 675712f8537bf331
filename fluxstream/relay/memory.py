"""``MemoryReplyLog``: the default reply log, in the process's memory, with no server at all.

It relays a reply to any number of followers in the same process (tasks of one web worker,
say), with the same positions, cancel and lease semantics as the Redis log, on asyncio and
trio alike (only :mod:`anyio` primitives). It does not survive the process: that is what
:class:`~fluxstream.relay.RedisReplyLog` is for.

Memory is bounded: an ended reply is forgotten ``ttl`` seconds after its end (an unended one
whose producer vanished, ``ttl`` after its lease lapsed), and at most ``max_replies`` are kept
(the oldest of those go first).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from .._events import Event
from .._io.tasks import on_asyncio
from ..errors import RelayKeyError, RelayLeaseLostError, show_key
from ._deadlines import Deadlines, of_loop
from .codec import Entry, relayed
from .log import LogState, ReplyLog

__all__ = ["MemoryReplyLog"]


@dataclass
class _Reply:
    base: dict[str, Any]
    entries: list[Entry] = field(default_factory=list)
    token: dict[str, Any] | None = None
    owner: str | None = None
    lease_until: float = 0.0
    ended_at: float | None = None
    cancel_requested: bool = False
    #: Set at the next change, for the followers waiting in ``_read`` (made when one waits:
    #: followers on asyncio wait on ``waiting`` instead).
    changed: anyio.Event | None = None
    watchers: list[Callable[[], None]] = field(default_factory=list)
    #: Followers waiting on asyncio without a cancel scope (see :class:`_ReplyTail`).
    waiting: list[asyncio.Future[bool]] = field(default_factory=list)

    def lease_alive(self, now: float) -> bool:
        return self.owner is not None and now < self.lease_until

    def notify(self) -> None:
        if self.changed is not None:
            self.changed.set()
            self.changed = None
        if self.waiting:
            waiting, self.waiting = self.waiting, []
            for future in waiting:
                if not future.done():
                    future.set_result(True)


class MemoryReplyLog(ReplyLog):
    """An in-process :class:`~fluxstream.relay.ReplyLog` (see the module docstring)."""

    def __init__(
        self,
        *,
        ttl: float = 3600.0,
        max_replies: int = 10_000,
        lease: float = 5.0,
        frame: float = 0.016,
        token_interval: float = 1.0,
    ) -> None:
        super().__init__(lease=lease, frame=frame, token_interval=token_interval)
        self.ttl = ttl
        self.max_replies = max_replies
        self._replies: dict[str, _Reply] = {}
        #: Followers' time-outs on asyncio, for the loop they run on (see :class:`_ReplyTail`).
        self._deadlines: Deadlines | None = None

    def __repr__(self) -> str:
        return f"<MemoryReplyLog replies={len(self._replies)}>"

    def _get(self, key: str) -> _Reply | None:
        reply = self._replies.get(key)
        if reply is None:
            return None
        now = time.monotonic()
        since = _quiet_since(reply, now)
        if since is not None and now - since > self.ttl:
            del self._replies[key]
            return None
        return reply

    def _evict(self) -> None:
        """Forget replies ``ttl`` after they went quiet, and the oldest quiet ones beyond
        ``max_replies``. Quiet: ended, or unended with a lapsed lease (a producer that
        vanished without an end, which only a follower would otherwise have ended)."""
        now = time.monotonic()
        quiet: list[tuple[float, str]] = []
        for key, reply in list(self._replies.items()):
            since = _quiet_since(reply, now)
            if since is None:
                continue
            if now - since > self.ttl:
                del self._replies[key]
            else:
                quiet.append((since, key))
        if len(self._replies) < self.max_replies:
            return
        quiet.sort()
        for _, key in quiet[: len(self._replies) - self.max_replies + 1]:
            del self._replies[key]

    def _owned(self, key: str, owner: str) -> _Reply:
        reply = self._get(key)
        if reply is None or reply.owner != owner or not reply.lease_alive(time.monotonic()):
            raise RelayLeaseLostError(f"the lease of {show_key(key)} is no longer this producer's")
        return reply

    # ------------------------------------------------------------------ primitives

    async def _create(self, key: str, owner: str, base: dict[str, Any]) -> None:
        if self._get(key) is not None:
            raise RelayKeyError(f"a reply is already stored under key {show_key(key)}")
        self._evict()
        self._replies[key] = _Reply(
            base=base, owner=owner, lease_until=time.monotonic() + self.lease
        )

    async def _append(
        self, key: str, owner: str, entry: Entry, *, token: dict[str, Any] | None, final: bool
    ) -> bool:
        reply = self._owned(key, owner)
        relayed(entry)  # its followed items, made once here: each follower takes them as made
        reply.entries.append(entry)
        if token is not None:
            reply.token = token
        if final:
            reply.owner = None
            reply.ended_at = time.monotonic()
        else:
            reply.lease_until = time.monotonic() + self.lease
        reply.notify()
        return reply.cancel_requested

    async def _refresh(self, key: str, owner: str) -> bool:
        reply = self._owned(key, owner)
        reply.lease_until = time.monotonic() + self.lease
        return reply.cancel_requested

    async def _release(self, key: str, owner: str) -> None:
        reply = self._get(key)
        if reply is not None and reply.owner == owner:
            reply.owner = None
            reply.notify()

    async def _read(self, key: str, after: int, wait: float) -> list[Entry]:
        reply = self._get(key)
        if reply is None:
            return []
        if len(reply.entries) <= after and wait > 0:
            changed = reply.changed
            if changed is None:
                changed = reply.changed = anyio.Event()
            with anyio.move_on_after(wait):
                await changed.wait()
        return reply.entries[after:]

    def _tail(self, key: str) -> _ReplyTail | None:
        """On asyncio, a follower waits on a future (its time-out one timer per slot, shared:
        :mod:`~fluxstream.relay._deadlines`), where ``_read`` enters a cancel scope per wait,
        about half of a follower's CPU per delta. On trio, ``_read`` as it is."""
        return _ReplyTail(self, key) if on_asyncio() else None

    async def _state(self, key: str) -> LogState:
        reply = self._get(key)
        if reply is None:
            return LogState(exists=False, last=0, ended=False, lease_alive=False)
        return LogState(
            exists=True,
            last=len(reply.entries),
            ended=reply.ended_at is not None,
            lease_alive=reply.lease_alive(time.monotonic()),
            cancelled=reply.cancel_requested,
        )

    async def _meta(self, key: str) -> dict[str, Any]:
        reply = self._get(key)
        if reply is None:
            return {}
        return {"base": reply.base, "token": reply.token}

    async def _end_unowned(
        self, key: str, entry_events: list[Event], end: dict[str, Any]
    ) -> bool:
        reply = self._get(key)
        if reply is None or reply.ended_at is not None:
            return False
        if reply.lease_alive(time.monotonic()):
            return False
        reply.owner = None
        reply.entries.append(Entry(len(reply.entries) + 1, tuple(entry_events), end))
        reply.ended_at = time.monotonic()
        reply.notify()
        return True

    async def _acquire(self, key: str, owner: str) -> int | None:
        reply = self._get(key)
        if reply is None or reply.ended_at is not None or reply.cancel_requested:
            return None
        now = time.monotonic()
        if reply.lease_alive(now):
            return None
        reply.owner = owner
        reply.lease_until = now + self.lease
        return len(reply.entries)

    async def _request_cancel(self, key: str) -> None:
        reply = self._get(key)
        if reply is None or reply.ended_at is not None:
            return
        reply.cancel_requested = True
        watchers, reply.watchers = reply.watchers, []
        for callback in watchers:
            callback()

    async def _watch_cancel(self, key: str, callback: Callable[[], None]) -> Callable[[], None]:
        reply = self._get(key)
        if reply is None:
            return _nothing
        if reply.cancel_requested:
            callback()
            return _nothing
        reply.watchers.append(callback)

        def stop() -> None:
            if callback in reply.watchers:
                reply.watchers.remove(callback)

        return stop


class _ReplyTail:
    """A follower's :class:`~fluxstream.relay.log.Tail` of one reply, on asyncio: what
    ``_read`` gives, its waits on a future rather than in a cancel scope."""

    __slots__ = ("_key", "_log")

    def __init__(self, log: MemoryReplyLog, key: str) -> None:
        self._log = log
        self._key = key

    def _reply(self) -> _Reply | None:
        """What ``_get`` gives, without its look at the time of a live reply (one whose
        producer's lease runs: never expired)."""
        reply = self._log._replies.get(self._key)
        if reply is not None and reply.owner is not None and (
            time.monotonic() < reply.lease_until
        ):
            return reply
        return self._log._get(self._key)

    def known(self, after: int) -> list[Entry] | None:
        reply = self._reply()
        if reply is None or len(reply.entries) <= after:
            return None
        return reply.entries[after:]

    def next(self, after: int, wait: float) -> list[Entry] | asyncio.Future[bool] | None:
        reply = self._reply()
        if reply is None:
            return None  # ``_read`` says it is gone
        if len(reply.entries) > after:
            return reply.entries[after:]
        deadlines = self._log._deadlines = of_loop(
            self._log._deadlines, asyncio.get_running_loop()
        )
        future: asyncio.Future[bool] = deadlines.future(wait)
        reply.waiting.append(future)
        return future

    def unwait(self, waiter: Any) -> None:
        reply = self._log._replies.get(self._key)
        if reply is not None and waiter in reply.waiting:
            reply.waiting.remove(waiter)


def _quiet_since(reply: _Reply, now: float) -> float | None:
    """When ``reply`` went quiet (its end, or its lease's lapse), ``None`` if it is live."""
    if reply.ended_at is not None:
        return reply.ended_at
    if reply.lease_alive(now):
        return None
    return reply.lease_until


def _nothing() -> None:
    return None
