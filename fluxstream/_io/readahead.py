"""Read an event stream's body in a task of its own, so a wait for bytes can time out alone.

``ReplyStream.text(coalesce=...)`` must stop waiting when a screen frame ends, but cancelling
an httpx read tears the connection down. So the body is read by a helper task
(:func:`fluxstream._io.tasks.spawn`) into a small memory stream, and the consumer waits on that
instead, with a deadline that interrupts only the wait (:meth:`ReadAhead.ready_within`).
The task never raises: the body's end and its errors are forwarded to the consumer, which raises
them where it reads, exactly as a direct read would.

Closing is two-sided and may come from any task: the memory stream closed under a waiting
consumer, or the helper cancelled while the consumer waits, both read as the end of the bytes
(never a raw ``ClosedResourceError`` / ``EndOfStream``); the stream then states the outcome
(``cancelled`` if the caller asked for it). :meth:`ReadAhead.close` waits until the helper has
ended, so no task outlives the stream and the HTTP library finishes its own generators.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio

from .attempt import finish_body
from .tasks import Background, spawn

__all__ = ["ReadAhead"]

_EOF = object()
_BUFFER_READS = 1024
#: How long a close waits for the helper task to end after cancelling it.
_STOP_SECONDS = 2.0
_ENDED = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError)


class ReadAhead:
    """Reads ``source`` ahead in a helper task; :meth:`close` ends it."""

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
                except _ENDED:
                    return  # the consumer closed its side
                except Exception as exc:  # forwarded: the consumer raises it where it reads
                    with contextlib.suppress(Exception):  # unless it stopped reading
                        await send.send(exc)
                finally:
                    # Finish the HTTP library's chain of generators here, in the task that
                    # iterated it, so none waits for the garbage collector (ResourceWarning).
                    # Not aclose(): that finishes only the outermost one.
                    await finish_body(source)

        self._task: Background = spawn(reader)

    async def receive(self) -> bytes:
        """The next read; ``StopAsyncIteration`` at the body's end (or once closed); the
        body's error, re-raised."""
        item = self._stash
        if item is None:
            try:
                item = await self._recv.receive()
            except _ENDED:
                raise StopAsyncIteration from None
        else:
            self._stash = None
        if item is _EOF:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item  # type: ignore[no-any-return]

    async def ready_within(self, seconds: float) -> bool:
        """Whether a read (or the end) is ready within ``seconds`` (kept for :meth:`receive`)."""
        if self._stash is not None:
            return True
        with anyio.move_on_after(seconds):
            try:
                self._stash = await self._recv.receive()
            except _ENDED:
                self._stash = _EOF
            return True
        return False

    def cancel_task(self) -> None:
        """Cancel the helper task (from any task, synchronously); a waiting consumer then
        sees the end of the bytes."""
        self._task.cancel()

    def abandon(self) -> None:
        """End the helper task and this side of the memory stream without waiting (its stream
        was collected unclosed; the connection is closed beside it)."""
        self._task.cancel()
        self._recv.close()
        self._stash = None

    async def close(self, *, linger: float = 0.0) -> None:
        """End the helper task and wait until it has ended (shielded, bounded).

        ``linger``: first let it read on for up to this long (the sentinel came; the body's
        end is usually right behind it, and reading it returns the connection to the pool).
        """
        with anyio.CancelScope(shield=True):
            if linger > 0 and not self._task.done:
                with anyio.move_on_after(linger):
                    await self._task.wait()
            self._task.cancel()
            with anyio.move_on_after(_STOP_SECONDS):
                await self._task.wait()
        self._recv.close()
        self._stash = None
