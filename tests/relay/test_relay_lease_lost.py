"""A producer that lost its lease (another worker took the reply over, or its followers gave
it up: a pause longer than the lease) stops recording; when the relay is the stream's only
consumer it also cancels the upstream, so the rest of the reply is not generated -- and
billed -- twice. (A stream its caller reads goes on to its caller:
``test_relay_batching.py::test_a_stream_whose_lease_is_lost_stops_recording_alone``.) Memory
and Redis logs alike; the upstream is the embedded server, which records when the client hung
up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from relay_support import request, steal_lease

import fluxstream
from fluxstream.errors import RelayLeaseLostError
from fluxstream.relay import ReplyLog, produce
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MakeLog = Callable[..., ReplyLog]

#: Tokens of the reply, at the drip below: 10 s, so the lease is lost mid-reply, and the
#: reply's end is far from the cut whatever a loaded machine adds.
TOKENS = 1000
DRIP = 0.01


async def _steal_after(log: ReplyLog, key: str, entries: int) -> float:
    """Once ``entries`` entries of ``key`` are written, give its lease to another owner (what
    a takeover does after the producer's lease lapsed); returns when."""
    with anyio.fail_after(10):
        for _ in range(2000):  # the deadline ends it first
            state = await log._state(key)
            if state.last >= entries:
                break
            await anyio.sleep(0.005)
    pending = steal_lease(log, key)
    if pending is not None:
        await pending
    return time.monotonic()


async def _cut_short(upstream: ServerThread, stolen_at: float) -> None:
    """The upstream saw the client hang up mid-reply, soon after the lease was lost (the
    producer learns it with its next write, a frame later), and wrote no more."""
    record = await upstream.records.wait_disconnect(10.0, completed=False)
    # At once (plus a loaded machine's slack), not at the reply's end, 10 s after the steal.
    assert record.time - stolen_at < 3.0, record.time - stolen_at
    [response] = upstream.records.responses
    assert response.ending == "client-disconnect"
    assert response.events < TOKENS / 2


async def test_produce_cancels_the_upstream_when_the_lease_is_lost(
    make_log: MakeLog, server_factory: Callable[..., ServerThread],
) -> None:
    """``produce()`` is the stream's only consumer: a lost lease cancels the upstream (outcome
    ``cancelled``). It used to read the model to the end while the new owner streamed the
    same reply."""
    upstream = server_factory(profile="openai", faults=f"drip={DRIP}")
    log = make_log(lease=5.0)
    replies: list[Any] = []
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        stream = client.chat.stream(content_key="lost", **request(tokens=TOKENS))

        async def producer() -> None:
            replies.append(await produce(stream, log))

        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            stolen_at = await _steal_after(log, "lost", 3)
    assert replies[0].outcome is fluxstream.Outcome.CANCELLED
    assert isinstance(stream.log_error, RelayLeaseLostError)  # type: ignore[attr-defined]
    await _cut_short(upstream, stolen_at)


async def test_a_recorded_stream_said_to_be_its_only_consumer_cancels_too(
    make_log: MakeLog, server_factory: Callable[..., ServerThread],
) -> None:
    """``log.record(stream, only_consumer=True)``: a stream read only to be recorded (a
    background task that drains it, as ``examples/relay_app.py`` does) is cancelled alike."""
    upstream = server_factory(profile="openai", faults=f"drip={DRIP}")
    log = make_log(lease=5.0)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        recorded = log.record(
            client.chat.stream(content_key="drained", **request(tokens=TOKENS)),
            only_consumer=True,
        )

        async def drain() -> None:
            async with recorded:
                async for _ in recorded:
                    pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            stolen_at = await _steal_after(log, "drained", 3)
    assert recorded.outcome is fluxstream.Outcome.CANCELLED
    assert isinstance(recorded.log_error, RelayLeaseLostError)
    await _cut_short(upstream, stolen_at)
