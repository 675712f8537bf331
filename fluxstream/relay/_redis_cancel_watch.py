"""How a cancel asked anywhere reaches the producers of one process, fast (one Redis).

A cancel is a flag (``{P}:c``) that every write and lease refresh returns, so a producer
learns of it within half a lease whatever happens here. The message published on the reply's
channel (``{P}:x``) only wakes it sooner: one pub/sub connection per log carries every
producer's channel, and one listener task dispatches each message to the callbacks watching
its channel. A message missed while subscribing is covered by looking at the flag once the
subscription took effect. A Redis user refused the channels (an ACL without them, usual on
managed Redis) is told so once and never asked again: its producers go by the flag alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import NoPermissionError

from ._redis_connection import cancel_asked

__all__ = ["CancelWatch", "ignore_result"]

logger = logging.getLogger("fluxstream.relay")


class CancelWatch:
    """One log's cancel subscriptions: a channel per watched reply, one connection, one
    listener.

    :param redis: the log's client (its ``pubsub()`` makes the connection, on first use).
    :param lease: the log's lease in seconds, for the warning that says how soon a cancel
        still arrives without the channels.
    """

    def __init__(self, redis: Any, lease: Callable[[], float]) -> None:
        self._redis = redis
        self._lease = lease
        self._watchers: dict[str, list[Callable[[], None]]] = {}
        self._pubsub: Any = None
        self._listener: asyncio.Task[None] | None = None
        #: Unsubscribes under way, each a task of its own (a watch is let go synchronously).
        #: The close ends them first: one that ran after the connection was closed would
        #: make ``PubSub`` open a new one, which nobody would close.
        self._unsubscribing: set[asyncio.Task[Any]] = set()
        #: Redis refused this log's user the cancel channels: its producers read cancels
        #: from the flag every write returns, and nothing subscribes any more.
        self.channels_refused = False

    async def watch(
        self, channel: str, callback: Callable[[], None], flagged: Callable[[], Awaitable[Any]]
    ) -> None:
        """Call ``callback`` once when a cancel is published on ``channel``, or at once when
        ``flagged()`` (the reply's flag, read after subscribing) says one was asked before;
        on an error the watch is taken back and the error raised."""
        self._watchers.setdefault(channel, []).append(callback)
        try:
            if not self.channels_refused:
                if self._pubsub is None:
                    self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
                await self._pubsub.subscribe(channel)
                if self._listener is None or self._listener.done():
                    self._listener = asyncio.get_running_loop().create_task(self._listen())
            if await flagged():
                self._fire(channel)
        except BaseException:
            self.unwatch(channel, callback)
            raise

    def unwatch(self, channel: str, callback: Callable[[], None]) -> None:
        """Stop calling ``callback``; the last one of a channel unsubscribes it."""
        callbacks = self._watchers.get(channel)
        if callbacks is not None and callback in callbacks:
            callbacks.remove(callback)
        if callbacks is not None and not callbacks:
            del self._watchers[channel]
            self._unsubscribe(channel)

    async def aclose(self) -> None:
        """Stop the listener and the unsubscribes under way, then close the connection (taken
        off first: no unsubscribe starts on it meanwhile)."""
        pubsub, self._pubsub = self._pubsub, None
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(BaseException):
                await self._listener
            self._listener = None
        while self._unsubscribing:  # bounded: none starts without the connection
            task = self._unsubscribing.pop()
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    def _unsubscribe(self, channel: str) -> None:
        if self._pubsub is not None:
            task = asyncio.get_running_loop().create_task(self._pubsub.unsubscribe(channel))
            self._unsubscribing.add(task)
            task.add_done_callback(self._unsubscribed)

    def _unsubscribed(self, task: asyncio.Task[Any]) -> None:
        self._unsubscribing.discard(task)
        ignore_result(task)

    def _fire(self, channel: str) -> None:
        callbacks = self._watchers.pop(channel, [])
        if callbacks:  # a cancel is once per reply: nothing is left to watch on its channel
            self._unsubscribe(channel)
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a producer's cancel must not stop the others
                logger.exception("relay: cancel callback failed")

    async def _listen(self) -> None:
        """The listener task: dispatches cancels to this process's producers."""
        while self._pubsub is not None:
            try:
                if not self._pubsub.subscribed:
                    await asyncio.sleep(0.05)
                    continue
                message = await self._pubsub.get_message(timeout=1.0)
            except asyncio.CancelledError:
                raise
            except NoPermissionError:  # an ACL without the channels: no use asking again
                await self._refuse_channels()
                return
            except Exception as exc:  # the flag on every write still carries the cancel
                if cancel_asked():  # a cancel lost in the failure (see cancel_asked)
                    raise asyncio.CancelledError from exc
                logger.warning("relay: cancel listener: %s: %s", type(exc).__name__, exc)
                await asyncio.sleep(0.5)
                continue
            if message and message.get("type") == "message":
                channel = message["channel"]
                if isinstance(channel, bytes):
                    channel = channel.decode()
                self._fire(channel)

    async def _refuse_channels(self) -> None:
        """Redis refused the subscription (this user may not use the cancel channels): say so
        once and subscribe no more. Cancels still reach this log's producers, through the
        flag each write and lease refresh returns."""
        self.channels_refused = True
        logger.warning(
            "relay: this Redis user may not subscribe to the cancel channels: a cancel reaches"
            " a producer of this log with its next write, within %g s", self._lease() / 2,
        )
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()


def ignore_result(task: asyncio.Task[Any]) -> None:
    """A done callback for a task nobody may await: its exception counts as retrieved (else
    asyncio logs "Task exception was never retrieved" when it is collected)."""
    if not task.cancelled():
        task.exception()
