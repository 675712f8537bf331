"""``RedisReplyLog``: replies relayed across processes and machines, on Redis Streams.

Per content key (Redis Cluster-safe: one hash tag per reply, so its keys share a slot):

* ``{P}:s`` -- a Redis Stream of entries with explicit ids ``N-0`` (N = entry number), field
  ``d`` = the entry's JSON (:func:`~fluxstream.relay.codec.encode_entry`);
* ``{P}:m`` -- a hash: ``base`` (the request, to resume it), ``token`` (the latest resume
  token), ``ended``;
* ``{P}:l`` -- the lease (``SET ... PX``), holding the producer's id;
* ``{P}:c`` -- the cancel flag; a cancel is also published on ``{P}:x``.

``P`` is the prefix plus the content key when the key is plain (letters, digits, ``._-``, at
most 100), else ``#`` plus its SHA-256: braces, colons, spaces, ``*`` or newlines in a key
can never address another reply's keys or break the hash tag.

Every write is a small Lua script, so it is atomic and fenced by the lease (a producer that
lost it cannot write), refreshes the lease and the TTL, stores the token when given and
returns the cancel flag. On one Redis the writes of every stream of a frame are one
``EVALSHA`` together (:data:`~fluxstream.relay._redis_writes.WRITES`: one command, one reply
and one script call per frame, each write still failing alone); on a cluster each write is its
own ``EVALSHA`` (the replies lie in different slots), all in one pipelined round trip.

On one Redis a log uses five connections whatever the number of streams and followers: the
writes of every stream the process records go out together, one round trip per frame, on a
connection the writer keeps (:mod:`fluxstream.relay.writer`,
:class:`~fluxstream.relay._redis_writes.WriteChannel`); the other commands of producers and
followers are *pipelined* together (whatever was asked while the previous round trip was in
flight goes out in one: :mod:`~fluxstream.relay._redis_pipeliner`); one *tailer* connection
reads for every stream that has a waiting follower (:mod:`~fluxstream.relay._redis_tailer`),
keeps the entries it read and wakes those followers, who take them from it (a follower
further behind reads with ``XRANGE``), so a thousand followers never hold a thousand blocked
connections nor re-read what the tailer read; one subscription to the log's "written"
channel tells the tailer which streams a frame appended to, so that it reads just those
without blocking (:mod:`~fluxstream.relay._redis_written_channel`); and one pub/sub
connection carries cancels to producers (the flag that every write returns covers a message
missed while subscribing). On a cluster the writes are pipelined and followers poll
(:mod:`~fluxstream.relay._redis_cluster`). Commands are packed and replies read by
:mod:`~fluxstream.relay._redis_connection` (RESP on the client's pooled connections).

redis-py's asyncio client runs on asyncio only (not trio). Install ``fluxstream[redis]``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_core import to_json

from .._events import Event
from ..errors import (
    RelayError,
    RelayKeyError,
    RelayLeaseLostError,
    RelayUnavailableError,
    one_line,
    show_key,
)
from ._redis import NoPermissionError, RedisError, ResponseError, aioredis
from ._redis_cancel_watch import CancelWatch, ignore_result
from ._redis_cluster import ClusterPipeliner, ClusterTailer, is_cluster
from ._redis_connection import entry_number
from ._redis_pipeliner import Pipeliner
from ._redis_scripts import (
    ACQUIRE,
    APPEND,
    CREATE,
    END_UNOWNED,
    ENTRIES_LOST,
    LEASE_LOST,
    REFRESH,
    RELEASE,
    STATE,
    ScriptCalls,
)
from ._redis_tailer import StreamTail, Tailer
from ._redis_writes import WRITES, WriteChannel, WriteCommands
from ._redis_written_channel import WrittenNames
from .codec import Entry, decode_entries, decode_entry, encode_entry
from .log import LogState, ReplyLog, Write

__all__ = ["RedisReplyLog"]

logger = logging.getLogger("fluxstream.relay")

_PLAIN_KEY = re.compile(r"[A-Za-z0-9._-]{1,100}")
_READ_COUNT = 1000
#: Replies whose Redis key names a log remembers (every write and read needs them).
_KEY_CACHE = 4096
#: The default spacing of the writer's round trips (seconds; see :class:`RedisReplyLog`).
#: A one-write round trip costs the producer about 260k instructions, each further write in
#: it about 45k, and a spacing's pause about 75k: at 5,000 writes/s 2 ms gathers ~10 writes
#: per round trip (~80k a write) where 1 ms gathers ~5 (~105k) and none 1-2 (~200k); 2 ms
#: is an eighth of the default frame, which already holds a stream's writes up to 16 ms.
WRITE_SPACING = 0.002

class RedisReplyLog(ReplyLog):
    """A :class:`~fluxstream.relay.ReplyLog` on Redis (see the module docstring).

    :param redis: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``
        client (used as it is, never closed by the log), or a URL
        (``redis://127.0.0.1:6379/0``, ``unix:///path/redis.sock``) for a client the log
        creates and closes.
    :param cluster: with a URL, make a ``RedisCluster`` client (the URL names any node).
    :param ttl: seconds a reply is kept after its producer's last write or lease refresh
        (a reply is never forgotten under a live producer, however long it is silent).
    :param prefix: the start of every Redis key the log uses.
    :param write_spacing: seconds from the start of one round trip of writes before the next
        may start (see :class:`~fluxstream.relay.ReplyLog`). A write due within that time
        of the last round trip's start waits for it and shares the next round trip with
        every write that became due meanwhile; after a quiet spell a write goes at once.
        So it adds latency (at most this long) only under load, and saves there most of a
        round trip's CPU per write and most of Redis's commands (0: a round trip per loop
        pass with a write due, as before).
    """

    def __init__(
        self,
        redis: Any,
        *,
        ttl: float = 3600.0,
        prefix: str = "fluxstream:relay:",
        lease: float = 5.0,
        frame: float = 0.016,
        token_interval: float = 1.0,
        cluster: bool = False,
        write_spacing: float = WRITE_SPACING,
    ) -> None:
        super().__init__(
            lease=lease, frame=frame, token_interval=token_interval, write_spacing=write_spacing
        )
        if "{" in prefix or "}" in prefix:
            # A brace in the prefix would make its own hash tag: every reply in one slot,
            # or ("{}") the keys of one reply spread over several.
            raise ValueError("the prefix of a RedisReplyLog must not contain { or }")
        if isinstance(redis, str):
            timeouts: dict[str, Any] = {
                "socket_connect_timeout": 5.0, "socket_timeout": max(5.0, 2 * lease),
            }
            if cluster:
                from redis.asyncio.cluster import RedisCluster

                redis = RedisCluster.from_url(redis, **timeouts)
            else:
                redis = aioredis.Redis.from_url(redis, health_check_interval=30, **timeouts)
            self._owns = True
        else:
            self._owns = False
        self._redis: Any = redis
        self.ttl = ttl
        self.prefix = prefix
        #: The scripts, and whether this log's user may load them or call them by SHA1.
        self._scripts = ScriptCalls({
            "create": CREATE, "append": APPEND, "refresh": REFRESH, "release": RELEASE,
            "end": END_UNOWNED, "acquire": ACQUIRE, "state": STATE, "writes": WRITES,
        })
        #: On a cluster, commands are routed by slot and followers poll (see
        #: :mod:`fluxstream.relay._redis_cluster`).
        self.cluster = is_cluster(redis)
        self._pipeline = ClusterPipeliner(redis) if self.cluster else Pipeliner(redis)
        self._key_cache: dict[str, dict[str, str]] = {}
        #: Where a frame's script names the streams it appended to (one Redis; a cluster's
        #: followers poll: :mod:`fluxstream.relay._redis_written_channel`).
        self._written = "" if self.cluster else prefix + "written"
        self._commands = WriteCommands(
            self.keys, self._scripts.shas, lambda: (self.lease, self.ttl), self._written
        )
        #: The writer's round trips (a connection of their own; a cluster routes by slot).
        self._write_channel = (
            None if self.cluster else WriteChannel(redis, self._pipeline.call_packed)
        )
        self._loaded = False
        self._loading: asyncio.Task[None] | None = None
        self._ranges: dict[tuple[str, int], asyncio.Task[list[Entry]]] = {}
        self._tailer: Tailer = (
            ClusterTailer(redis, self._pipeline, _decode_all) if self.cluster
            else Tailer(redis, self._pipeline, _decode_all, WrittenNames(redis, self._written))
        )
        #: Cancels published for this process's producers: one pub/sub connection for all.
        self._cancels = CancelWatch(redis, lambda: self.lease)
        #: Cancel wake-ups (the ``PUBLISH`` after the flag) that Redis refused or that failed:
        #: each cancel still worked, its producer reading the flag with its next write.
        self.wake_ups_failed = 0
        #: Set by :meth:`aclose`: every later command fails (a closed redis-py client would
        #: otherwise open a new connection, which nothing closes any more).
        self._closed = False

    def __repr__(self) -> str:
        return f"<RedisReplyLog prefix={self.prefix!r}>"

    @property
    def redis(self) -> Any:
        return self._redis

    def keys(self, key: str) -> dict[str, str]:
        """The Redis keys of ``key``'s reply (and its cancel channel)."""
        known = self._key_cache.get(key)
        if known is not None:
            return known
        safe = key if _PLAIN_KEY.fullmatch(key) else "#" + hashlib.sha256(key.encode()).hexdigest()
        base = f"{self.prefix}{{{safe}}}"
        names = {
            "stream": base + ":s", "meta": base + ":m", "lease": base + ":l",
            "cancel": base + ":c", "channel": base + ":x",
        }
        if len(self._key_cache) >= _KEY_CACHE:  # bounded: the replies of one moment
            self._key_cache.clear()
        self._key_cache[key] = names
        return names

    async def aclose(self) -> None:
        """Close the log: streams still recorded stop recording (``log_error``), followers
        and later calls get :class:`RelayUnavailableError`, and the connections are closed
        (with the client, when the log made it from a URL)."""
        self._closed = True
        await self._tailer.aclose()
        if self._write_channel is not None:
            await self._write_channel.aclose()
        await self._pipeline.aclose()
        await self._cancels.aclose()
        if self._owns:
            await self._redis.aclose()

    async def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """One script, pipelined with everything else asked meanwhile."""
        self._check_open()
        try:
            [reply] = await self._scripted(
                [self._scripts.call(name, keys, args)], self._pipeline.call_many
            )
        except (RedisError, OSError) as exc:
            raise RelayUnavailableError(f"redis: {type(exc).__name__}: {exc}") from exc
        if isinstance(reply, Exception):
            if self._scripts.unknown(reply):
                raise RelayUnavailableError(f"redis: script {name} cannot be loaded") from reply
            raise RelayUnavailableError(f"redis: {type(reply).__name__}: {reply}") from reply
        return reply

    async def _scripted(
        self, commands: list[Any], send: Callable[[list[Any]], Awaitable[list[Any]]]
    ) -> list[Any]:
        """The replies of the script calls ``commands``, sent by ``send`` (an error reply as
        its exception). A script Redis does not know (a restart, ``SCRIPT FLUSH``, an
        eviction) is loaded again and called once more -- or, for a user refused ``SCRIPT``,
        called once by its text, which caches it; a user refused ``EVALSHA`` calls every
        script by its text from then on (:class:`ScriptCalls`)."""
        scripts = self._scripts
        if not self._loaded:
            await self._load_scripts()
        if scripts.by_text:
            commands = [scripts.with_text(command) for command in commands]
        replies = await send(commands)
        again = [
            at for at, reply in enumerate(replies)
            if scripts.unknown(reply) or scripts.refused_evalsha(reply)
        ]
        if not again:
            return replies
        if any(scripts.refused_evalsha(replies[at]) for at in again):
            if not scripts.by_text:
                logger.info("relay: this Redis user may not run EVALSHA: every script call"
                            " carries the script's text (EVAL)")
            scripts.by_text = True
        elif scripts.loadable:
            self._loaded = False
            await self._load_scripts()
        by_text = scripts.by_text or not scripts.loadable
        redo = [scripts.with_text(commands[at]) if by_text else commands[at] for at in again]
        for at, reply in zip(again, await send(redo), strict=True):
            replies[at] = reply
        return replies

    async def _load_scripts(self) -> None:
        """Load every script in one round trip, however many tasks ask at once. A user
        refused ``SCRIPT`` loads none: each script is then sent by its text the first time
        Redis does not know it (:meth:`_scripted`)."""
        scripts = self._scripts
        if self._loading is None or self._loading.done():
            async def load() -> None:
                if not scripts.loadable:
                    return
                replies = await self._call_many(
                    [("SCRIPT", "LOAD", text) for text in scripts.texts.values()]
                )
                if any(isinstance(reply, NoPermissionError) for reply in replies):
                    scripts.loadable = False
                    logger.info("relay: this Redis user may not run SCRIPT: each script is"
                                " sent by its text (EVAL) once per script cache")
                    return
                for reply in replies:
                    if isinstance(reply, Exception):
                        raise RelayUnavailableError(
                            f"redis: {type(reply).__name__}: {reply}") from reply

            self._loading = asyncio.get_running_loop().create_task(load())
        await asyncio.shield(self._loading)
        self._loaded = True

    def _check_open(self) -> None:
        if self._closed:
            raise RelayUnavailableError("the reply log is closed")

    async def _call(self, *args: Any) -> Any:
        """One command (raw reply) through the pipeliner; backend failures become
        RelayUnavailableError."""
        self._check_open()
        try:
            return await self._pipeline.call(*args)
        except (RedisError, OSError) as exc:
            raise RelayUnavailableError(f"redis: {type(exc).__name__}: {exc}") from exc

    async def _call_many(self, commands: list[Any]) -> list[Any]:
        """Commands in one round trip: their raw replies, an error reply as its exception; a
        failed round trip raises RelayUnavailableError."""
        self._check_open()
        try:
            return await self._pipeline.call_many(commands)
        except (RedisError, OSError) as exc:
            raise RelayUnavailableError(f"redis: {type(exc).__name__}: {exc}") from exc

    @property
    def _lease_ms(self) -> int:
        return max(1, int(self.lease * 1000))

    @property
    def _ttl_ms(self) -> int:
        return max(1, int(self.ttl * 1000))

    # ------------------------------------------------------------------ primitives

    async def _create(self, key: str, owner: str, base: dict[str, Any]) -> None:
        k = self.keys(key)
        made = await self._run(
            "create", [k["stream"], k["meta"], k["lease"], k["cancel"]],
            [json.dumps(base, separators=(",", ":")), owner, self._lease_ms, self._ttl_ms, key],
        )
        if not made:
            raise RelayKeyError(f"a reply is already stored under key {show_key(key)}")

    async def _append(
        self, key: str, owner: str, entry: Entry, *, token: dict[str, Any] | None, final: bool
    ) -> bool:
        k = self.keys(key)
        data = encode_entry(list(entry.events), entry.end)
        token_text = b"" if token is None else to_json(token)
        try:
            result = await self._run(
                "append", [k["stream"], k["meta"], k["lease"], k["cancel"]],
                [owner, self._lease_ms, self._ttl_ms, f"{entry.number}-0", data, token_text,
                 "1" if final else "0"],
            )
        except RelayUnavailableError as exc:
            if isinstance(exc.__cause__, ResponseError) and "XADD" in str(exc.__cause__):
                message = f"entry {entry.number} of {show_key(key)} exists"
                raise RelayLeaseLostError(message) from exc
            raise
        if result == LEASE_LOST:
            raise RelayLeaseLostError(f"the lease of {show_key(key)} is no longer this producer's")
        if result == ENTRIES_LOST:
            raise _entries_lost(key, entry.number)
        return bool(result)

    async def _write_many(self, writes: list[Write]) -> list[bool | Exception]:
        """Every write as one ``EVALSHA`` (:data:`APPEND`, :data:`REFRESH`, :data:`RELEASE`),
        all of them in one pipelined round trip."""
        if self._closed:
            closed = RelayUnavailableError("the reply log is closed")
            return [closed for _ in writes]
        built = self._commands
        if self._write_channel is None:  # a cluster, routed by slot: the arguments, not RESP
            commands: list[Any] = [built.args(write) for write in writes]
            send: Callable[[list[Any]], Awaitable[list[Any]]] = self._pipeline.call_many
        else:  # one script call for the whole frame (:data:`WRITES`)
            commands = [built.batch(writes)]
            send = self._write_channel.send
        try:
            replies = await self._scripted(commands, send)
        except (RedisError, OSError) as exc:
            error = RelayUnavailableError(f"redis: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            return [error for _ in writes]
        except RelayUnavailableError as exc:
            return [exc for _ in writes]
        if self._write_channel is not None:
            replies = _unbatched(replies[0], len(writes))
        return _results(writes, replies)

    async def _refresh(self, key: str, owner: str) -> bool:
        k = self.keys(key)
        result = await self._run(
            "refresh", [k["lease"], k["cancel"], k["stream"], k["meta"]],
            [owner, self._lease_ms, self._ttl_ms],
        )
        if result == LEASE_LOST:
            raise RelayLeaseLostError(f"the lease of {show_key(key)} is no longer this producer's")
        return bool(result)

    async def _release(self, key: str, owner: str) -> None:
        await self._run("release", [self.keys(key)["lease"]], [owner])

    async def _read(self, key: str, after: int, wait: float) -> list[Entry]:
        stream = self.keys(key)["stream"]
        tailer = self._tailer
        if wait > 0 and tailer.caught_up(stream, after):
            await tailer.wait(stream, after, wait)
        entries = tailer.cached(stream, after)
        if entries is None:
            entries = await self._range(stream, after)
        if entries or wait <= 0:
            return entries
        # Caught up: wait for the tailer to see a newer entry (or the poll to end).
        await tailer.wait(stream, after, wait)
        entries = tailer.cached(stream, after)
        return entries if entries is not None else await self._range(stream, after)

    def _tail(self, key: str) -> StreamTail:
        return StreamTail(self._tailer, self.keys(key)["stream"])

    async def _range(self, stream: str, after: int) -> list[Entry]:
        """Entries after ``after``; followers of one reply woken together (same position)
        share one read and one decoding."""
        slot = (stream, after)
        shared = self._ranges.get(slot)
        if shared is None:
            async def read() -> list[Entry]:
                try:
                    raw = await self._call(
                        "XRANGE", stream, f"({after}-0", "+", "COUNT", _READ_COUNT
                    )
                    return _decode_all(raw)
                finally:
                    self._ranges.pop(slot, None)

            shared = self._ranges[slot] = asyncio.get_running_loop().create_task(read())
            shared.add_done_callback(ignore_result)  # every waiter may have gone
        return list(await asyncio.shield(shared))

    async def _state(self, key: str) -> LogState:
        k = self.keys(key)
        exists, last, ended, lease, cancelled = await self._run(
            "state", [k["stream"], k["meta"], k["lease"], k["cancel"]], []
        )
        return LogState(
            exists=bool(exists), last=int(last), ended=bool(ended), lease_alive=bool(lease),
            cancelled=bool(cancelled),
        )

    async def _meta(self, key: str) -> dict[str, Any]:
        raw = await self._call("HMGET", self.keys(key)["meta"], "base", "token")
        return {
            "base": json.loads(raw[0]) if raw[0] else None,
            "token": json.loads(raw[1]) if raw[1] else None,
        }

    async def _end_unowned(
        self, key: str, entry_events: list[Event], end: dict[str, Any]
    ) -> bool:
        k = self.keys(key)
        result = await self._run(
            "end", [k["stream"], k["meta"], k["lease"]],
            [encode_entry(entry_events, end), self._ttl_ms, self._written],
        )
        return bool(result)

    async def _acquire(self, key: str, owner: str) -> int | None:
        k = self.keys(key)
        result = await self._run(
            "acquire", [k["stream"], k["meta"], k["lease"], k["cancel"]], [owner, self._lease_ms]
        )
        return None if result == LEASE_LOST else int(result)

    async def _request_cancel(self, key: str) -> None:
        """The flag is the cancel; the message on the reply's channel only wakes its producer
        sooner. A wake-up Redis refuses (a user without pub/sub channels, usual on managed
        Redis) or that fails is logged and counted, not raised: the producer reads the flag
        with its next write -- a frame after its next event while the model streams, at most
        half a lease while it is silent (a lease refresh is due a third of a lease after the
        last write, and looked for every sixth)."""
        k = self.keys(key)
        await self._call("SET", k["cancel"], "1", "PX", self._ttl_ms)
        try:
            await self._call("PUBLISH", k["channel"], "cancel")
        except RelayUnavailableError as exc:
            self.wake_ups_failed += 1
            # A user refused the channel is refused every time: said loud once, then quieter.
            logger.log(
                logging.WARNING if self.wake_ups_failed == 1 else logging.INFO,
                "relay: the cancel wake-up of %s was not delivered (%s): its producer reads the"
                " flag with its next write, within %g s", show_key(key),
                one_line(str(exc)), self.lease / 2,
            )

    async def _watch_cancel(self, key: str, callback: Callable[[], None]) -> Callable[[], None]:
        self._check_open()
        keys = self.keys(key)
        channel = keys["channel"]
        try:
            # A cancel published before the subscription took effect left its flag.
            flagged = lambda: self._call("EXISTS", keys["cancel"])  # noqa: E731
            await self._cancels.watch(channel, callback, flagged)
        except (RedisError, OSError) as exc:
            raise RelayUnavailableError(f"redis: {type(exc).__name__}: {exc}") from exc

        def stop() -> None:
            self._cancels.unwatch(channel, callback)

        return stop


def _written(write: Write, reply: Any) -> bool | Exception:
    """What one write's reply means: the cancel flag, or the error."""
    if type(reply) is int and reply >= 0:  # done: whether a cancel was requested
        return reply > 0 and not write.release
    if isinstance(reply, ResponseError):
        if write.entry is not None and "XADD" in str(reply):
            error: Exception = RelayLeaseLostError(
                f"entry {write.entry.number} of {show_key(write.key)} exists"
            )
        else:
            error = RelayUnavailableError(f"redis: {type(reply).__name__}: {reply}")
        error.__cause__ = reply
        return error
    if isinstance(reply, Exception):
        return reply
    if reply == LEASE_LOST and not write.release:
        return RelayLeaseLostError(
            f"the lease of {show_key(write.key)} is no longer this producer's"
        )
    if reply == ENTRIES_LOST and write.entry is not None:
        return _entries_lost(write.key, write.entry.number)
    return bool(reply) and not write.release


def _results(writes: list[Write], replies: list[Any]) -> list[bool | Exception]:
    """What each write's reply means (:func:`_written`). Nearly every frame's replies are all
    0 (written, no cancel asked), which :func:`_written` reads as ``False`` whatever the
    write: counted in one pass, with no call per write."""
    count = len(writes)
    if len(replies) == count and replies.count(0) == count:
        return [False] * count
    return [_written(write, reply) for write, reply in zip(writes, replies, strict=True)]


def _unbatched(reply: Any, count: int) -> list[Any]:
    """Each write's reply from the reply of :data:`WRITES` (its count, then one per write);
    an error of the whole call (a script that cannot run) is every write's."""
    if isinstance(reply, Exception):
        return [reply] * count
    if not isinstance(reply, list) or len(reply) != count + 1 or reply[0] != count:
        error = RelayUnavailableError(f"redis: unexpected reply to {count} writes: {reply!r:.200}")
        return [error] * count
    return reply[1:]


def _entries_lost(key: str, number: int) -> RelayUnavailableError:
    """Entries before ``number`` are missing: Redis lost acknowledged writes (a master that
    failed over before its replica had them, a restart without persistence). Appending
    after the gap would hand new followers a reply with a hole."""
    return RelayUnavailableError(
        f"redis lost entries before {number} of {show_key(key)} (a failover or a restart)"
    )


def _decode_all(items: list[Any]) -> list[Entry]:
    """The entries of a raw ``XRANGE`` reply, or of one stream of an ``XREAD`` reply:
    decoded together (:func:`~fluxstream.relay.codec.decode_entries`) when each is what the
    log writes (RESP2, bytes, the one field), else one at a time by :func:`_decode`."""
    numbers: list[int] = []
    datas: list[bytes] = []
    for item in items:
        entry_id, fields = item
        if type(entry_id) is bytes and type(fields) is list and len(fields) == 2 and (
            fields[0] == b"d" and type(fields[1]) is bytes
        ):
            numbers.append(int(entry_id.partition(b"-")[0]))
            datas.append(fields[1])
        else:
            return [_decode(item) for item in items]
    return decode_entries(numbers, datas)


def _decode(item: Any) -> Entry:
    """An entry of a raw ``XRANGE`` / ``XREAD`` reply: ``[id, [field, value, ...]]``."""
    entry_id, fields = item
    if isinstance(entry_id, bytes):
        entry_id = entry_id.decode()
    number = entry_number(entry_id)
    if isinstance(fields, dict):
        pairs = list(fields.items())
    else:
        pairs = list(zip(fields[::2], fields[1::2], strict=True))
    data = next((value for name, value in pairs if name in (b"d", "d")), None)
    if data is None:
        raise RelayError(f"stored entry {entry_id} has no data")
    return decode_entry(number, data)
