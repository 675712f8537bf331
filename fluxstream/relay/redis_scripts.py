"""The Lua scripts of :class:`~fluxstream.relay.RedisReplyLog`: every change to a reply is one
atomic script, fenced by the lease (see :mod:`fluxstream.relay.redis_log` for the keys)."""

from __future__ import annotations

__all__ = [
    "ACQUIRE", "APPEND", "CREATE", "END_UNOWNED", "ENTRIES_LOST", "LEASE_LOST", "REFRESH",
    "RELEASE", "STATE",
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
# fluxstream/relay/redis_ticks.py)
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
