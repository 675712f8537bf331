"""The producer's writes (:class:`~fluxstream.relay.writer.Write`) as the ``EVALSHA`` commands
of :class:`~fluxstream.relay.RedisReplyLog`.

At one delta per frame -- a model at 50 tokens per second, a 16 ms frame -- every delta is
one write, and packing its command argument by argument (fifteen of them, eleven the same
for every write of a reply: script, keys, owner, lease and TTL) cost about as much CPU as
the rest of the write together (cProfile, ``benchmarks/bench_relay.py``). Here the constant
part of a reply's append and lease refresh is packed once, and a write packs only its entry
number, its entry (JSON bytes, encoded once), its token and its final flag. A frame's script
call (:data:`WRITES`) goes further: its writes' fields are one MessagePack array, encoded by
msgspec in one call, and their entries one string. A cluster's pipeliner routes commands by
their arguments, so there the arguments are given unpacked.

:class:`WriteChannel` sends a frame's commands on a connection the writer keeps, from the
writer's own task. Through the log's pipeliner a round trip cost a future, a flush task, two
``asyncio.wait_for`` tasks and a pool checkout and return -- eight event-loop passes for
what one ``await`` on a held connection does in two; at one delta per frame (twenty
streams at 50 tokens per second) that was most of what recording added per delta.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import msgspec
from pydantic_core import to_json
from redis.exceptions import ConnectionError

from ._redis_connection import RoundTrips, borrow, bulk, give_back, pack
from .codec import entry_json
from .writer import Write

__all__ = ["WRITES", "WriteChannel", "WriteCommands"]

#: Every write of a producer's frame in one script call: APPEND, REFRESH and RELEASE of
#: :mod:`~fluxstream.relay._redis_scripts`, each write its own function, in order. One Redis
#: only: the writes of a frame touch replies in many slots, so on a cluster each write stays
#: its own script, routed by its reply's slot (which is why this script is not among those,
#: every one of which touches a single reply). Each write's keys are declared
#: (``KEYS[4i+1..4i+4]``), none is built inside.
#: KEYS: stream, meta, lease, cancel of each write, in order.
#: ARGV: lease_ms, ttl_ms, the "written" channel ('': none), the writes, their data.
#: The writes are one MessagePack array (Redis's own ``cmsgpack`` unpacks it), per write
#: ['a', owner, entry number, data length, token length, final] (APPEND), ['r', owner]
#: (REFRESH) or ['x', owner] (RELEASE); the data is every APPEND's entry then its token
#: ('' when none), in order, one string. Argument by argument in RESP, a write's fields
#: cost the producer as much CPU as encoding its entry (cMsgPack has no binary type, so
#: the entries, JSON bytes, travel outside it, cut by their lengths).
#: Returns the number of writes, then what each one's own script returns; a write that fails
#: (an entry that exists, a key of the wrong type) gives its error in its place and changes
#: nothing (its reads come first), as its own EVALSHA would; the others go on. The streams
#: appended to are published on the channel, once per call, as netstrings
#: (:mod:`~fluxstream.relay._redis_written_channel`: the followers' tailers read just
#: those); a publish Redis refuses (a user without the channel) changes nothing of the
#: writes.
WRITES = """
local lease_ms, ttl_ms, channel = ARGV[1], ARGV[2], ARGV[3]
local rows, blob = cmsgpack.unpack(ARGV[4]), ARGV[5]
local written = {}
local function append(s, m, l, c, owner, number, data, token, final)
  if redis.call('GET', l) ~= owner then return -1 end
  if redis.call('XLEN', s) < number - 1 then return -2 end
  redis.call('XADD', s, string.format('%d-0', number), 'd', data)
  redis.call('PEXPIRE', s, ttl_ms)
  redis.call('PEXPIRE', m, ttl_ms)
  if token ~= '' then redis.call('HSET', m, 'token', token) end
  if final then
    redis.call('HSET', m, 'ended', '1')
    redis.call('DEL', l)
  else
    redis.call('PEXPIRE', l, lease_ms)
  end
  return redis.call('EXISTS', c)
end
local function refresh(s, m, l, c, owner)
  if redis.call('GET', l) ~= owner then return -1 end
  redis.call('PEXPIRE', l, lease_ms)
  redis.call('PEXPIRE', s, ttl_ms)
  redis.call('PEXPIRE', m, ttl_ms)
  return redis.call('EXISTS', c)
end
local function release(s, m, l, c, owner)
  if redis.call('GET', l) == owner then redis.call('DEL', l) end
  return 1
end
local out = {#KEYS / 4}
local at = 1
for i = 0, #KEYS / 4 - 1 do
  local k = 4 * i
  local row = rows[i + 1]
  local op = row[1]
  local ok, result
  if op == 'a' then
    local data_end, token_end = at + row[4], at + row[4] + row[5]
    local data = string.sub(blob, at, data_end - 1)
    local token = string.sub(blob, data_end, token_end - 1)
    at = token_end
    ok, result = pcall(append, KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4],
      row[2], row[3], data, token, row[6])
    if ok and result >= 0 then written[#written + 1] = #KEYS[k + 1] .. ':' .. KEYS[k + 1] end
  elseif op == 'r' then
    ok, result = pcall(refresh, KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], row[2])
  else
    ok, result = pcall(release, KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], row[2])
  end
  if ok then
    out[#out + 1] = result
  elseif type(result) == 'table' and result.err then
    out[#out + 1] = result
  else
    out[#out + 1] = redis.error_reply(tostring(result))
  end
end
if channel ~= '' and #written > 0 then  -- refused (an ACL without the channel): read as before
  redis.pcall('PUBLISH', channel, table.concat(written))
end
return out
"""

#: Replies whose packed command prefixes are kept (the replies of one moment).
_PREFIX_CACHE = 4096
_FINAL = (bulk("0"), bulk("1"))
_ROWS = msgspec.msgpack.Encoder().encode


class WriteCommands:
    """Builds the command of each write of a producer (see the module docstring).

    :param keys: the Redis keys of a reply (:meth:`RedisReplyLog.keys`).
    :param shas: the scripts' SHA1 by name.
    :param timing: the lease and the TTL in seconds, read at each write (a log's ``lease``
        and ``ttl`` are plain attributes); a change packs the prefixes again.
    :param written: the channel :meth:`batch`'s script names the streams it appended to on
        (:mod:`~fluxstream.relay._redis_written_channel`).
    """

    def __init__(
        self,
        keys: Callable[[str], dict[str, str]],
        shas: dict[str, str],
        timing: Callable[[], tuple[float, float]],
        written: str,
    ) -> None:
        self._keys = keys
        self._written = bulk(written)
        self._shas = shas
        self._timing = timing
        #: (key, owner) -> (timing, packed append prefix, packed refresh command).
        self._prefixes: dict[tuple[str, str], tuple[tuple[float, float], bytes, bytes]] = {}
        #: For :meth:`batch`: key -> its four keys, packed.
        self._keys_packed: dict[str, bytes] = {}
        self._batch_timing: tuple[tuple[float, float] | None, bytes] = (None, b"")
        #: The frame script's SHA1, and packed.
        self._sha: tuple[str | None, bytes] = (None, b"")

    def args(self, write: Write) -> list[Any]:
        """The command's arguments (for a cluster's pipeliner)."""
        k = self._keys(write.key)
        lease_ms, ttl_ms = _ms(self._timing())
        if write.release:
            return ["EVALSHA", self._shas["release"], 1, k["lease"], write.owner]
        if write.entry is None:
            return ["EVALSHA", self._shas["refresh"], 4, k["lease"], k["cancel"], k["stream"],
                    k["meta"], write.owner, lease_ms, ttl_ms]
        entry = write.entry
        return [
            "EVALSHA", self._shas["append"], 4, k["stream"], k["meta"], k["lease"], k["cancel"],
            write.owner, lease_ms, ttl_ms, f"{entry.number}-0",
            entry_json(entry.events, entry.end), _token(write), "1" if write.final else "0",
        ]

    def packed(self, write: Write) -> bytes:
        """The command in RESP, its constant part packed once per reply and owner."""
        if write.release:  # once per takeover that gives a reply back: nothing to save
            return pack(self.args(write))
        timing = self._timing()
        cached = self._prefixes.get((write.key, write.owner))
        if cached is None or cached[0] != timing:
            cached = self._prefix(write, timing)
        entry = write.entry
        if entry is None:
            return cached[2]
        number = b"%d-0" % entry.number
        data = entry_json(entry.events, entry.end)
        token = _token(write)
        return b"%s$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n%s" % (
            cached[1], len(number), number, len(data), data, len(token), token,
            _FINAL[write.final],
        )

    def batch(self, writes: list[Write]) -> bytes:
        """Every write of ``writes`` as one ``EVALSHA`` of :data:`WRITES` in RESP (one Redis,
        not a cluster): one command, one reply and one script call per frame, not one per
        stream. A reply's four keys are packed once per reply and owner; a write's own
        fields go into one MessagePack array for the whole frame, its entry (and token) into
        one string."""
        timing = self._timing()
        if self._batch_timing[0] != timing:
            lease_ms, ttl_ms = _ms(timing)
            self._batch_timing = (timing, bulk(lease_ms) + bulk(ttl_ms) + self._written)
            self._keys_packed.clear()
        known = self._keys_packed
        keys: list[bytes] = []
        rows: list[tuple[Any, ...]] = []
        data: list[bytes] = []
        # Bound once: this loop runs once per write of every stream the process records.
        add_keys, add_row, add_data = keys.append, rows.append, data.append
        for write in writes:
            packed = known.get(write.key)
            if packed is None:
                packed = self._batch_keys(write.key)
            add_keys(packed)
            entry = write.entry
            if write.release:
                add_row(("x", write.owner))
            elif entry is None:
                add_row(("r", write.owner))
            else:
                entry_data = entry_json(entry.events, entry.end)
                token_data = _token(write)
                add_data(entry_data)
                add_data(token_data)
                add_row((
                    "a", write.owner, entry.number, len(entry_data), len(token_data),
                    write.final,
                ))
        packed_rows = _ROWS(rows)
        blob = b"".join(data)
        sha = self._shas["writes"]
        if self._sha[0] is not sha:
            self._sha = (sha, bulk(sha))
        count = b"%d" % (4 * len(writes))
        return b"*%d\r\n$7\r\nEVALSHA\r\n%s$%d\r\n%s\r\n%s%s$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
            8 + 4 * len(writes), self._sha[1], len(count), count, b"".join(keys),
            self._batch_timing[1], len(packed_rows), packed_rows, len(blob), blob,
        )

    def _batch_keys(self, key: str) -> bytes:
        """A reply's four keys, packed."""
        k = self._keys(key)
        made = b"".join(bulk(k[name]) for name in ("stream", "meta", "lease", "cancel"))
        if len(self._keys_packed) >= _PREFIX_CACHE:  # bounded: the replies of one moment
            self._keys_packed.clear()
        self._keys_packed[key] = made
        return made

    def _prefix(
        self, write: Write, timing: tuple[float, float]
    ) -> tuple[tuple[float, float], bytes, bytes]:
        k = self._keys(write.key)
        lease_ms, ttl_ms = _ms(timing)
        append = b"*14\r\n" + b"".join(bulk(a) for a in (
            "EVALSHA", self._shas["append"], 4, k["stream"], k["meta"], k["lease"], k["cancel"],
            write.owner, lease_ms, ttl_ms,
        ))
        refresh = pack([
            "EVALSHA", self._shas["refresh"], 4, k["lease"], k["cancel"], k["stream"], k["meta"],
            write.owner, lease_ms, ttl_ms,
        ])
        if len(self._prefixes) >= _PREFIX_CACHE:  # bounded: the replies of one moment
            self._prefixes.clear()
        made = self._prefixes[(write.key, write.owner)] = (timing, append, refresh)
        return made


def _ms(timing: tuple[float, float]) -> tuple[int, int]:
    """The lease and the TTL as the scripts take them (milliseconds, at least 1)."""
    return max(1, int(timing[0] * 1000)), max(1, int(timing[1] * 1000))


def _token(write: Write) -> bytes:
    # pydantic-core's serializer: a fifth of json.dumps' time for a token (the whole reply
    # so far), stored once a second per stream.
    return b"" if write.token is None else to_json(write.token)


class WriteChannel:
    """A producer's write round trips on one connection of the client's pool, kept between
    round trips and sent from the caller's task (see the module docstring).

    A second caller while a round trip is out (a log written from two event loops, or a
    write of a takeover racing the writer) goes through ``fallback`` (the log's pipeliner)
    rather than waiting: replies on one connection must be read in order. A failed or
    interrupted round trip closes the connection (its replies may still come), so the next
    one starts clean on a new one; a kept connection Redis closed meanwhile (a restart, an
    idle timeout) is noticed when nothing was answered and the commands are sent once more
    on a new one, as the pipeliner does.

    :param redis: a ``redis.asyncio.Redis`` client (not a cluster: its pipeliner routes).
    :param fallback: sends packed commands another way (``Pipeliner.call_packed``).
    """

    def __init__(
        self, redis: Any, fallback: Callable[[list[bytes]], Awaitable[list[Any]]]
    ) -> None:
        self._redis = redis
        self._fallback = fallback
        self._connection: Any = None
        self._socket_timeout: float | None = None
        self._busy = False
        self._closed = False
        #: Each round trip's bound (a timer kept between them).
        self._round_trips = RoundTrips()

    async def send(self, commands: list[bytes]) -> list[Any]:
        """The raw replies of ``commands`` (an error reply as its exception), in one round
        trip; a connection failure raises (``redis.exceptions.ConnectionError``, ``OSError``),
        as does every round trip once the channel is closed."""
        if self._closed:
            raise ConnectionError("the write channel is closed")
        if self._busy:
            return await self._fallback(commands)
        self._busy = True
        try:
            results: list[Any] = []
            connection = self._connection
            if connection is None:
                connection = await self._borrow()
            try:
                await self._round_trips.send(connection, commands, results)
            except ConnectionError:
                await self._drop()
                if results or self._closed:
                    # Closed by aclose(), not by Redis: sent again, the commands would run
                    # twice, on a connection nothing closes any more.
                    raise
                connection = await self._borrow()
                await self._round_trips.send(connection, commands, results)
            return results
        except BaseException:
            await self._drop()
            raise
        finally:
            self._busy = False

    async def _borrow(self) -> Any:
        """A connection of the pool, kept; its own socket timeout off while kept: redis-py
        sends under ``asyncio.wait_for`` when one is set (a task and two more event-loop
        passes per round trip), and the round trip has its deadline here. None once closed."""
        connection = await borrow(self._redis)
        if self._closed:  # closed while connecting
            await give_back(self._redis, connection, broken=False)
            raise ConnectionError("the write channel is closed")
        self._connection = connection
        self._socket_timeout = connection.socket_timeout
        connection.socket_timeout = None
        return connection

    async def _drop(self) -> None:
        await self._give_back(broken=True)

    async def _give_back(self, *, broken: bool) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.socket_timeout = self._socket_timeout
            with suppress(Exception):
                await give_back(self._redis, connection, broken=broken)

    async def aclose(self) -> None:
        """Give the kept connection back to the pool (closed if a round trip is out, which
        then fails); every later round trip fails."""
        self._closed = True
        self._round_trips.close()
        await self._give_back(broken=self._busy)
