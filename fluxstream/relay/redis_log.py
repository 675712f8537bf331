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

Every write is one ``EVALSHA`` of a small Lua script, so it is atomic and fenced by the lease
(a producer that lost it cannot write), refreshes the lease and the TTL, stores the token when
given and returns the cancel flag: one Redis command per frame.

A log uses three connections whatever the number of streams and followers: commands of all
producers and followers are *pipelined* together (whatever was asked while the previous round
trip was in flight goes out in one); one *tailer* connection runs a single ``XREAD BLOCK`` over
every stream that has a waiting follower and wakes those followers, who then read with
``XRANGE`` (so a thousand followers never hold a thousand blocked connections); and one pub/sub
connection carries cancels to producers (the flag that every write returns covers a message
missed while subscribing).

redis-py's asyncio client runs on asyncio only (not trio). Install ``fluxstream[redis]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from ..errors import RelayError, RelayKeyError, RelayLeaseLostError, RelayUnavailableError
from ..events import Event
from .codec import Entry, decode_entry, encode_entry, show_key
from .log import LogState, ReplyLog

try:
    import redis.asyncio as aioredis
    from redis.exceptions import NoScriptError, RedisError, ResponseError
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "RedisReplyLog needs the optional extra: pip install 'fluxstream[redis]'"
    ) from exc

__all__ = ["RedisReplyLog"]

logger = logging.getLogger("fluxstream.relay")

_PLAIN_KEY = re.compile(r"[A-Za-z0-9._-]{1,100}")
_READ_COUNT = 1000
_BATCH = 1000
_TAIL_BLOCK_MS = 1000
_TAIL_COUNT = 8
#: Seconds a stream stays watched after its last waiter woke.
_LINGER = 2.0
_LEASE_LOST = -1

# KEYS: stream, meta, lease, cancel  ARGV: base, owner, lease_ms, ttl_ms, key
_CREATE = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[2], 'base', ARGV[1], 'key', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('DEL', KEYS[1], KEYS[4])
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
return 1
"""

# KEYS: stream, meta, lease, cancel  ARGV: owner, lease_ms, ttl_ms, id, data, token, final
_APPEND = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
redis.call('XADD', KEYS[1], ARGV[4], 'd', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if ARGV[6] ~= '' then redis.call('HSET', KEYS[2], 'token', ARGV[6]) end
if ARGV[7] == '1' then
  redis.call('HSET', KEYS[2], 'ended', '1')
  redis.call('DEL', KEYS[3])
else
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
end
return redis.call('EXISTS', KEYS[4])
"""

# KEYS: lease, cancel  ARGV: owner, lease_ms
_REFRESH = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return redis.call('EXISTS', KEYS[2])
"""

# KEYS: lease  ARGV: owner
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""

# KEYS: stream, meta, lease  ARGV: data, ttl_ms
_END_UNOWNED = """
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
if redis.call('HGET', KEYS[2], 'ended') then return 0 end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local n = 0
if #last > 0 then n = tonumber(string.match(last[1][1], '^(%d+)')) end
redis.call('XADD', KEYS[1], (n + 1) .. '-0', 'd', ARGV[1])
redis.call('HSET', KEYS[2], 'ended', '1')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return n + 1
"""

# KEYS: stream, meta, lease  ARGV: owner, lease_ms
_ACQUIRE = """
if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
if redis.call('HGET', KEYS[2], 'ended') then return -1 end
if redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', ARGV[2]) == false then return -1 end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 0 then return 0 end
return tonumber(string.match(last[1][1], '^(%d+)'))
"""

# KEYS: stream, meta, lease  (no ARGV)
_STATE = """
local exists = redis.call('EXISTS', KEYS[2])
local ended = 0
if redis.call('HGET', KEYS[2], 'ended') then ended = 1 end
local lease = redis.call('EXISTS', KEYS[3])
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local n = 0
if #last > 0 then n = tonumber(string.match(last[1][1], '^(%d+)')) end
return {exists, n, ended, lease}
"""


class RedisReplyLog(ReplyLog):
    """A :class:`~fluxstream.relay.ReplyLog` on Redis (see the module docstring).

    :param redis: a ``redis.asyncio.Redis`` client (used as it is, never closed by the log),
        or a URL (``redis://127.0.0.1:6379/0``, ``unix:///path/redis.sock``) for a client the
        log creates and closes.
    :param ttl: seconds a reply is kept after its last write.
    :param prefix: the start of every Redis key the log uses.
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
    ) -> None:
        super().__init__(lease=lease, frame=frame, token_interval=token_interval)
        if isinstance(redis, str):
            redis = aioredis.Redis.from_url(
                redis, socket_connect_timeout=5.0, socket_timeout=max(5.0, 2 * lease),
                health_check_interval=30,
            )
            self._owns = True
        else:
            self._owns = False
        self._redis: Any = redis
        self.ttl = ttl
        self.prefix = prefix
        self._scripts = {
            "create": _CREATE, "append": _APPEND, "refresh": _REFRESH, "release": _RELEASE,
            "end": _END_UNOWNED, "acquire": _ACQUIRE, "state": _STATE,
        }
        self._shas = {
            name: hashlib.sha1(text.encode()).hexdigest() for name, text in self._scripts.items()
        }
        self._pipeline = _Pipeliner(redis)
        self._loaded = False
        self._loading: asyncio.Task[None] | None = None
        self._ranges: dict[tuple[str, int], asyncio.Task[list[Entry]]] = {}
        self._tailer = _Tailer(redis, self._pipeline)
        # Cancel watch: one pub/sub connection for every producer of this log.
        self._watchers: dict[str, list[Callable[[], None]]] = {}
        self._pubsub: Any = None
        self._listener: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<RedisReplyLog prefix={self.prefix!r}>"

    @property
    def redis(self) -> Any:
        return self._redis

    def keys(self, key: str) -> dict[str, str]:
        """The Redis keys of ``key``'s reply (and its cancel channel)."""
        safe = key if _PLAIN_KEY.fullmatch(key) else "#" + hashlib.sha256(key.encode()).hexdigest()
        base = f"{self.prefix}{{{safe}}}"
        return {
            "stream": base + ":s", "meta": base + ":m", "lease": base + ":l",
            "cancel": base + ":c", "channel": base + ":x",
        }

    async def aclose(self) -> None:
        await self._tailer.aclose()
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(BaseException):
                await self._listener
            self._listener = None
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
            self._pubsub = None
        if self._owns:
            await self._redis.aclose()

    async def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """One script, pipelined with everything else asked meanwhile."""
        if not self._loaded:
            await self._load_scripts()
        try:
            return await self._call("evalsha", self._shas[name], len(keys), *keys, *args)
        except NoScriptError:  # Redis restarted (or SCRIPT FLUSH): load them again, once
            self._loaded = False
            await self._load_scripts()
        try:
            return await self._call("evalsha", self._shas[name], len(keys), *keys, *args)
        except NoScriptError as exc:
            raise RelayUnavailableError(f"redis: script {name} cannot be loaded") from exc

    async def _load_scripts(self) -> None:
        """Load every script in one round trip, however many tasks ask at once."""
        if self._loading is None or self._loading.done():
            async def load() -> None:
                await asyncio.gather(
                    *(self._call("script_load", text) for text in self._scripts.values())
                )

            self._loading = asyncio.get_running_loop().create_task(load())
        await asyncio.shield(self._loading)
        self._loaded = True

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """One command through the pipeliner; backend failures become RelayUnavailableError."""
        try:
            return await self._pipeline.call(method, *args, **kwargs)
        except NoScriptError:
            raise
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
        token_text = "" if token is None else json.dumps(token, separators=(",", ":"))
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
        if result == _LEASE_LOST:
            raise RelayLeaseLostError(f"the lease of {show_key(key)} is no longer this producer's")
        return bool(result)

    async def _refresh(self, key: str, owner: str) -> bool:
        k = self.keys(key)
        result = await self._run("refresh", [k["lease"], k["cancel"]], [owner, self._lease_ms])
        if result == _LEASE_LOST:
            raise RelayLeaseLostError(f"the lease of {show_key(key)} is no longer this producer's")
        return bool(result)

    async def _release(self, key: str, owner: str) -> None:
        await self._run("release", [self.keys(key)["lease"]], [owner])

    async def _read(self, key: str, after: int, wait: float) -> list[Entry]:
        stream = self.keys(key)["stream"]
        if wait > 0 and self._tailer.caught_up(stream, after):
            await self._tailer.wait(stream, after, wait)
        entries = await self._range(stream, after)
        if entries or wait <= 0:
            return entries
        # Caught up: wait for the tailer to see a newer entry (or the poll to end).
        await self._tailer.wait(stream, after, wait)
        return await self._range(stream, after)

    async def _range(self, stream: str, after: int) -> list[Entry]:
        """Entries after ``after``; followers of one reply woken together (same position)
        share one read and one decoding."""
        slot = (stream, after)
        shared = self._ranges.get(slot)
        if shared is None:
            async def read() -> list[Entry]:
                try:
                    raw = await self._call("xrange", stream, min=f"({after}-0", count=_READ_COUNT)
                    return [_decode(item) for item in raw]
                finally:
                    self._ranges.pop(slot, None)

            shared = self._ranges[slot] = asyncio.get_running_loop().create_task(read())
            shared.add_done_callback(_ignore_result)  # every waiter may have gone
        return list(await asyncio.shield(shared))

    async def _state(self, key: str) -> LogState:
        k = self.keys(key)
        exists, last, ended, lease = await self._run(
            "state", [k["stream"], k["meta"], k["lease"]], []
        )
        return LogState(
            exists=bool(exists), last=int(last), ended=bool(ended), lease_alive=bool(lease)
        )

    async def _meta(self, key: str) -> dict[str, Any]:
        raw = await self._call("hmget", self.keys(key)["meta"], ["base", "token"])
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
            [encode_entry(entry_events, end), self._ttl_ms],
        )
        return bool(result)

    async def _acquire(self, key: str, owner: str) -> int | None:
        k = self.keys(key)
        result = await self._run(
            "acquire", [k["stream"], k["meta"], k["lease"]], [owner, self._lease_ms]
        )
        return None if result == _LEASE_LOST else int(result)

    async def _request_cancel(self, key: str) -> None:
        k = self.keys(key)
        await self._call("set", k["cancel"], "1", px=self._ttl_ms)
        await self._call("publish", k["channel"], "cancel")

    async def _watch_cancel(self, key: str, callback: Callable[[], None]) -> Callable[[], None]:
        channel = self.keys(key)["channel"]
        callbacks = self._watchers.setdefault(channel, [])
        callbacks.append(callback)
        try:
            if self._pubsub is None:
                self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            await self._pubsub.subscribe(channel)
            if self._listener is None or self._listener.done():
                self._listener = asyncio.get_running_loop().create_task(self._listen())
            # A cancel published before the subscription took effect left its flag.
            if await self._call("exists", self.keys(key)["cancel"]):
                self._fire(channel)
        except (RedisError, OSError, RelayUnavailableError) as exc:
            self._unwatch(channel, callback)
            if isinstance(exc, RelayUnavailableError):
                raise
            raise RelayUnavailableError(f"redis: {type(exc).__name__}: {exc}") from exc

        def stop() -> None:
            self._unwatch(channel, callback)

        return stop

    def _unwatch(self, channel: str, callback: Callable[[], None]) -> None:
        callbacks = self._watchers.get(channel)
        if callbacks is not None and callback in callbacks:
            callbacks.remove(callback)
        if callbacks is not None and not callbacks:
            del self._watchers[channel]
            if self._pubsub is not None:
                pubsub = self._pubsub
                task = asyncio.get_running_loop().create_task(pubsub.unsubscribe(channel))
                task.add_done_callback(_ignore_result)

    def _fire(self, channel: str) -> None:
        for callback in self._watchers.pop(channel, []):
            try:
                callback()
            except Exception:  # a producer's cancel must not stop the others
                logger.exception("relay: cancel callback failed")

    async def _listen(self) -> None:
        """The log's pub/sub listener task: dispatches cancels to local producers."""
        while self._pubsub is not None:
            try:
                if not self._pubsub.subscribed:
                    await asyncio.sleep(0.05)
                    continue
                message = await self._pubsub.get_message(timeout=1.0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the flag on every write still carries the cancel
                logger.warning("relay: cancel listener: %s: %s", type(exc).__name__, exc)
                await asyncio.sleep(0.5)
                continue
            if message and message.get("type") == "message":
                channel = message["channel"]
                if isinstance(channel, bytes):
                    channel = channel.decode()
                self._fire(channel)


class _Pipeliner:
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


class _Tailer:
    """One ``XREAD BLOCK`` over every stream a follower waits on, on a connection of its own;
    wakes the waiters of a stream when a newer entry appears. A stream added while the read
    is blocked interrupts it (``CLIENT UNBLOCK``) so it is watched at once. A stream stays
    watched for a moment after its last waiter woke (:data:`_LINGER`), so a follower that
    comes back knows, without asking Redis, that nothing newer exists yet."""

    def __init__(self, redis: Any, pipeline: _Pipeliner) -> None:
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
                    newest = _number(items[-1][0])
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


def _number(entry_id: Any) -> int:
    if isinstance(entry_id, bytes):
        entry_id = entry_id.decode()
    return int(str(entry_id).partition("-")[0])


def _decode(item: Any) -> Entry:
    entry_id, fields = item
    if isinstance(entry_id, bytes):
        entry_id = entry_id.decode()
    number = int(str(entry_id).partition("-")[0])
    data = fields.get(b"d") if b"d" in fields else fields.get("d")
    if data is None:
        raise RelayError(f"stored entry {entry_id} has no data")
    return decode_entry(number, data)


def _ignore_result(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()
