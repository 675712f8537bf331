"""The producer's writes (:class:`~fluxstream.relay.writer.Write`) as the ``EVALSHA`` commands
of :class:`~fluxstream.relay.RedisReplyLog`.

At one delta per frame -- a model at 50 tokens per second, a 16 ms frame -- every delta is
one write, and packing its command argument by argument (fifteen of them, eleven the same
for every write of a reply: script, keys, owner, lease and TTL) cost about as much CPU as
the rest of the write together (cProfile, ``benchmarks/bench_relay.py``). Here the constant
part of a reply's append and lease refresh is packed once, and a write packs only its entry
number, its entry (JSON bytes, encoded once), its token and its final flag. A cluster's
pipeliner routes commands by their arguments, so there the arguments are given unpacked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_core import to_json

from .codec import entry_json
from .redis_io import bulk, pack
from .writer import Write

__all__ = ["WriteCommands"]

#: Replies whose packed command prefixes are kept (the replies of one moment).
_PREFIX_CACHE = 4096
_FINAL = (bulk("0"), bulk("1"))


class WriteCommands:
    """Builds the command of each write of a producer (see the module docstring).

    :param keys: the Redis keys of a reply (:meth:`RedisReplyLog.keys`).
    :param shas: the scripts' SHA1 by name.
    :param timing: the lease and the TTL in seconds, read at each write (a log's ``lease``
        and ``ttl`` are plain attributes); a change packs the prefixes again.
    """

    def __init__(
        self,
        keys: Callable[[str], dict[str, str]],
        shas: dict[str, str],
        timing: Callable[[], tuple[float, float]],
    ) -> None:
        self._keys = keys
        self._shas = shas
        self._timing = timing
        #: (key, owner) -> (timing, packed append prefix, packed refresh command).
        self._prefixes: dict[tuple[str, str], tuple[tuple[float, float], bytes, bytes]] = {}

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
