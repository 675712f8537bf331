"""Connection economy of :class:`~fluxstream.relay.RedisReplyLog`: commands pipelined across
tasks, and one blocking tail read for every waiting follower (redis-py asyncio client)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from ..errors import RelayError

__all__ = ["Pipeliner", "Tailer", "entry_number", "ignore_result"]

logger = logging.getLogger("fluxstream.relay")

_BATCH = 1000
_TAIL_BLOCK_MS = 1000
_TAIL_COUNT = 8
#: Seconds a stream stays watched after its last waiter woke.
_LINGER = 2.0


class Pipeliner:
    """Sends the commands of every task in as few round trips as possible: whatever is asked
    while a pipeline is in flight goes out together in the next one (at most ``_BATCH``).
    One connection at a time, so a log never exhausts its client's pool."""

    def __init__(self, redis: Any) -> None:
        self._redis = redis
        self._queue: list[tuple[str, tuple[Any, ...], dict[str, Any], asyncio.Future[Any]]] = []
        self._task: asyncio.Task[None] | None = None

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append((method, args, kwargs, future))
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[:_BATCH], self._queue[_BATCH:]
            pipe = self._redis.pipeline(transaction=False)
            for method, args, kwargs, _ in batch:
                getattr(pipe, method)(*args, **kwargs)
            try:
                results = await pipe.execute(raise_on_error=False)
            except BaseException as exc:  # connection lost: every caller of this batch fails
                for *_, future in batch:
                    if not future.done():
                        future.set_exception(
                            exc if isinstance(exc, Exception) else RelayError("closed")
                        )
                if not isinstance(exc, Exception):
                    raise
                continue
            finally:
                with contextlib.suppress(Exception):
                    await pipe.reset()
            for (*_, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue
                if isinstance(result, Exception):
                    future.set_exception(result)
                else:
                    future.set_result(result)


class Tailer:
    """One ``XREAD BLOCK`` over every stream a follower waits on, on a connection of its own;
    wakes the waiters of a stream when a newer entry appears. A stream added while the read
    is blocked interrupts it (``CLIENT UNBLOCK``) so it is watched at once. A stream stays
    watched for a moment after its last waiter woke (:data:`_LINGER`), so a follower that
    comes back knows, without asking Redis, that nothing newer exists yet."""

    def __init__(self, redis: Any, pipeline: Pipeliner) -> None:
        self._redis = redis
        self._pipeline = pipeline
        self._latest: dict[str, int] = {}
        self._events: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}
        self._linger: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._client: Any = None
        self._client_id: int | None = None
        self._blocked_on: frozenset[str] = frozenset()
        self._unblocking = False

    def caught_up(self, stream: str, after: int) -> bool:
        """Whether ``stream`` is watched and no entry above ``after`` is known: a read now
        would find nothing, so the follower can wait straight away."""
        latest = self._latest.get(stream)
        return (
            latest is not None and latest <= after
            and (stream in self._waiting or stream in self._linger)
            and self._task is not None and not self._task.done()
        )

    async def wait(self, stream: str, after: int, wait: float) -> None:
        """Return when an entry above ``after`` is known, or after ``wait`` seconds."""
        if self._latest.get(stream, -1) > after:
            return
        self._latest[stream] = max(self._latest.get(stream, after), after)
        event = self._events.setdefault(stream, asyncio.Event())
        self._waiting[stream] = self._waiting.get(stream, 0) + 1
        self._linger.pop(stream, None)
        try:
            if self._task is None or self._task.done():
                self._task = asyncio.get_running_loop().create_task(self._run())
            elif self._blocked_on and stream not in self._blocked_on:
                self._interrupt()  # a read is out without this stream: cut it short
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(event.wait(), wait)
        finally:
            self._waiting[stream] -= 1
            if not self._waiting[stream]:
                del self._waiting[stream]
                self._linger[stream] = time.monotonic() + _LINGER

    def _watched(self) -> list[str]:
        now = time.monotonic()
        for name, until in list(self._linger.items()):
            if until <= now:
                del self._linger[name]
                self._events.pop(name, None)
                self._latest.pop(name, None)
        return [*self._waiting, *self._linger]

    def _interrupt(self) -> None:
        if self._unblocking or self._client_id is None:
            return
        self._unblocking = True

        async def unblock() -> None:
            # The read may not be blocked yet (it is sent on another connection): try again
            # until it was interrupted or it watches every waited-on stream.
            try:
                for _ in range(20):
                    if await self._pipeline.call("client_unblock", self._client_id):
                        return
                    if set(self._watched()) <= self._blocked_on:
                        return
                    await asyncio.sleep(0.002)
            except Exception:  # the read ends by its own timeout anyway
                pass
            finally:
                self._unblocking = False

        asyncio.get_running_loop().create_task(unblock())

    async def _run(self) -> None:
        try:
            while watched := self._watched():
                if self._client is None:
                    self._client = self._redis.client()
                    self._client_id = int(await self._client.client_id())
                streams = {name: f"{self._latest.get(name, 0)}-0" for name in watched}
                self._blocked_on = frozenset(streams)
                found = await self._client.xread(streams, count=_TAIL_COUNT, block=_TAIL_BLOCK_MS)
                self._blocked_on = frozenset()
                for name, items in found or []:
                    name = name.decode() if isinstance(name, bytes) else name
                    if not items:
                        continue
                    newest = entry_number(items[-1][0])
                    if newest > self._latest.get(name, -1):
                        self._latest[name] = newest
                        event = self._events.pop(name, None)
                        if event is not None:
                            event.set()
                        self._events[name] = asyncio.Event()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # wake everyone: their own reads report the failure
            logger.warning("relay: tailer: %s: %s", type(exc).__name__, exc)
            await self._drop_client()
            for name, event in list(self._events.items()):
                event.set()
                self._events[name] = asyncio.Event()
            await asyncio.sleep(0.05)
        finally:
            self._blocked_on = frozenset()

    async def _drop_client(self) -> None:
        client, self._client, self._client_id = self._client, None, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None
        await self._drop_client()


def entry_number(entry_id: Any) -> int:
    if isinstance(entry_id, bytes):
        entry_id = entry_id.decode()
    return int(str(entry_id).partition("-")[0])


def ignore_result(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()
