"""Which event loop library runs a request (``fluxstream._io.tasks.on_asyncio``): asked before
every request's first byte, so it reads sniffio's settings itself instead of calling it; it
must answer as ``sniffio.current_async_library() == "asyncio"`` everywhere."""

from __future__ import annotations

import asyncio
import threading

import sniffio
import trio

from fluxstream._io.tasks import on_asyncio


def _sniffio_says_asyncio() -> bool:
    try:
        return sniffio.current_async_library() == "asyncio"
    except sniffio.AsyncLibraryNotFoundError:
        return False


def _both() -> tuple[bool, bool]:
    return on_asyncio(), _sniffio_says_asyncio()


def test_it_answers_as_sniffio_on_each_library_and_outside_any() -> None:
    async def on_loop() -> tuple[bool, bool]:
        return _both()

    assert asyncio.run(on_loop()) == (True, True)
    assert trio.run(on_loop) == (False, False)
    assert _both() == (False, False)  # no loop at all


def test_it_follows_sniffio_s_own_overrides() -> None:
    """trio-asyncio and other hosts tell sniffio through its context variable or its
    thread-local name (trio itself sets the name): both are read first, as sniffio reads
    them, whatever runs underneath."""

    async def overridden(name: str) -> list[tuple[bool, bool]]:
        seen = []
        token = sniffio.current_async_library_cvar.set(name)
        try:
            seen.append(_both())
        finally:
            sniffio.current_async_library_cvar.reset(token)
        before = sniffio.thread_local.name
        sniffio.thread_local.name = name
        try:
            seen.append(_both())
        finally:
            sniffio.thread_local.name = before
        return seen

    for name in ("trio", "asyncio", "curio"):
        assert asyncio.run(overridden(name)) == [(name == "asyncio",) * 2] * 2
        # Under trio its own thread-local name comes before the context variable.
        assert trio.run(overridden, name) == [(False, False), (name == "asyncio",) * 2]


def test_a_thread_without_a_loop_is_not_on_asyncio() -> None:
    async def main() -> list[tuple[bool, bool]]:
        seen: list[tuple[bool, bool]] = []
        thread = threading.Thread(target=lambda: seen.append(_both()))
        thread.start()
        thread.join(timeout=10)
        return seen

    assert asyncio.run(main()) == [(False, False)]
