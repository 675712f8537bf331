"""A background task whose lifetime one object owns, under asyncio or trio.

``ReplyStream.text(coalesce=...)`` needs the network read in a task of its own, so that the end
of a frame can interrupt the *wait* for bytes without interrupting the HTTP read (cancelling an
httpx read tears the connection down). A task group would have to stay open around the caller's
code, and a task group held across a user's ``async with`` body breaks ordinary patterns:
abandoning a wrapping async generator, closing two streams out of order, exiting in another
task. So the stream owns one unstructured task instead, and cancels it when it closes:
``loop.create_task`` under asyncio, a system task under trio. The task must never raise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["spawn"]


def spawn(factory: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Start ``factory()`` in the background; return a function that cancels it (idempotent)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        task = loop.create_task(factory())

        def cancel() -> None:
            task.cancel()  # a no-op once the task is done

        return cancel

    import trio

    scope = trio.CancelScope()

    async def run() -> None:
        with scope:
            await factory()

    trio.lowlevel.spawn_system_task(run)
    return scope.cancel
