"""Which replies a frame wrote, pushed to every follower process (one Redis, not a cluster).

A follower process's tailer used to keep one ``XREAD BLOCK`` over every stream it watches.
Redis pays for a blocking read over many streams three times: it registers the client on
every key, unregisters it from every key when one of them gets an entry, and runs the read
again (~430 µs per wake-up over a hundred streams against ~60 µs for a read that blocks on
nothing, ``INFO commandstats`` under ``benchmarks/bench_relay.py``). That was the largest
part of Redis's CPU per relayed delta, and since a producer writes every stream of its
process once per frame, the tailer woke once per frame and paid it every time.

Instead the producer's one script call per frame (``WRITES``) also publishes the names of
the streams it appended to on the log's "written" channel, and the tailer reads, without
blocking, just the streams a message named that it watches. Redis publishes one message
per frame to each follower process, and a read costs what it finds.

The message is the names as netstrings without separators (``<length>:<name>``, the length
in bytes), so a key holding any character, a newline included, is named exactly.

The stream itself stays the only record: a message names streams, it carries no entry. A
message lost while the subscription was down costs nothing but time: until the
subscription is confirmed again the tailer reads as before (a blocking read), and when it
is, it reads every watched stream once; in between, a watched stream is read at least four
times a second whatever arrives. A message on the channel from anyone else can only make the
tailer read streams it watches anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from typing import Any

__all__ = ["WrittenNames", "names_of"]

logger = logging.getLogger("fluxstream.relay")

#: Seconds before the first attempt to subscribe again after the subscription failed; each
#: further failure in a row doubles it, up to :data:`_RETRY_MAX` (a Redis that refuses the
#: channel, an ACL without it, is asked twice a minute, not every second).
_RETRY = 1.0
_RETRY_MAX = 30.0
#: Seconds a connection for the subscription may take to come from the pool (to connect).
_CONNECT = 10.0
#: Names held between two reads of the tailer, at most: more means the tailer fell far
#: behind; it then reads every stream it watches instead.
_HELD = 10_000

#: ``asyncio.timeout`` (Python 3.11+), else ``None``.
_timeout: Any = getattr(asyncio, "timeout", None)


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
        #: The last attempt to subscribe failed (a starting tailer then does not wait for it).
        self._failing = False

    def start(self) -> None:
        """Subscribe in the background (again, if the last listener ended)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._listen())

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
            if _timeout is not None:  # a timer, where wait_for makes a task per wait
                async with _timeout(timeout):
                    await self._event.wait()
            else:  # pragma: no cover - Python 3.10
                await asyncio.wait_for(self._event.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def stop(self) -> None:
        """Unsubscribe in the background (the listener closes its connection as it ends)."""
        task, self._task = self._task, None
        self.live = False
        if task is not None:
            task.cancel()

    async def aclose(self) -> None:
        task, self._task = self._task, None
        self.live = False
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _listen(self) -> None:
        """Subscribe, then take messages until cancelled; on a failure, drop back to reading
        without the channel, and subscribe again after :data:`_RETRY` (longer after each
        failure in a row).

        The messages are read on a connection made like the client pool's, parsed by its parser
        (hiredis when installed), not through redis-py's ``PubSub``: that cost ~64 µs per
        message, a tenth of a follower process's CPU at one message per frame."""
        channel = self._channel.encode()
        subscribe = b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(channel), channel)
        pool = self._redis.connection_pool
        delay = _RETRY
        while True:  # ends only when cancelled (stop, aclose); each failure waits `delay`
            # A connection of its own, like the pool's but speaking RESP2 (redis-py 8 speaks
            # RESP3 by default, where messages come as pushes its parser hands elsewhere):
            # a message is then a plain reply, [b"message", channel, data].
            connection: Any = pool.connection_class(**{**pool.connection_kwargs, "protocol": 2})
            try:
                await asyncio.wait_for(connection.connect(), _CONNECT)
                await connection.send_packed_command(subscribe)
                while True:  # one message per pass; ends by an error or a cancel
                    self._got(await connection.read_response(timeout=math.inf))
                    if self.live:
                        delay = _RETRY
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failing = True
                logger.warning("relay: written channel: %s: %s", type(exc).__name__, exc)
            finally:
                if self._task is asyncio.current_task():  # not a listener stopped meanwhile
                    self.live = False
                    self.poke()
                with contextlib.suppress(BaseException):
                    await asyncio.shield(connection.disconnect())
            await asyncio.sleep(delay)
            delay = min(2 * delay, _RETRY_MAX)

    def _got(self, reply: Any) -> None:
        if not isinstance(reply, list) or len(reply) != 3:
            return
        kind = reply[0]
        if kind in (b"subscribe", "subscribe"):  # confirmed: no write goes unnamed now
            self.live = self._task is asyncio.current_task()
            self._failing = False
            self._whole = True
        elif kind in (b"message", "message"):
            data = reply[2]
            try:
                self._names.update(names_of(data.encode() if isinstance(data, str) else data))
            except (ValueError, TypeError, AttributeError, UnicodeDecodeError):
                self._whole = True
            if len(self._names) > _HELD:
                self._names.clear()
                self._whole = True
        else:
            return
        self._event.set()

