""":class:`~fluxstream.relay.RedisReplyLog` on Redis Cluster (redis-py's
``redis.asyncio.cluster.RedisCluster``).

Every key of one reply carries the same hash tag (:meth:`RedisReplyLog.keys`), so each
script names keys of one slot only, and redis-py routes it to the master that serves that
slot, following ``MOVED`` (a resharded slot) and ``ASK`` (a slot being migrated) itself.
Two things of the one-node log cannot run on a cluster, and are replaced here:

* the pipeliner's own RESP round trip on one pooled connection: a cluster has a pool per
  node, so the commands asked meanwhile go out as one redis-py cluster pipeline (one round
  trip per node they touch); a command answered ``MOVED`` is sent again by redis-py (which
  updates its slot map), one answered ``ASK`` is sent here with ``ASKING`` on one
  connection of the node named; ``SCRIPT LOAD`` goes to every master;
* the tailer's single ``XREAD BLOCK`` over every watched stream: the streams of different
  replies lie in different slots, and Redis refuses a multi-key command across slots
  (``CROSSSLOT``) even on one node. The cluster tailer *polls* instead: one non-blocking
  single-stream ``XREAD`` per watched stream, all in one pipeline, every :data:`_POLL`
  seconds (longer with many watched streams). A follower waiting at the head of a reply
  learns of a new entry at most a poll later; one behind reads with ``XRANGE`` at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.exceptions import (
    AskError,
    ClusterError,
    MovedError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)

from . import _redis_connection
from ._redis_connection import Arg, pack, round_trip, xread_streams
from ._redis_pipeliner import Pipeliner
from ._redis_tailer import Tailer

try:
    from redis.asyncio.cluster import RedisCluster
except ImportError:  # pragma: no cover - redis-py without cluster support
    RedisCluster = None  # type: ignore[assignment,misc]

__all__ = ["ClusterPipeliner", "ClusterTailer", "is_cluster"]

#: Seconds between two polls of the cluster tailer (a frame of the producer is 16 ms).
_POLL = 0.01
#: Added per watched stream, so that the poll's cost stays bounded: at 500 watched streams
#: a poll every 20 ms (25 000 single-stream reads a second over the cluster at most).
_POLL_PER_STREAM = 2e-5
_POLL_MAX = 0.05
#: Seconds a command keeps following redirections (a slot half-migrated answers a script
#: over keys of which some moved, or do not exist, with ``TRYAGAIN`` until it is done).
_REDIRECTED = 5.0
#: Entries one poll reads per stream (a follower further behind reads with XRANGE).
_POLL_COUNT = 8


def is_cluster(redis: Any) -> bool:
    """Whether ``redis`` is a redis-py asyncio cluster client."""
    return RedisCluster is not None and isinstance(redis, RedisCluster)


class ClusterPipeliner(Pipeliner):
    """The :class:`~fluxstream.relay._redis_pipeliner.Pipeliner` on a cluster: the commands asked
    while a round trip is in flight go out together as one redis-py cluster pipeline."""

    def _queued(self, args: Sequence[Arg]) -> Any:
        return tuple(args)

    async def call_packed(self, commands: list[bytes]) -> list[Any]:
        """Not on a cluster: a command is routed by its key, so it is given unpacked."""
        raise TypeError("a cluster's pipeliner routes commands by their arguments: call_many")

    async def _send_batch(self, commands: list[Any], results: list[Any]) -> None:
        try:
            # redis-py's own retries and redirections included.
            replies = await asyncio.wait_for(
                self._execute(commands), _redis_connection.ROUND_TRIP
            )
        except RedisClusterException as exc:
            # redis-py's routing failures (no node serves the slot during a failover) are
            # not RedisErrors: made one, so the log reports RelayUnavailableError.
            raise ClusterError(f"{type(exc).__name__}: {exc}") from exc
        for reply in replies:
            if isinstance(reply, RedisClusterException):
                raise ClusterError(f"{type(reply).__name__}: {reply}") from reply
        results.extend(replies)

    async def _execute(self, commands: list[Any]) -> list[Any]:
        cluster = self._redis
        await cluster.initialize()  # a no-op once the slots are known
        replies: list[Any] = [None] * len(commands)
        pipeline = cluster.pipeline(transaction=False)
        routed: list[int] = []
        for index, args in enumerate(commands):
            if args[0] == "SCRIPT":  # keyless: every master must know the script
                try:
                    replies[index] = await cluster.execute_command(
                        *args, target_nodes=cluster.get_primaries()
                    )
                except ResponseError as exc:  # refused (an ACL without SCRIPT): its reply
                    replies[index] = exc
            else:
                pipeline.execute_command(*args)
                routed.append(index)
        if routed:
            done = await pipeline.execute(raise_on_error=False, allow_redirections=False)
            for index, reply in zip(routed, done, strict=True):
                replies[index] = await self._redirected(reply, commands[index])
        return replies

    async def _redirected(self, reply: Any, args: Sequence[Arg]) -> Any:
        """``reply``, or after ``MOVED``/``ASK``/``TRYAGAIN`` the reply of the node that
        serves ``args``'s slot now (for at most :data:`_REDIRECTED` seconds)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _REDIRECTED
        while isinstance(reply, (MovedError, AskError, TryAgainError)):
            if loop.time() > deadline:
                break
            if isinstance(reply, MovedError):  # the slot moved: redis-py learns where
                reply = await self._again(args)
            elif isinstance(reply, AskError):
                reply = await self._asking(reply, args)
            else:
                await asyncio.sleep(0.05)
                reply = await self._once(args)
        return reply

    async def _again(self, args: Sequence[Arg]) -> Any:
        try:
            return await self._redis.execute_command(*args)
        except (ResponseError, RedisClusterException) as exc:
            return exc

    async def _once(self, args: Sequence[Arg]) -> Any:
        """``args`` on the node the slot map names, redirections returned, not followed."""
        pipeline = self._redis.pipeline(transaction=False)
        pipeline.execute_command(*args)
        [reply] = await pipeline.execute(raise_on_error=False, allow_redirections=False)
        return reply

    async def _asking(self, redirect: AskError, args: Sequence[Arg]) -> Any:
        """``args`` on the node a half-migrated slot's key went to: ``ASKING`` and the
        command on one connection (redis-py's own ASK handling may send them on two when
        the node's pool holds several, and then loops between the nodes)."""
        node = self._redis.get_node(host=redirect.host, port=redirect.port)
        if node is None:
            return await self._again(args)
        connection = node.acquire_connection()
        try:
            answers: list[Any] = []
            await round_trip(connection, [pack(("ASKING",)), pack(args)], answers)
        except BaseException:
            await connection.disconnect()
            raise
        finally:
            node.release(connection)
        return answers[1]


class ClusterTailer(Tailer):
    """The :class:`~fluxstream.relay._redis_tailer.Tailer` on a cluster: polls every watched
    stream with a single-stream ``XREAD`` (no ``BLOCK``: a blocked read would hold a
    connection per reply), all of one poll in one pipelined round trip."""

    async def _run(self) -> None:
        try:
            while watched := self._watched():
                asked = {name: self._latest.get(name, 0) for name in watched}
                replies = await self._pipeline.call_many([
                    ("XREAD", "COUNT", _POLL_COUNT, "STREAMS", name, f"{number}-0")
                    for name, number in asked.items()
                ])
                for (name, number), reply in zip(asked.items(), replies, strict=True):
                    if isinstance(reply, Exception):
                        raise reply
                    for _, items in xread_streams(reply):
                        if items:
                            self._found(name, number, self._decode(items))
                await asyncio.sleep(min(_POLL_MAX, _POLL + _POLL_PER_STREAM * len(asked)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._failed(exc)
