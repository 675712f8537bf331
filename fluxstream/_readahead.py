"""Read an event stream's body in a task of its own, so a wait for bytes can time out alone.

``ReplyStream.text(coalesce=...)`` must stop waiting when a screen frame ends, but cancelling
an httpx read tears the connection down. So the body is read by a helper task
(:func:`fluxstream._tasks.spawn`) into a small memory stream, and the consumer waits on that
instead, with a deadline that interrupts only the wait (:meth:`ReadAhead.ready_within`).
The task never raises: the body's end and its errors are forwarded to the consumer, which raises
them where it reads, exactly as a direct read would.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio

from ._tasks import spawn

__all__ = ["ReadAhead"]

_EOF = object()
_BUFFER_READS = 1024


class ReadAhead:
    """Reads ``source`` ahead in a helper task; :meth:`stop` ends the task (idempotent)."""

    def __init__(self, source: AsyncIterator[bytes]) -> None:
        send, recv = anyio.create_memory_object_stream[Any](max_buffer_size=_BUFFER_READS)
        self._recv = recv
        self._stash: Any = None

        async def reader() -> None:
            async with send:
                try:
                    async for chunk in source:
                        await send.send(chunk)
                    await send.send(_EOF)
                except anyio.get_cancelled_exc_class():
                    return  # the stream closed; the consumer no longer reads
                except Exception as exc:  # forwarded: the consumer raises it where it reads
                    with contextlib.suppress(Exception):  # unless it stopped reading
                        await send.send(exc)

        self._cancel: Callable[[], None] | None = spawn(reader)

    async def receive(self) -> bytes:
        """The next read; ``StopAsyncIteration`` at the body's end; its error, re-raised."""
        item = self._stash
        if item is None:
            item = await self._recv.receive()
        else:
            self._stash = None
        if item is _EOF:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item  # type: ignore[no-any-return]

    async def ready_within(self, seconds: float) -> bool:
        """Whether a read is ready within ``seconds`` (it is kept for :meth:`receive`)."""
        if self._stash is not None:
            return True
        with anyio.move_on_after(seconds):
            self._stash = await self._recv.receive()
            return True
        return False

    def cancel_task(self) -> None:
        """Cancel the helper task (from any task); what it read stays receivable."""
        if self._cancel is not None:
            self._cancel()
            self._cancel = None

    def stop(self) -> None:
        """Cancel the helper task and stop receiving."""
        self.cancel_task()
        self._recv.close()
        self._stash = None
