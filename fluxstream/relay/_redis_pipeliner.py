"""The pipeliner of :class:`~fluxstream.relay.RedisReplyLog`: every command producers and
followers ask, sent together in as few round trips as possible (:class:`Pipeliner`). A
cluster's (:mod:`~fluxstream.relay._redis_cluster`) routes the same batches by slot."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ConnectionError, ResponseError

from ..errors import RelayError
from . import _redis_connection
from ._redis_connection import Arg, borrow, give_back, pack, round_trip

__all__ = ["Pipeliner"]

#: Commands one round trip sends at most (a caller with more goes alone).
_BATCH = 1000


class Pipeliner:
    """Sends the commands of every task in as few round trips as possible: whatever is asked
    while a round trip is in flight goes out together in the next one (at most :data:`_BATCH`).
    One connection at a time, so a log never exhausts its client's pool. A command that
    Redis answers with an error raises that error (``redis.exceptions.ResponseError``); a
    connection failure fails every command of its round trip."""

    def __init__(self, redis: Any) -> None:
        self._redis = redis
        #: What was asked since the last round trip left: each caller's commands and the
        #: future of their replies (one future per caller, not per command: a producer's
        #: frame is a command per stream, and a future each cost as much as its reply).
        self._queue: list[tuple[list[Any], asyncio.Future[list[Any]]]] = []
        self._task: asyncio.Task[None] | None = None
        #: The connection of the round trip out, if any (:meth:`aclose` closes it).
        self._connection: Any = None
        self._closed = False

    async def aclose(self) -> None:
        """Fail the round trip out (its connection closed) and every later call; what was
        asked and not yet sent fails too."""
        self._closed = True
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.disconnect()

    def _queued(self, args: Sequence[Arg]) -> Any:
        """A command as the round trip sends it (packed here; a cluster keeps the args to
        route them)."""
        return pack(args)

    async def call(self, *args: Arg) -> Any:
        """Send the command ``args`` (name first); its raw reply."""
        [reply] = await self._call_queued([self._queued(args)])
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def call_many(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Send ``commands`` in order, in one round trip with whatever else is asked; their
        raw replies, an error reply as its exception (a lost connection raises)."""
        return await self._call_queued([self._queued(args) for args in commands])

    async def call_packed(self, commands: list[bytes]) -> list[Any]:
        """:meth:`call_many` for commands already in RESP (:func:`pack`; not on a cluster,
        whose pipeliner routes commands by their arguments)."""
        return await self._call_queued(commands)

    async def _call_queued(self, commands: list[Any]) -> list[Any]:
        if self._closed:
            raise ConnectionError("the pipeliner is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        self._queue.append((commands, future))
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._flush())
        results = await future
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, ResponseError):
                raise result  # the round trip failed
        return results

    async def _flush(self) -> None:
        while self._queue:
            # Whole callers, up to _BATCH commands (a caller with more goes alone).
            taken = 0
            count = 0
            for commands, _ in self._queue:
                if taken and count + len(commands) > _BATCH:
                    break
                taken += 1
                count += len(commands)
            batch, self._queue = self._queue[:taken], self._queue[taken:]
            results: list[Any] = []
            try:
                await self._send_batch([c for commands, _ in batch for c in commands], results)
            except BaseException as exc:  # connection lost: every caller of this batch fails
                error = exc if isinstance(exc, Exception) else RelayError("closed")
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                if not isinstance(exc, Exception):
                    raise
                continue
            at = 0
            for commands, future in batch:
                if not future.done():
                    future.set_result(results[at:at + len(commands)])
                at += len(commands)

    async def _send_batch(self, commands: list[Any], results: list[Any]) -> None:
        """One round trip: append each command's reply (an error reply as its exception) to
        ``results``; raises when the connection failed."""
        connection: Any = None
        broken = True
        try:
            connection = self._connection = await self._borrow()
            try:
                await _bounded(connection, commands, results)
            except ConnectionError:
                if results or self._closed:
                    raise  # closed by aclose(), not by Redis: never sent twice
                # Nothing was answered: a pooled connection Redis had closed (a restart,
                # an idle timeout). Once more on a new one, as redis-py's retry would.
                await give_back(self._redis, connection, broken=True)
                connection = self._connection = None
                connection = self._connection = await self._borrow()
                await _bounded(connection, commands, results)
            broken = False
        finally:
            self._connection = None
            if connection is not None:
                await give_back(self._redis, connection, broken=broken)

    async def _borrow(self) -> Any:
        """A connection for one round trip; none once closed."""
        if self._closed:
            raise ConnectionError("the pipeliner is closed")
        connection = await borrow(self._redis)
        if self._closed:  # closed while connecting
            await give_back(self._redis, connection, broken=False)
            raise ConnectionError("the pipeliner is closed")
        return connection


async def _bounded(connection: Any, commands: list[bytes], results: list[Any]) -> None:
    """One round trip, within :data:`~fluxstream.relay._redis_connection.ROUND_TRIP`."""
    await asyncio.wait_for(
        round_trip(connection, commands, results), _redis_connection.ROUND_TRIP
    )
