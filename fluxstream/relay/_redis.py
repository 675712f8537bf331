"""redis-py, imported first by the Redis log (its ``_redis_*`` modules import it after), so a
plain install meets a message naming the extra, not a bare ``ModuleNotFoundError``."""

from __future__ import annotations

from .._core.extras import needs_extra

with needs_extra("redis", "RedisReplyLog", "redis"):
    import redis.asyncio as aioredis
    from redis.exceptions import NoPermissionError, RedisError, ResponseError

__all__ = ["NoPermissionError", "RedisError", "ResponseError", "aioredis"]
