"""Leaks and crashes around ``text(coalesce=...)``, ``cancel()``, ``aclose()`` and trio. Real
sockets: the embedded server in the test's own event loop.

A leaked connection shows as a ``PoolTimeout`` once more streams than ``max_connections`` ran;
a leaked task or generator as a ``ResourceWarning`` / "Task was destroyed" / an unraisable
exception. Every test here failed on the code before the fix.
"""

from __future__ import annotations

import gc
import sys
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest

import fluxstream
from fluxstream.server import serve

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hi there"}]
DRIP = {"X-Fluxstream-Fault": "drip=0.005"}
POOL = 5
STREAMS = POOL + 3


@pytest.fixture
async def server() -> AsyncIterator[Any]:
    async with serve(port=0) as srv:
        yield srv


def pooled(server: Any, **kwargs: Any) -> fluxstream.AsyncClient:
    """A client whose pool has POOL connections and gives up waiting for one after 2 s."""
    http = httpx.AsyncClient(
        limits=httpx.Limits(max_connections=POOL, max_keepalive_connections=POOL),
        timeout=httpx.Timeout(10.0, pool=2.0),
    )
    return fluxstream.AsyncClient(server.base_url, http_client=http, **kwargs)


@pytest.fixture
def unraisable() -> Iterator[list[str]]:
    """Everything Python could only report (unraisable exceptions, ResourceWarnings, tasks
    destroyed while pending), collected instead of printed."""
    seen: list[str] = []
    old_hook = sys.unraisablehook

    def hook(info: Any) -> None:
        seen.append(f"{info.exc_type.__name__}: {info.exc_value} ({info.object!r})")

    sys.unraisablehook = hook
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield seen
        gc.collect()
        seen.extend(str(w.message) for w in caught if issubclass(w.category, ResourceWarning))
    sys.unraisablehook = old_hook


async def settle() -> None:
    """Let cancelled helper tasks finish and finalizers run."""
    for _ in range(3):
        await anyio.sleep(0.05)
        gc.collect()


def client_tasks() -> list[Any]:
    """The stream's helper tasks still alive (a read-ahead reader): none may outlive a
    closed stream."""
    import asyncio

    return [
        t for t in asyncio.all_tasks()
        if not t.done() and ("reader" in repr(t.get_coro()) or "Background" in repr(t))
    ]


async def test_coalesced_text_returns_every_connection_to_the_pool(
    server: Any, anyio_backend: str, unraisable: list[str]
) -> None:
    """Used exactly as documented, more streams than the pool holds all complete."""
    async with pooled(server) as client:
        for _ in range(STREAMS):
            with anyio.fail_after(10):
                async with client.chat.stream(model="m", messages=MSG) as stream:
                    text = "".join([piece async for piece in stream.text(coalesce=0.005)])
            assert stream.outcome is fluxstream.Outcome.DONE and text == stream.reply.text
        await settle()
        if anyio_backend == "asyncio":
            assert client_tasks() == []
    assert unraisable == []


async def test_breaking_out_of_coalesced_text_leaks_nothing(
    server: Any, anyio_backend: str, unraisable: list[str]
) -> None:
    async with pooled(server) as client:
        for _ in range(STREAMS):
            with anyio.fail_after(10):
                async with client.chat.stream(model="m", messages=MSG, extra_headers=DRIP) as s:
                    async for _piece in s.text(coalesce=0.005):
                        break
            assert s.outcome is fluxstream.Outcome.CANCELLED
        await settle()
        if anyio_backend == "asyncio":
            assert client_tasks() == []
    assert unraisable == []


async def test_cancel_under_coalesced_text_ends_cancelled(
    server: Any, unraisable: list[str]
) -> None:
    async with pooled(server) as client:
        for _ in range(STREAMS):
            for delay in (0.0, 0.01, 0.03):
                stream = client.chat.stream(model="m", messages=MSG, extra_headers=DRIP)
                pieces: list[str] = []

                async def canceller(
                    target: fluxstream.ReplyStream = stream, d: float = delay
                ) -> None:
                    await anyio.sleep(d)
                    target.cancel()  # while the consumer waits for bytes or for a frame

                with anyio.fail_after(10):
                    async with anyio.create_task_group() as tg, stream:
                        tg.start_soon(canceller)
                        async for piece in stream.text(coalesce=0.02):
                            pieces.append(piece)
                assert stream.outcome is fluxstream.Outcome.CANCELLED, stream.reply
                assert stream.reply.text.startswith("".join(pieces))
        await settle()
    assert unraisable == []


async def test_aclose_from_another_task_under_coalesced_text_ends_cancelled(
    server: Any, unraisable: list[str]
) -> None:
    async with pooled(server) as client:
        for _ in range(STREAMS):
            stream = client.chat.stream(model="m", messages=MSG, extra_headers=DRIP)

            async def closer(target: fluxstream.ReplyStream = stream) -> None:
                await anyio.sleep(0.03)
                await target.aclose()

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(closer)
                    async with stream:
                        async for _piece in stream.text(coalesce=0.005):
                            pass
            assert stream.outcome is fluxstream.Outcome.CANCELLED
        await settle()
    assert unraisable == []


async def test_aclose_from_another_task_under_plain_iteration_ends_cancelled(
    server: Any, unraisable: list[str]
) -> None:
    async with pooled(server) as client:
        for _ in range(STREAMS):
            stream = client.chat.stream(model="m", messages=MSG, extra_headers=DRIP)

            async def closer(target: fluxstream.ReplyStream = stream) -> None:
                await anyio.sleep(0.03)
                await target.aclose()

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(closer)
                    async with stream:
                        async for _event in stream:
                            pass
            assert stream.outcome is fluxstream.Outcome.CANCELLED
        await settle()
    assert unraisable == []


async def test_cancelling_while_the_connection_opens_is_a_plain_cancel(
    server: Any, unraisable: list[str]
) -> None:
    """No BaseExceptionGroup from inside the HTTP library, outcome ``cancelled``, and the
    pool is whole afterwards."""
    slow = {"X-Fluxstream-Fault": "delay=2"}
    async with pooled(server) as client:
        for delay in (0.0, 0.001, 0.01, 0.05):
            for _ in range(2):
                stream = client.chat.stream(model="m", messages=MSG, extra_headers=slow)
                with anyio.move_on_after(delay) as scope:
                    async with stream:
                        pass
                assert scope.cancelled_caught
                assert stream.outcome is fluxstream.Outcome.CANCELLED, stream.reply.end_reason
        for _ in range(STREAMS):
            with anyio.fail_after(10):
                reply = await client.chat.complete(model="m", messages=MSG)
            assert reply.outcome is fluxstream.Outcome.DONE
        await settle()
    assert unraisable == []


async def test_closing_before_the_body_ended_finishes_the_http_generators(
    server: Any, unraisable: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every async generator httpx made for a body is finished when the stream closes, not
    left suspended for the garbage collector (a ResourceWarning each under trio)."""
    made: list[Any] = []
    for name in ("aiter_bytes", "aiter_raw"):
        original = getattr(httpx.Response, name)

        def recording(self: httpx.Response, *args: Any, _original: Any = original) -> Any:
            generator = _original(self, *args)
            made.append(generator)
            return generator

        monkeypatch.setattr(httpx.Response, name, recording)
    long = [{"role": "user", "content": "a long reply please " * 40}]
    async with pooled(server) as client:
        # Dripped (the reader waits on the socket) and at full speed (the rest of the body is
        # already buffered under httpx when the stream closes: the soak's finding).
        for coalesce, headers in [(None, DRIP), (0.005, DRIP), (None, {}), (0.005, {})]:
            for _ in range(STREAMS):
                stream = client.chat.stream(model="m", messages=long, extra_headers=headers)
                async with stream:
                    async for _piece in stream.text(coalesce=coalesce):
                        break
                assert stream.outcome in (fluxstream.Outcome.CANCELLED, fluxstream.Outcome.DONE)
                unfinished = [g for g in made if g.ag_frame is not None]
                assert unfinished == [], f"coalesce={coalesce} headers={headers}"
        await settle()
    assert made and unraisable == []


async def test_aclose_from_another_task_before_the_response_head_frees_the_connection(
    server: Any, unraisable: list[str]
) -> None:
    """The soak's finding (tests/client/test_leaks_under_random_faults.py): aclose() while the
    request waits
    for its head must interrupt the send, or the response that arrives later is never closed."""
    slow = {"X-Fluxstream-Fault": "delay=0.2"}
    async with pooled(server) as client:
        for _ in range(STREAMS):
            stream = client.chat.stream(model="m", messages=MSG, extra_headers=slow)

            async def close_soon(target: fluxstream.ReplyStream = stream) -> None:
                await anyio.sleep(0.05)  # while the request waits for the head
                await target.aclose()

            with anyio.fail_after(10):  # a leak shows as PoolTimeout (2 s) from stream 6 on
                async with anyio.create_task_group() as tg:
                    tg.start_soon(close_soon)
                    async with stream:
                        async for _event in stream:
                            pass
            assert stream.outcome is fluxstream.Outcome.CANCELLED
        with anyio.fail_after(5):
            reply = await client.chat.complete(model="m", messages=MSG)
        assert reply.outcome is fluxstream.Outcome.DONE
        await settle()
    assert unraisable == []
