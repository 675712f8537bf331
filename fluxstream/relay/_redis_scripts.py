"""The Lua scripts of :class:`~fluxstream.relay.RedisReplyLog`: every change to a reply is one
atomic script, fenced by the lease (see :mod:`fluxstream.relay.redis_log` for the keys), and
:class:`ScriptCalls`, how the log names a script to Redis by what its user may run."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoPermissionError, NoScriptError

__all__ = [
    "ACQUIRE", "APPEND", "CREATE", "END_UNOWNED", "ENTRIES_LOST", "LEASE_LOST", "REFRESH",
    "RELEASE", "STATE", "ScriptCalls",
]

#: What a fenced script returns when the lease is not the caller's.
LEASE_LOST = -1
#: What APPEND returns when entries before the new one are missing (Redis lost writes).
ENTRIES_LOST = -2

# KEYS: stream, meta, lease, cancel  ARGV: base, owner, lease_ms, ttl_ms, key
CREATE = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[2], 'base', ARGV[1], 'key', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('DEL', KEYS[1], KEYS[4])
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
return 1
"""

# KEYS: stream, meta, lease, cancel  ARGV: owner, lease_ms, ttl_ms, id, data, token, final
# Entries are numbered 1, 2, ... without a gap (never trimmed), so XLEN is the last number:
# fewer means Redis lost entries (a failover before replication); writing on would hide it.
APPEND = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
if redis.call('XLEN', KEYS[1]) < tonumber(string.match(ARGV[4], '^(%d+)')) - 1 then
  return -2
end
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

# KEYS: lease, cancel, stream, meta  ARGV: owner, lease_ms, ttl_ms
# The reply's TTL counts from its producer's last sign of life, not its last entry: a live
# producer with nothing to write (a model thinking) must not see its reply expire.
REFRESH = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
redis.call('PEXPIRE', KEYS[4], ARGV[3])
return redis.call('EXISTS', KEYS[2])
"""

# KEYS: lease  ARGV: owner
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""

# KEYS: stream, meta, lease  ARGV: data, ttl_ms, the "written" channel ('': none; see
# fluxstream/relay/_redis_written_channel.py)
END_UNOWNED = """
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
if ARGV[3] and ARGV[3] ~= '' then redis.pcall('PUBLISH', ARGV[3], #KEYS[1] .. ':' .. KEYS[1]) end
return n + 1
"""

# KEYS: stream, meta, lease, cancel  ARGV: owner, lease_ms
ACQUIRE = """
if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
if redis.call('HGET', KEYS[2], 'ended') then return -1 end
if redis.call('EXISTS', KEYS[4]) == 1 then return -1 end
if redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', ARGV[2]) == false then return -1 end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 0 then return 0 end
return tonumber(string.match(last[1][1], '^(%d+)'))
"""

# KEYS: stream, meta, lease, cancel  (no ARGV)
STATE = """
local exists = redis.call('EXISTS', KEYS[2])
local ended = 0
if redis.call('HGET', KEYS[2], 'ended') then ended = 1 end
local lease = redis.call('EXISTS', KEYS[3])
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local n = 0
if #last > 0 then n = tonumber(string.match(last[1][1], '^(%d+)')) end
return {exists, n, ended, lease, redis.call('EXISTS', KEYS[4])}
"""


class ScriptCalls:
    """How a log names its scripts to Redis: by SHA1 (``EVALSHA``) or by text (``EVAL``).

    ``SCRIPT`` (``SCRIPT LOAD``), ``EVALSHA`` and ``EVAL`` are three commands a Redis ACL
    grants apart, and some managed Redis services refuse ``SCRIPT``. A script is called by
    its SHA1, which costs forty bytes where its text costs up to two kilobytes per call
    (the frame's ``WRITES``). A script Redis does not know (never loaded, a restart,
    ``SCRIPT FLUSH``, an eviction) is loaded again with ``SCRIPT LOAD``; for a user refused
    ``SCRIPT`` (:attr:`loadable` false) it is sent once by its text instead -- ``EVAL``
    caches it as ``SCRIPT LOAD`` would, so the calls after it go by SHA1 again. Only a user
    refused ``EVALSHA`` (:attr:`by_text`) has every call carry its script's text.

    :param scripts: each script's text by name.
    """

    def __init__(self, scripts: dict[str, str]) -> None:
        self.texts = dict(scripts)
        self.shas = {
            name: hashlib.sha1(text.encode()).hexdigest() for name, text in scripts.items()
        }
        self._text_of = {sha.encode(): text.encode() for sha, text in zip(
            self.shas.values(), self.texts.values(), strict=True)}
        #: ``SCRIPT LOAD`` has not been refused (an ACL without ``SCRIPT`` refuses it).
        self.loadable = True
        #: ``EVALSHA`` was refused: every call carries its script's text.
        self.by_text = False

    def call(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> list[Any]:
        """The command calling script ``name`` (its arguments, command name first)."""
        if self.by_text:
            return ["EVAL", self.texts[name], len(keys), *keys, *args]
        return ["EVALSHA", self.shas[name], len(keys), *keys, *args]

    def with_text(self, command: Any) -> Any:
        """``command`` -- an ``EVALSHA`` as arguments or packed in RESP -- as the ``EVAL`` of
        its script's text (anything else as it is)."""
        if isinstance(command, bytes):
            head, sep, rest = command.partition(b"\r\n$7\r\nEVALSHA\r\n$40\r\n")
            text = self._text_of.get(rest[:40]) if sep else None
            if text is None or b"\r\n" in head or rest[40:42] != b"\r\n":
                return command
            return b"%s\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n%s" % (
                head, len(text), text, rest[42:])
        if command and str(command[0]).upper() == "EVALSHA":
            sha = command[1].encode() if isinstance(command[1], str) else command[1]
            text = self._text_of.get(sha)
            if text is not None:
                return ["EVAL", text.decode(), *command[2:]]
        return command

    @staticmethod
    def refused_evalsha(reply: Any) -> bool:
        """Whether ``reply`` is Redis refusing this user ``EVALSHA`` (an ACL error)."""
        return isinstance(reply, NoPermissionError) and "evalsha" in str(reply).lower()

    @staticmethod
    def unknown(reply: Any) -> bool:
        """Whether ``reply`` says Redis does not know the script (``NOSCRIPT``)."""
        return isinstance(reply, NoScriptError)
