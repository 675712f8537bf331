"""A background task whose lifetime one object owns, under asyncio or trio.

``ReplyStream.text(coalesce=...)`` needs the network read in a task of its own, so that the end
of a frame can interrupt the *wait* for bytes without interrupting the HTTP read (cancelling an
httpx read tears the connection down). A task group would have to stay open around the caller's
code, and a task group held across a user's ``async with`` body breaks ordinary patterns:
abandoning a wrapping async generator, closing two streams out of order, exiting in another
task. So the stream owns one unstructured task instead: ``loop.create_task`` under asyncio, a
system task under trio. The task must never raise.

The task runs inside an anyio cancel scope and is cancelled through it, never by a bare
``Task.cancel()``: the HTTP library closes a response inside *shielded* scopes, and a native
asyncio cancel goes through a shield, which left the connection checked out of the pool for
good. :meth:`Background.wait` lets the owner wait until the task has really ended, so nothing
of it is left running (or pending, to be destroyed later) after a close.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import sniffio

__all__ = ["Background", "on_asyncio", "spawn"]

_sniffio_thread = sniffio.thread_local
_sniffio_cvar = sniffio.current_async_library_cvar
_current_task = asyncio.current_task


def on_asyncio() -> bool:
    """Whether asyncio runs the current task: ``sniffio.current_async_library() ==
    "asyncio"`` (sniffio's own settings first, as it reads them, then asyncio's current
    task), ``False`` outside any event loop. Without sniffio's import statement and module
    lookups: every request asks it before its first byte."""
    name = _sniffio_thread.name
    if name is None:
        name = _sniffio_cvar.get()
    if name is not None:
        return bool(name == "asyncio")
    try:
        return _current_task() is not None
    except RuntimeError:  # no running asyncio loop
        return False


class Background:
    """Handle of a task started by :func:`spawn`."""

    __slots__ = ("_done", "_scope", "_task")

    def __init__(self) -> None:
        self._scope = anyio.CancelScope()
        self._done = anyio.Event()
        self._task: Any = None  # a strong reference: asyncio keeps only weak ones

    def cancel(self) -> None:
        """Cancel the task (idempotent, synchronous, from any task)."""
        self._scope.cancel()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    async def wait(self) -> None:
        """Until the task has ended."""
        await self._done.wait()

    async def _run(self, factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            with self._scope:
                await factory()
        finally:
            self._done.set()
            self._task = None


def spawn(factory: Callable[[], Coroutine[Any, Any, None]]) -> Background:
    """Start ``factory()`` in the background; the handle cancels it and waits for its end."""
    handle = Background()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        handle._task = loop.create_task(handle._run(factory))
        return handle

    import trio

    trio.lowlevel.spawn_system_task(handle._run, factory)
    return handle
