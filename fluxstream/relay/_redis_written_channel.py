"""Which replies a frame wrote, pushed to every follower process (one Redis, not a cluster).

A follower process's tailer used to keep one ``XREAD BLOCK`` over every stream it watches.
Redis pays for a blocking read over many streams three times: it registers the client on
every key, unregisters it from every key when one of them gets an entry, and runs the read
again: ~430 µs per wake-up over a hundred streams under ``benchmarks/bench_relay.py``
(``INFO commandstats``), where a non-blocking read of them costs 49-135 µs by how many have
an entry (``benchmarks/bench_redis_reads.py``). Since a producer writes every stream of its
process once per frame, the tailer woke once per frame and paid it every time: about 40% of
Redis's CPU per relayed delta.

Instead the producer's one script call per frame (``WRITES``) also publishes the names of
the streams it appended to on the log's "written" channel, and the tailer reads, without
blocking, just the streams a message named that it watches. Redis publishes one message
per frame to each follower process, and a read costs what it finds.

The message is the names as netstrings without separators (``<length>:<name>``, the length
in bytes), so a key holding any character, a newline included, is named exactly.

The stream itself stays the only record: a message names streams, it carries no entry. A
message lost while the subscription was down costs nothing but time: until the
subscription is confirmed again the tailer reads as before (a blocking read), and when it
is, it reads every watched stream once; while it is live, every watched stream is read four
times a second whatever messages come, so an entry nobody named (a producer of an earlier
version, a user refused the channel) waits at most a quarter second. A message on the
channel from anyone else can only make the tailer read streams it watches anyway.

Every follower process receives every frame's message of every producer of the log (P
producers, F follower processes: P x F messages per frame time), ~20 µs each to read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

from redis.exceptions import ConnectionError

from ._redis_connection import cancel_asked, deadline

__all__ = ["WrittenNames", "message_of", "names_of"]

logger = logging.getLogger("fluxstream.relay")

#: Seconds before the first attempt to subscribe again after the subscription failed; each
#: further failure in a row doubles it, up to :data:`_RETRY_MAX` (a Redis that refuses the
#: channel, an ACL without it, is asked twice a minute, not every second).
_RETRY = 1.0
_RETRY_MAX = 30.0
#: Seconds the subscription's connection may take to connect.
_CONNECT = 10.0
#: Seconds of silence on the subscription before a ``PING`` (and then before giving it up).
_IDLE = 15.0
_PING = b"*1\r\n$4\r\nPING\r\n"
#: Names held between two reads of the tailer, at most: more means the tailer fell far
#: behind; it then reads every stream it watches instead.
_HELD = 10_000

def message_of(names: Iterable[str]) -> bytes:
    """A "written" message naming ``names`` (what the frame's script publishes; for a writer
    of the log's streams that is not a :class:`~fluxstream.relay.RedisReplyLog`)."""
    return b"".join(b"%d:%s" % (len(data), data) for data in (name.encode() for name in names))


def names_of(data: bytes) -> list[str]:
    """The stream names of a "written" message; :class:`ValueError` if it is malformed."""
    names: list[str] = []
    at, size = 0, len(data)
    while at < size:  # every pass moves past one name (at least two bytes)
        colon = data.index(b":", at)
        length = int(data[at:colon])
        start = colon + 1
        end = start + length
        if length < 0 or end > size:
            raise ValueError("a name runs past the end of the message")
        names.append(data[start:end].decode())
        at = end
    return names


class WrittenNames:
    """A subscription to a log's "written" channel and the stream names it delivered since
    the tailer last took them (see the module docstring).

    :attr:`live` is true once Redis confirmed the subscription and until it fails; while
    it is not, nothing guarantees a message for every write, and the tailer reads as if
    there were no channel.
    """

    def __init__(self, redis: Any, channel: str) -> None:
        self._redis = redis
        self._channel = channel
        self._names: set[str] = set()
        #: Every watched stream must be read: the subscription (re)started, a message was
        #: malformed, or too many names were held.
        self._whole = True
        self._event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.live = False
        #: The last attempt to subscribe failed (a starting tailer then does not wait for it),
        #: and how long the next attempt waits (kept across listeners: a refused channel is
        #: asked again twice a minute, however often a tailer starts).
        self._failing = False
        self._delay = _RETRY
        #: A pending stop (see :meth:`stop_later`).
        self._stopping: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Subscribe in the background (again, if the last listener ended); a pending stop
        is called off."""
        if self._stopping is not None:
            self._stopping.cancel()
            self._stopping = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._listen())

    def stop_later(self, after: float) -> None:
        """Stop in ``after`` seconds unless :meth:`start` comes first: a tailer that ends
        when its last follower leaves, and starts again with the next one, keeps its
        subscription (no connect and subscribe per burst of followers), and a process whose
        followers are gone reads no more messages."""
        if self._task is not None and self._stopping is None:
            self._stopping = asyncio.get_running_loop().call_later(after, self.stop)

    def take(self) -> tuple[bool, set[str]]:
        """(read every watched stream, the names delivered) since the last call, and clear
        the signal first: a message that arrives while the caller reads signals again."""
        self._event.clear()
        whole, self._whole = self._whole, False
        names, self._names = self._names, set()
        return whole, names

    def poke(self) -> None:
        """Wake the waiting tailer (a stream is newly watched, or the subscription changed)."""
        self._event.set()

    async def ready(self, timeout: float) -> bool:
        """Wait until the subscription is live, at most ``timeout`` seconds (a tailer that
        starts reads without blocking from its first read)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (not self.live and not self._failing
               and self._task is not None and not self._task.done()):
            left = deadline - loop.time()  # each pass waits on a message or the deadline
            if left <= 0:
                break
            self._event.clear()
            await self.wait(left)
        return self.live

    async def wait(self, timeout: float) -> bool:
        """Wait for a message or a poke, at most ``timeout`` seconds; ``False`` if none came
        (the tailer then reads every stream it watches)."""
        if self._event.is_set():
            return True
        try:
            async with deadline(timeout):  # a timer, where wait_for makes a task per wait
                await self._event.wait()
        except TimeoutError:
            return False
        return True

    def stop(self) -> asyncio.Task[None] | None:
        """Unsubscribe in the background (the listener closes its connection as it ends);
        returns the listener cancelled, if there was one."""
        if self._stopping is not None:
            self._stopping.cancel()
            self._stopping = None
        task, self._task = self._task, None
        self.live = False
        if task is not None:
            task.cancel()
        return task

    async def aclose(self) -> None:
        task = self.stop()
        if task is not None:
            with contextlib.suppress(BaseException):
                await task

    async def _listen(self) -> None:
        """Subscribe, then take messages until cancelled; on a failure, drop back to reading
        without the channel, and subscribe again after a delay that doubles with each failure
        in a row (:data:`_RETRY` to :data:`_RETRY_MAX`).

        The messages are read on a connection made like the client pool's, parsed by its
        parser (hiredis when installed), not through redis-py's ``PubSub``: that cost ~64 µs
        per message, a tenth of a follower process's CPU at one message per frame. A
        connection silent for :data:`_IDLE` is asked a ``PING``; one that does not answer
        within as long again is given up (a half-open connection behind a NAT would
        otherwise be "live" forever)."""
        channel = self._channel.encode()
        subscribe = b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(channel), channel)
        while True:  # ends only when cancelled (stop, aclose); each failure waits a delay
            connection: Any = None
            try:
                connection = self._connection()
                await asyncio.wait_for(connection.connect(), _CONNECT)
                await connection.send_packed_command(subscribe, check_health=False)
                pinged = False
                while True:  # one reply per pass; ends by an error, a silence or a cancel
                    reply = await connection.read_response(timeout=_IDLE)
                    if reply is not None:
                        pinged = False
                        self._got(reply)
                    elif pinged:
                        raise ConnectionError("no answer to PING on the written channel")
                    else:
                        await connection.send_packed_command(_PING, check_health=False)
                        pinged = True
            except Exception as exc:
                if cancel_asked():  # the cancel came with this failure: end, as asked
                    raise asyncio.CancelledError from exc
                self._failing = True
                level = logging.WARNING if self._delay == _RETRY else logging.DEBUG
                logger.log(level, "relay: written channel: %s: %s", type(exc).__name__, exc)
            finally:
                if self._task is asyncio.current_task():  # not a listener stopped meanwhile
                    self.live = False
                    self.poke()
                if connection is not None:  # a cancel while it closes still ends the task
                    with contextlib.suppress(Exception):
                        await asyncio.shield(connection.disconnect())
            if self._task is not asyncio.current_task():
                return
            await asyncio.sleep(self._delay)
            self._delay = min(2 * self._delay, _RETRY_MAX)

    def _connection(self) -> Any:
        """A connection like the pool's, but RESP2 (redis-py 8 speaks RESP3 by default, where
        messages come as pushes its parser hands elsewhere: in RESP2 a message is a plain
        reply, ``[b"message", channel, data]``), bytes (a foreign message need not be
        UTF-8), and without the options that need RESP3 or a health check of its own."""
        pool = self._redis.connection_pool
        options = {
            name: value for name, value in pool.connection_kwargs.items()
            if not name.startswith("maint_notifications")
        }
        options.update(protocol=2, decode_responses=False, health_check_interval=0)
        return pool.connection_class(**options)

    def _got(self, reply: Any) -> None:
        if not isinstance(reply, list) or len(reply) != 3:
            return
        kind = reply[0]
        if kind == b"subscribe":  # confirmed: no write goes unnamed now
            if self._task is asyncio.current_task():
                self.live = True
                self._failing = False
                self._delay = _RETRY
            self._whole = True
        elif kind == b"message":
            try:
                self._names.update(names_of(reply[2]))
            except (ValueError, TypeError, UnicodeDecodeError):
                self._whole = True
            if len(self._names) > _HELD:
                self._names.clear()
                self._whole = True
        else:
            return
        self._event.set()

