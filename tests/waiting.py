"""Waiting for a condition that another task, thread, process or finalizer makes true.

A fixed sleep before an assertion measures the machine: on a loaded CI worker the other side
is late and the test fails although nothing is wrong. These waits poll the condition instead,
bounded by ``within`` seconds (generous: a loaded worker stalls for a second or more), and then
fail with ``what`` said plainly, so a real break is still a bounded failure, never a hang.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

__all__ = ["WITHIN", "until", "until_sync"]

#: How long a condition may take to come true on a loaded machine before the test fails.
WITHIN = 10.0
#: How often the condition is checked.
EVERY = 0.01


async def until(check: Callable[[], object], what: str, *, within: float = WITHIN) -> None:
    """Return once ``check()`` is true; ``AssertionError`` naming ``what`` after ``within`` s."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {within} s: {what}")
        await anyio.sleep(EVERY)


def until_sync(check: Callable[[], object], what: str, *, within: float = WITHIN) -> None:
    """:func:`until` for synchronous tests (the condition comes true in another thread)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {within} s: {what}")
        time.sleep(EVERY)
