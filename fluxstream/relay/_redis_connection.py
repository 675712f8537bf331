"""Talking RESP on a connection of the redis-py client's pool, below everything of
:class:`~fluxstream.relay.RedisReplyLog` that does (the pipeliner, the tailer, the write
channel, the "written" channel's listener and the cluster's ``ASKING``): a connection borrowed
and given back within a deadline, commands packed, one round trip, a stream reply read back,
and the cancel check of a loop that retries on errors.

Commands are packed here (:func:`pack`) rather than by redis-py's general command packer: a
relayed reply costs one ``EVALSHA`` of about fifteen arguments per frame per stream, and
redis-py's packer (which handles every type and buffer size) cost as much CPU as parsing the
upstream delta itself (cProfile, ``benchmarks/bench_relay.py``). Replies are parsed by
redis-py's parser (hiredis when installed) and returned raw: the callers in
:mod:`~fluxstream.relay.redis_log` read them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from redis.exceptions import ResponseError

__all__ = [
    "ROUND_TRIP", "Arg", "RoundTrips", "borrow", "bulk", "cancel_asked", "deadline",
    "entry_number", "give_back", "pack", "round_trip", "xread_streams",
]

#: Seconds one round trip (a batch, a frame's writes, or a blocking read beyond its block
#: time) may take, and taking a connection from the pool too. Read when used, so that a
#: test can shorten it for every user at once.
ROUND_TRIP = 10.0

Arg = bytes | str | int | float


def pack(args: Sequence[Arg]) -> bytes:
    """One command in RESP (an array of bulk strings)."""
    return b"*%d\r\n" % len(args) + b"".join(bulk(arg) for arg in args)


def bulk(arg: Arg) -> bytes:
    """One argument as a RESP bulk string (a command is ``*<count>`` and its arguments: a
    caller that sends many commands differing in a few arguments packs the rest once)."""
    if isinstance(arg, bytes):
        data = arg
    elif isinstance(arg, str):
        data = arg.encode()
    elif isinstance(arg, int):
        data = b"%d" % arg
    else:
        data = repr(arg).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


async def borrow(redis: Any) -> Any:
    """A connection of ``redis``'s pool (redis-py 5.0 wants a command name, 5.3+ none),
    within :data:`ROUND_TRIP` seconds: a new one connects and shakes hands, which a client
    made without timeouts (redis-py's default) would wait for forever on a hung Redis.
    ``TimeoutError`` (an ``OSError``: reported as ``RelayUnavailableError``) after that."""
    pool = redis.connection_pool
    try:
        return await asyncio.wait_for(pool.get_connection(), ROUND_TRIP)
    except TypeError:  # pragma: no cover - redis-py < 5.3
        return await asyncio.wait_for(pool.get_connection("_"), ROUND_TRIP)


async def give_back(redis: Any, connection: Any, *, broken: bool) -> None:
    """Return a borrowed connection; a broken one is closed first (the pool reconnects)."""
    if broken:
        with contextlib.suppress(Exception):
            await connection.disconnect()
    await redis.connection_pool.release(connection)


async def round_trip(connection: Any, commands: list[bytes], results: list[Any]) -> None:
    """Send ``commands`` in one write and append their replies (an error reply as its
    exception) to ``results``."""
    await connection.send_packed_command(b"".join(commands))
    for _ in commands:
        try:
            results.append(await connection.read_response(timeout=math.inf))
        except ResponseError as exc:
            results.append(exc)


def xread_streams(found: Any) -> list[tuple[Any, list[Any]]]:
    """The ``XREAD`` reply as (stream, entries) pairs: a list (RESP2), a map (RESP3), or
    nothing (the block time passed)."""
    if not found:
        return []
    if isinstance(found, dict):
        return list(found.items())
    return [(item[0], item[1]) for item in found]


def entry_number(entry_id: Any) -> int:
    """The entry number of a stream entry id ``<number>-0`` (bytes or text)."""
    if isinstance(entry_id, bytes):
        entry_id = entry_id.decode()
    return int(str(entry_id).partition("-")[0])


def cancel_asked() -> bool:
    """Whether the running task was asked to cancel and has not been (Python 3.11+; ``False``
    before). Python 3.11's ``asyncio.wait_for`` hands back the outcome of an awaitable that
    finished as the cancel came -- a connect refused at once by a Redis that is gone -- and
    the cancel is lost; a loop that retries on errors would then never end, and an event
    loop's end, which cancels each task once and waits for it, waited forever."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is not None and cancelling() > 0


if sys.version_info >= (3, 11):
    deadline = asyncio.timeout  # a timer: no task per round trip (``wait_for`` makes one)
else:  # pragma: no cover - Python 3.10

    @asynccontextmanager
    async def deadline(seconds: float) -> AsyncIterator[None]:
        """``asyncio.timeout`` of Python 3.10: cancels the task at the deadline, which then
        raises ``TimeoutError``."""
        task = asyncio.current_task()
        assert task is not None
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        handle = asyncio.get_running_loop().call_later(seconds, expire)
        try:
            yield
        except asyncio.CancelledError:
            if expired:
                raise TimeoutError from None
            raise
        finally:
            handle.cancel()


class RoundTrips:
    """Round trips of one sender, each failing with ``TimeoutError`` once it is out for
    :data:`ROUND_TRIP` seconds, as under ``asyncio.timeout``, on a timer kept between them.

    ``asyncio.timeout`` makes, schedules and cancels a timer per round trip: about 35k
    instructions, an eighth of a one-write round trip (cachegrind). The kept timer is due
    no later than the round trip out needs; when it fires it fails that round trip if its
    time is up, else it is set again for it (once per bound at most), and it lapses when
    no round trip is out. One round trip at a time (the sender's own rule).
    """

    def __init__(self) -> None:
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: When the round trip out started (loop time; ``None``: none is out), its task,
        #: and whether its time ran out (its task was cancelled for it).
        self._since: float | None = None
        self._task: asyncio.Task[Any] | None = None
        self._expired = False

    async def send(self, connection: Any, commands: list[bytes], results: list[Any]) -> None:
        """:func:`round_trip`, bounded."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        since = self._since = loop.time()
        self._task = task
        if self._timer is None or self._loop is not loop:
            self._loop = loop
            self._timer = loop.call_at(since + ROUND_TRIP, self._check)
        cancelling = _cancelling(task)
        try:
            await round_trip(connection, commands, results)
        except asyncio.CancelledError:
            if self._expired:  # the round trip's time ran out, unless others cancel too
                self._expired = False
                if _uncancel(task) <= cancelling:
                    raise TimeoutError from None
            raise
        finally:
            self._since = self._task = None

    def _check(self) -> None:
        self._timer = None
        since, task, loop = self._since, self._task, self._loop
        if since is None or task is None or loop is None:
            return
        due = since + ROUND_TRIP
        if loop.time() >= due - _SLACK:
            self._expired = True
            task.cancel()
        else:
            self._timer = loop.call_at(due, self._check)

    def close(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()


#: How early a kept timer may fire and still count as the bound's end (the loop runs a
#: timer up to its clock's resolution early).
_SLACK = 0.001


def _cancelling(task: asyncio.Task[Any]) -> int:
    """``task.cancelling()`` (Python 3.11+; 0 before, where no cancel is counted)."""
    cancelling = getattr(task, "cancelling", None)
    return int(cancelling()) if cancelling is not None else 0


def _uncancel(task: asyncio.Task[Any]) -> int:
    """``task.uncancel()`` (Python 3.11+; 0 before)."""
    uncancel = getattr(task, "uncancel", None)
    return int(uncancel()) if uncancel is not None else 0
