"""A stream dropped without ``async with`` or ``aclose()`` closes its upstream when collected.

Breaking out of ``async for`` and dropping every reference left the socket open on the
default transport, and the server generated the reply to its end for nobody. On garbage
collection the stream now closes its connection on every transport and warns with a
``ResourceWarning``, as an unclosed file does. A stream that ended and closed, or was never
sent, warns nothing.
"""

from __future__ import annotations

import gc
import time
import warnings
from typing import Any

import pytest
from waiting import WITHIN

import fluxstream

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "Tell me a long story about garbage collection"}]
SLOW = {"X-Fluxstream-Fault": "drip=0.05"}


async def read_first_delta_and_drop(client: fluxstream.AsyncClient, how: str) -> None:
    stream = client.chat.stream(model="m", messages=MSG, extra_headers=SLOW)
    source: Any = stream if how == "events" else stream.text(coalesce=0.01)
    async for item in source:
        if how != "events" or isinstance(item, fluxstream.TextDelta):
            break  # and every reference goes with this frame


@pytest.mark.parametrize("transport", ["auto", "httpx"])
@pytest.mark.parametrize("how", ["events", "text-coalesced"])
async def test_a_dropped_stream_closes_its_connection_and_warns(
    server: Any, transport: str, how: str, anyio_backend: str
) -> None:
    async with fluxstream.AsyncClient(server.base_url, transport=transport) as client:
        with pytest.warns(ResourceWarning, match="unclosed <ReplyStream open "):
            await read_first_delta_and_drop(client, how)
            gc.collect()
        dropped = time.monotonic()
        # a stream left open is closed only with the client, or completes: never matched here
        record = await server.records.wait_disconnect(timeout=WITHIN, completed=False)
    assert record.time - dropped < 2.0  # the server's thread, on a loaded machine
    (response,) = server.records.responses
    assert response.ending == "client-disconnect"


@pytest.mark.parametrize("transport", ["auto", "httpx"])
async def test_a_finished_or_unsent_stream_warns_nothing(
    server: Any, transport: str, anyio_backend: str
) -> None:
    async with fluxstream.AsyncClient(server.base_url, transport=transport) as client:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            stream = client.chat.stream(model="m", messages=MSG)
            async for _ in stream:
                pass
            assert stream.outcome is fluxstream.Outcome.DONE
            del stream
            unsent = client.chat.stream(model="m", messages=MSG)
            del unsent
            gc.collect()
