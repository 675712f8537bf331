"""``aclose()`` from another task while the owner's read is inside the body's generators.

The interleaving behind a soak finding, made deterministic: the close cannot finish httpx's
chain of async generators (the owner's read is running in it, "already running"), and the
owner's read then *returns bytes* instead of raising, so nothing unwinds the chain. Before the
fix it stayed suspended (under trio a ``ResourceWarning`` per generator when collected; the
random version in ``test_leaks_under_random_faults.py`` hit it about one stream in fifteen under
trio and
rarely under asyncio). Now the owner's own close finishes it, in the task that iterated it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

import fluxstream
from fluxstream.server import FAULT_HEADER, ServerThread

pytestmark = pytest.mark.anyio

MESSAGES = [{"role": "user", "content": "aclose during a read"}]
#: The read during which the other task closes the stream (a few deltas into the body).
PARKED_READ = 3


async def test_aclose_from_another_task_while_a_read_returns_bytes_finishes_the_generators(
    server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Any] = []
    parked = anyio.Event()  # the owner's read is inside the chain, holding bytes
    release = anyio.Event()  # aclose() has returned: let that read return its bytes
    original = httpx.Response.aiter_bytes

    def gated_bytes(self: httpx.Response, *args: Any) -> AsyncIterator[bytes]:
        inner = original(self, *args)
        made.append(inner)

        async def gated() -> AsyncIterator[bytes]:
            reads = 0
            async for chunk in inner:
                reads += 1
                if reads == PARKED_READ:
                    parked.set()
                    await release.wait()
                yield chunk

        outer = gated()
        made.append(outer)
        return outer

    original_raw = httpx.Response.aiter_raw

    def recording_raw(self: httpx.Response, *args: Any) -> AsyncIterator[bytes]:
        generator = original_raw(self, *args)
        made.append(generator)
        return generator

    monkeypatch.setattr(httpx.Response, "aiter_bytes", gated_bytes)
    monkeypatch.setattr(httpx.Response, "aiter_raw", recording_raw)
    http = httpx.AsyncClient()
    async with fluxstream.AsyncClient(base_url=server.base_url, http_client=http) as client:
        stream = client.chat.stream(
            model="fluxstream-echo", messages=MESSAGES, max_tokens=200,
            extra_headers={FAULT_HEADER: "drip=0.005"},
        )

        async def close_while_parked() -> None:
            await parked.wait()
            await stream.aclose()
            release.set()

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(close_while_parked)
                async with stream:
                    async for _ in stream:
                        pass
        assert release.is_set()  # the interleaving really happened
        assert stream.outcome is fluxstream.Outcome.CANCELLED
        suspended = [g for g in made if g.ag_frame is not None]
        assert suspended == [], f"{len(suspended)} of {len(made)} generators suspended"
    await http.aclose()
