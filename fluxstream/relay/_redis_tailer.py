"""The tailer of :class:`~fluxstream.relay.RedisReplyLog`: one read for every waiting follower
of a process (:class:`Tailer`), on a connection of its own -- of the streams the log's
"written" channel named (:mod:`~fluxstream.relay._redis_written_channel`), or a blocking one
over every watched stream while that channel is not live. It keeps the entries it read,
decoded once, for the followers it wakes. A cluster's tailer
(:mod:`~fluxstream.relay._redis_cluster`) polls instead.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from redis.exceptions import ResponseError

from . import _redis_connection
from ._deadlines import Deadlines
from ._redis_connection import (
    Arg,
    borrow,
    deadline,
    give_back,
    pack,
    round_trip,
)
from ._redis_pipeliner import Pipeliner
from ._redis_written_channel import WrittenNames

__all__ = ["StreamTail", "Tailer"]

logger = logging.getLogger("fluxstream.relay")

_TAIL_BLOCK_MS = 1000
_TAIL_COUNT = 8
#: The least time (seconds) between two reads of the tailer that found entries, per watched
#: stream and at most: an ``XREAD BLOCK`` that blocks costs Redis about three times one that
#: finds entries at once (~450 against ~150 µs over 500 streams), and at a few entries per
#: read a tailer of 500 streams kept a quarter of a core of Redis busy re-blocking. At most
#: 4 ms is added to a delivery (nothing for a handful of streams).
_TAIL_GAP = 0.004
_TAIL_GAP_PER_STREAM = 8e-6
#: Seconds between two reads of every watched stream while the "written" channel is live,
#: whatever messages come meanwhile: an entry a writer appended without naming it (another
#: version of fluxstream in a rolling upgrade, a user refused the channel) arrives within
#: this. Four non-blocking reads a second cost Redis less than one blocking read.
_QUIET = 0.25
#: Seconds a starting tailer waits for its subscription before it reads as before.
_SUBSCRIBED = 0.5
#: Seconds the subscription outlives the tailer's last follower (the next one keeps it).
_KEEP_SUBSCRIBED = 10.0
#: Seconds a stream stays watched after its last waiter woke.
_LINGER = 2.0
#: Decoded entries the tailer keeps per watched stream, at least (followers a little behind
#: read them without a round trip; one further behind reads Redis). Up to twice as many are
#: held before the oldest are dropped: a cut at every entry copied the list each time.
_CACHE = 32
#: Seconds between two looks for streams whose linger ended (a look goes over every
#: watched stream: once per read, it cost more than the read at a hundred streams).
_SWEEP = 0.1

#: The fixed start of the tailer's ``XREAD`` (without the array header ``*6\r\n``).
_XREAD = pack(("XREAD", "COUNT", _TAIL_COUNT, "BLOCK", _TAIL_BLOCK_MS, "STREAMS"))[4:]
#: The same without ``BLOCK`` (the streams a "written" message named: see
#: :mod:`~fluxstream.relay._redis_written_channel`), without its header ``*4\r\n``.
_XREAD_NOW = pack(("XREAD", "COUNT", _TAIL_COUNT, "STREAMS"))[4:]


class Tailer:
    """One ``XREAD BLOCK`` over every stream a follower waits on, on a connection of its own;
    wakes the waiters of a stream when a newer entry appears, and keeps the entries it read
    (decoded once, at least the last :data:`_CACHE` per stream) so that the followers it
    wakes read them without another round trip. A stream added while the read is blocked
    interrupts it (``CLIENT UNBLOCK``) so it is watched at once. A stream stays watched for
    a moment after its last waiter woke (:data:`_LINGER`), so a follower that comes back
    knows, without asking Redis, that nothing newer exists yet.

    With ``written`` (the log's "written" channel, :mod:`~fluxstream.relay._redis_written_channel`)
    and while its subscription is live, the read does not block: it names only the watched
    streams a message named, and between messages the tailer waits on the channel."""

    def __init__(
        self, redis: Any, pipeline: Pipeliner, decode: Callable[[list[Any]], list[Any]],
        written: WrittenNames | None = None,
    ) -> None:
        self._redis = redis
        self._written = written
        #: Streams whose last read returned a full ``COUNT``: read again without a message.
        self._again: set[str] = set()
        #: ``_built`` at the last read of every watched stream (a newly watched one may
        #: have had its message before it was watched), and when the next one is due
        #: (:data:`_QUIET`, whatever messages arrive meanwhile).
        self._read_version = -1
        self._whole_at = 0.0
        self._pipeline = pipeline
        self._decode = decode
        self._latest: dict[str, int] = {}
        self._waiters: dict[str, list[asyncio.Future[Any]]] = {}
        self._linger: dict[str, float] = {}
        #: Per stream: (base, entries): every entry numbered above ``base``, up to latest.
        self._cache: dict[str, tuple[int, list[Any]]] = {}
        #: When the waits end (one timer per slot of time, not one per follower); made on
        #: the loop of the first wait (a log's Redis connections serve one loop).
        self._deadlines: Deadlines | None = None
        #: Stream names as RESP bulk strings (an ``XREAD`` names every watched stream).
        self._names: dict[str, bytes] = {}
        #: The ``XREAD`` of the watched streams, kept between reads and changed where it
        #: changes: a read costs the streams it finds, not every stream it watches. Built
        #: again (:meth:`_build`) when ``_version`` (bumped when the watched streams change)
        #: differs from ``_built``: the streams in order, each one's index, the entry
        #: number asked after and its RESP id, and the command up to the ids.
        self._version = 0
        self._built = -1
        self._order: list[str] = []
        self._index: dict[str, int] = {}
        self._nums: list[int] = []
        self._ids: list[bytes] = []
        self._head = b""
        self._sweep_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._connection: Any = None
        self._client_id: int | None = None
        #: The streams of the read in flight (empty: none is).
        self._blocked_on: dict[str, int] = {}
        self._unblocking = False
        self._closed = False

    def caught_up(self, stream: str, after: int) -> bool:
        """Whether ``stream`` is watched and no entry above ``after`` is known: a read now
        would find nothing, so the follower can wait straight away."""
        latest = self._latest.get(stream)
        return (
            latest is not None and latest <= after
            and (stream in self._waiters or stream in self._linger)
            and self._task is not None and not self._task.done()
        )

    def cached(self, stream: str, after: int) -> list[Any] | None:
        """The entries numbered above ``after`` when the tailer holds all of them (and at
        least one), else ``None`` (read Redis)."""
        held = self._cache.get(stream)
        if held is None or held[0] > after or not held[1] or held[1][-1].number <= after:
            return None
        base, entries = held
        first = after - base  # entries are numbered without a gap: base + 1, base + 2, ...
        if first < len(entries) and entries[first].number == after + 1:
            return entries[first:]
        return entries[bisect.bisect_right(entries, after, key=_number):]

    async def wait(self, stream: str, after: int, wait: float) -> None:
        """Return when an entry above ``after`` is known, or after ``wait`` seconds."""
        future = self.waiter(stream, after, wait)
        if future is None:
            return
        try:
            if await future:
                return  # woken by _wake, which took the stream's waiters: nothing to undo
        except BaseException:
            self._unwait(stream, future)
            raise
        self._unwait(stream, future)

    def next(
        self, stream: str, after: int, wait: float
    ) -> list[Any] | asyncio.Future[Any] | None:
        """A follower's next step without a coroutine of its own (one per delta): the
        entries above ``after`` when they are cached, else a :meth:`waiter` when the
        follower is :meth:`caught_up` (a read now would find nothing), else ``None`` (read
        Redis). A follower at the latest entry of a watched stream gets its waiter made
        here (tests/relay/test_relay_follow_waits.py holds it to :meth:`waiter`)."""
        latest = self._latest.get(stream)
        if latest is None:  # not watched: nothing is cached either
            return None
        if latest > after:  # the cache never holds an entry above the latest known
            return self.cached(stream, after)
        task = self._task
        if task is None or task.done():  # what caught_up checks, inline
            return None
        waiters = self._waiters.get(stream)
        if waiters is None and stream not in self._linger:
            return None
        if latest != after or self._closed:
            return self.waiter(stream, after, wait)
        # What waiter does for a follower at the latest entry of a stream read now (this
        # runs once per delta and follower): its future joins the stream's waiters; the
        # first one back since a wake-up ends the stream's linger.
        loop = asyncio.get_running_loop()
        deadlines = self._deadlines
        if deadlines is None or deadlines.loop is not loop:
            deadlines = self._deadlines = Deadlines(loop)
        future = deadlines.future(wait)
        if waiters is None:
            del self._linger[stream]
            self._waiters[stream] = [future]
        else:
            waiters.append(future)
        blocked = self._blocked_on
        if blocked and stream not in blocked:
            self._interrupt()  # a read is out without this stream: cut it short
        return future

    def waiter(self, stream: str, after: int, wait: float) -> asyncio.Future[Any] | None:
        """A future settled when an entry above ``after`` is known (woken, the waiter taken
        off: the entries the tailer found, or ``True`` when it failed) or after ``wait``
        seconds (``False``); ``None`` if one is known already. A future that ends otherwise
        than woken (its time, a cancel) must be given to :meth:`_unwait`."""
        latest = self._latest.get(stream)
        if latest is not None and latest > after:
            return None
        if latest != after:
            self._set_latest(stream, after)
        loop = asyncio.get_running_loop()
        deadlines = self._deadlines
        if deadlines is None or deadlines.loop is not loop:  # of_loop, inline
            deadlines = self._deadlines = Deadlines(loop)
        future = deadlines.future(wait)
        waiters = self._waiters.get(stream)
        if waiters is None:
            waiters = self._waiters[stream] = []
            if self._linger.pop(stream, None) is None:
                self._version += 1  # newly watched
                if self._written is not None:
                    self._written.poke()
        waiters.append(future)
        task = self._task
        if self._closed:  # no new read: the follower's own read reports the closed log
            future.set_result(False)
        elif task is None or task.done():
            self._task = loop.create_task(self._run())
        elif self._blocked_on and stream not in self._blocked_on:
            self._interrupt()  # a read is out without this stream: cut it short
        return future

    def _unwait(self, stream: str, future: asyncio.Future[Any]) -> None:
        """A wait that ended without a wake-up (its time, the log closed, a cancel): this
        waiter leaves the stream's; the last one starts its linger."""
        waiters = self._waiters.get(stream)
        if waiters is not None:
            if future in waiters:
                waiters.remove(future)
            if not waiters:
                del self._waiters[stream]
                self._linger[stream] = time.monotonic() + _LINGER

    def _wake(self, stream: str, found: list[Any] | None = None) -> None:
        """Wake every follower waiting on ``stream``: with ``found``, the entries a read
        just found (a follower right before them takes them as they are), else ``True``
        (the waiter was taken off, it reads what is known)."""
        futures = self._waiters.pop(stream, None)
        if futures is None:
            return
        # Still watched while the woken followers come back (else the read loop, finding no
        # waiter left, would end and every wake-up would cost a new read and a new task).
        self._linger[stream] = time.monotonic() + _LINGER
        result: list[Any] | bool = True if found is None else found
        for future in futures:
            if not future.done():
                future.set_result(result)

    def _watched(self) -> list[str]:
        self._sweep(time.monotonic())
        return [*self._waiters, *self._linger]

    def _sweep(self, now: float) -> None:
        """Stop watching the streams whose linger ended."""
        self._sweep_at = now + _SWEEP
        for name, until in list(self._linger.items()):
            if until <= now:
                del self._linger[name]
                self._latest.pop(name, None)
                self._cache.pop(name, None)
                self._names.pop(name, None)
                self._version += 1

    def _set_latest(self, stream: str, number: int) -> None:
        """The newest entry known of ``stream`` (what the next read asks after)."""
        self._latest[stream] = number
        at = self._index.get(stream)
        if at is not None:
            self._nums[at] = number
            self._ids[at] = _bulk_id(number)

    def _build(self) -> None:
        """The ``XREAD`` of the streams watched now (see ``_version``)."""
        self._built = self._version
        order = self._order = [*self._waiters, *self._linger]
        self._index = {name: at for at, name in enumerate(order)}
        self._nums = [self._latest.get(name, 0) for name in order]
        self._ids = [_bulk_id(number) for number in self._nums]
        names = self._names
        parts = [b"*%d\r\n%s" % (6 + 2 * len(order), _XREAD)]
        for name in order:
            packed = names.get(name)
            if packed is None:
                data = name.encode()
                packed = names[name] = b"$%d\r\n%s\r\n" % (len(data), data)
            parts.append(packed)
        self._head = b"".join(parts)

    def _interrupt(self) -> None:
        client_id = self._client_id
        if self._unblocking or client_id is None:
            return
        self._unblocking = True

        async def unblock() -> None:
            # The read may not be blocked yet (it is sent on another connection): try again
            # until it was interrupted or it watches every waited-on stream.
            try:
                for _ in range(20):
                    if await self._pipeline.call("CLIENT", "UNBLOCK", client_id):
                        return
                    blocked = self._blocked_on
                    if blocked and all(name in blocked for name in self._watched()):
                        return
                    await asyncio.sleep(0.002)
            except Exception:  # the read ends by its own timeout anyway
                pass
            finally:
                self._unblocking = False

        asyncio.get_running_loop().create_task(unblock())

    async def _own_id(self) -> int | None:
        """The id of the tailer's connection, which ``CLIENT UNBLOCK`` names; ``None`` for a
        user refused ``CLIENT`` (an ACL without it): a stream newly watched while a blocking
        read is out then waits for that read's end (an entry of another watched stream, or
        its block time, a second) -- only while the "written" channel is not live."""
        try:
            return int(await self._command("CLIENT", "ID"))
        except ResponseError as exc:
            logger.info("relay: tailer: CLIENT ID refused (%s): reads are not interrupted", exc)
            return None

    async def _command(self, *args: Arg) -> Any:
        return await self._send(pack(args))

    async def _send(self, command: bytes) -> Any:
        results: list[Any] = []
        # A timer, where wait_for made a task per read.
        async with deadline(_redis_connection.ROUND_TRIP + _TAIL_BLOCK_MS / 1000):
            await round_trip(self._connection, [command], results)
        if isinstance(results[0], Exception):
            raise results[0]
        return results[0]

    async def _run(self) -> None:
        written = self._written
        try:
            if written is not None:
                written.start()
                await written.ready(_SUBSCRIBED)
            while True:
                sent = time.monotonic()
                if sent >= self._sweep_at:
                    self._sweep(sent)
                if self._built != self._version:
                    self._build()
                if not self._order:
                    break
                if self._connection is None:
                    self._connection = await borrow(self._redis)
                    self._client_id = await self._own_id()
                    continue  # streams may have come meanwhile
                if written is not None and written.live:
                    found = await self._read_written(written)
                else:
                    self._blocked_on = self._index
                    asked = dict(zip(self._order, self._nums, strict=True))
                    found = await self._send(self._head + b"".join(self._ids))
                    self._blocked_on = {}
                    self._took(found, asked)
                if found:  # let entries gather: the next read then rarely blocks
                    rest = sent + min(_TAIL_GAP, _TAIL_GAP_PER_STREAM * len(self._order))
                    if rest > time.monotonic():
                        await asyncio.sleep(rest - time.monotonic())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # wake everyone: their own reads report the failure
            await self._failed(exc)
        finally:
            self._blocked_on = {}
            if written is not None:  # nobody is watched: soon no message is worth reading
                written.stop_later(_KEEP_SUBSCRIBED)

    async def _read_written(self, written: WrittenNames) -> Any:
        """One read while the "written" channel is live: without blocking, of the watched
        streams a message named (every watched stream when the subscription just started,
        a stream became watched, or :data:`_QUIET` passed since the last such read, whatever
        messages came meanwhile); with none due, wait for a message instead. Returns the raw
        reply (``None`` when nothing was read)."""
        whole, named = written.take()
        again, self._again = self._again, set()
        index = self._index
        now = time.monotonic()
        if whole or self._read_version != self._built or now >= self._whole_at:
            self._read_version = self._built
            self._whole_at = now + _QUIET
            order = self._order
        else:
            order = [name for name in (named | again if again else named) if name in index]
        if not order:  # until a message, a poke, or the next read of every watched stream
            await written.wait(self._whole_at - now)
            return None
        nums, ids, packed = self._nums, self._ids, self._names
        asked = {name: nums[index[name]] for name in order}
        found = await self._send(b"".join([
            b"*%d\r\n%s" % (4 + 2 * len(order), _XREAD_NOW),
            *[packed[name] for name in order], *[ids[index[name]] for name in order],
        ]))
        self._took(found, asked)
        return found

    def _took(self, found: Any, asked: dict[str, int]) -> None:
        """What an ``XREAD`` reply found (a list in RESP2, a map in RESP3, nothing when the
        block time passed): each stream's entries after the number it was ``asked`` after,
        decoded in one call for the whole reply; a stream that filled the ``COUNT`` is read
        again without a message."""
        if not found:
            return
        streams: list[tuple[str, int]] = []
        raw: list[Any] = []
        for name, items in found.items() if isinstance(found, dict) else found:
            if items:
                streams.append((name.decode() if isinstance(name, bytes) else name, len(items)))
                raw += items
        if not raw:
            return
        entries = self._decode(raw)
        again = self._again
        start = 0
        for name, count in streams:
            end = start + count
            self._found(name, asked[name], entries[start:end])
            if count >= _TAIL_COUNT:  # more may follow
                again.add(name)
            start = end

    async def _failed(self, exc: Exception) -> None:
        """The read failed: wake everyone (their own reads report the failure) and forget
        what was read."""
        logger.warning("relay: tailer: %s: %s", type(exc).__name__, exc)
        await self._drop_connection(broken=True)
        for name in list(self._waiters):
            self._wake(name)
        # Forget everything read: Redis may have lost it (a restart), and a reply made
        # again under the same key starts at entry 1 -- a remembered "latest" above it
        # made its followers skip every wait and re-read Redis in a loop.
        self._cache.clear()
        self._latest.clear()
        self._linger.clear()
        self._names.clear()
        self._version += 1
        await asyncio.sleep(0.05)

    def _found(self, name: str, asked: int, entries: list[Any]) -> None:
        """``entries``: the decoded entries of stream ``name`` right after entry ``asked``.
        Its waiters are woken with them (a follower right at ``asked`` takes them as they
        are, without looking in the cache)."""
        newest = entries[-1].number
        held = self._cache.get(name)
        if held is not None and (held[1][-1].number if held[1] else held[0]) == asked:
            base, kept = held
            kept.extend(entries)  # in place: the cache holds this list already
            stored = True
        else:  # a list of its own: the one given to the waiters must not grow
            base, kept = asked, entries[:]
            stored = False
        if len(kept) > 2 * _CACHE:
            base = kept[-_CACHE - 1].number
            kept = kept[-_CACHE:]
            stored = False
        if not stored:
            self._cache[name] = (base, kept)
        if newest > self._latest.get(name, -1):
            self._set_latest(name, newest)
            self._wake(name, entries)

    async def _drop_connection(self, *, broken: bool) -> None:
        connection, self._connection, self._client_id = self._connection, None, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await give_back(self._redis, connection, broken=broken)

    async def aclose(self) -> None:
        self._closed = True
        if self._written is not None:
            await self._written.aclose()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None
        # A read may still be out on the connection: close it rather than reuse it.
        await self._drop_connection(broken=True)


class StreamTail:
    """One followed stream as the tailer knows it: a follower's
    :class:`~fluxstream.relay.log.Tail` (what ``RedisReplyLog._read`` does, without its
    coroutine, when the entries are cached or the follower is caught up). Its methods are
    the tailer's, the stream bound (``partial``: no call of its own per delta)."""

    __slots__ = ("known", "next", "unwait")

    def __init__(self, tailer: Tailer, stream: str) -> None:
        self.known: Callable[[int], list[Any] | None] = partial(tailer.cached, stream)
        self.next: Callable[[int, float], list[Any] | asyncio.Future[Any] | None] = (
            partial(tailer.next, stream)
        )
        self.unwait: Callable[[Any], None] = partial(tailer._unwait, stream)


def _number(entry: Any) -> int:
    return int(entry.number)


def _bulk_id(number: int) -> bytes:
    """Entry id ``<number>-0`` as a RESP bulk string."""
    data = b"%d-0" % number
    return b"$%d\r\n%s\r\n" % (len(data), data)
