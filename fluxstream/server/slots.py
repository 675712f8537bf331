"""The cap on connections served at once (``max_connections``), and who gives way at it.

Why a connection beyond the cap *waits* rather than getting a 503:

* Waiting costs the server nothing: the accept loop stops accepting, and new connections queue
  in the kernel's listen backlog (the client's own connect/read timeouts bound its wait). A
  503 has to be written, and written well: closing a socket with the request still unread
  makes the kernel send a reset, which can destroy the 503 before the client reads it, so
  every refusal would need its own task reading and waiting -- unbounded again under a flood.
* It is a test server: a test that opens a few more streams than the cap must be slower,
  not fail.

Connections that finished a request and wait for the next one (a client's keep-alive pool)
must not keep a new connection waiting, so at the cap the oldest idle one is closed, as any
server may close an idle keep-alive connection (clients send a request that meets such a
close again). A fresh connection that has not sent its first request yet is not idle: its
client expects an answer on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import anyio

__all__ = ["DEFAULT_MAX_CONNECTIONS", "Slots"]

#: Connections served at once by default: the default client's pool size, above the test
#: suite's 500 concurrent streams.
DEFAULT_MAX_CONNECTIONS = 1000


class Slots:
    """At most ``limit`` connections at once; idle keep-alive ones give way at the cap."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free = anyio.Semaphore(limit)
        #: Idle connections (id -> what ends their wait), oldest first.
        self._idle: dict[int, anyio.CancelScope] = {}

    @property
    def in_use(self) -> int:
        return self.limit - self._free.value

    async def acquire(self) -> None:
        """A slot for a new connection: at once if one is free, else after closing the oldest
        idle connection, else when a connection ends."""
        try:
            self._free.acquire_nowait()
            return
        except anyio.WouldBlock:
            pass
        if self._idle:
            oldest = next(iter(self._idle))
            self._idle.pop(oldest).cancel()
        await self._free.acquire()

    def release(self) -> None:
        self._free.release()

    @contextmanager
    def idle(self, connection: int, scope: anyio.CancelScope) -> Iterator[None]:
        """While the block runs, connection ``connection`` is idle: cancelling ``scope`` closes
        it to make room."""
        self._idle[connection] = scope
        try:
            yield
        finally:
            self._idle.pop(connection, None)
