"""A producer that lost its lease (another worker took the reply over, or its followers gave
it up: a pause longer than the lease) stops recording; when the relay is the stream's only
consumer it also cancels the upstream, so the rest of the reply is not generated -- and
billed -- twice. A stream its caller reads keeps going to its caller. Memory and Redis logs
alike; the upstream is the embedded server, which records when the client hung up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from relay_support import expected_text, request

import fluxstream
from fluxstream.errors import RelayLeaseLostError
from fluxstream.relay import ReplyLog, produce
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MakeLog = Callable[..., ReplyLog]

#: Tokens of the reply, at the drip below: 5 s, so the lease is lost mid-reply.
TOKENS = 500
DRIP = 0.01


async def _steal_after(log: ReplyLog, log_kind: str, key: str, entries: int) -> float:
    """Once ``entries`` entries of ``key`` are written, give its lease to another owner (what
    a takeover does after the producer's lease lapsed); returns when."""
    with anyio.fail_after(10):
        for _ in range(2000):  # the deadline ends it first
            state = await log._state(key)
            if state.last >= entries:
                break
            await anyio.sleep(0.005)
    if log_kind == "memory":
        log._replies[key].owner = "another worker"  # type: ignore[attr-defined]
    else:
        await log.redis.set(log.keys(key)["lease"], "another worker")  # type: ignore[attr-defined]
    return time.monotonic()


async def _cut_short(upstream: ServerThread, stolen_at: float) -> None:
    """The upstream saw the client hang up mid-reply, soon after the lease was lost (the
    producer learns it with its next write, a frame later), and wrote no more."""
    record = await upstream.records.wait_disconnect(2.0, completed=False)
    assert record.time - stolen_at < 0.5, record.time - stolen_at
    [response] = upstream.records.responses
    assert response.ending == "client-disconnect"
    assert response.events < TOKENS / 2


async def test_produce_cancels_the_upstream_when_the_lease_is_lost(
    make_log: MakeLog, log_kind: str, server_factory: Callable[..., ServerThread],
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
            stolen_at = await _steal_after(log, log_kind, "lost", 3)
    assert replies[0].outcome is fluxstream.Outcome.CANCELLED
    assert isinstance(stream.log_error, RelayLeaseLostError)  # type: ignore[attr-defined]
    await _cut_short(upstream, stolen_at)


async def test_a_recorded_stream_said_to_be_its_only_consumer_cancels_too(
    make_log: MakeLog, log_kind: str, server_factory: Callable[..., ServerThread],
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
            stolen_at = await _steal_after(log, log_kind, "drained", 3)
    assert recorded.outcome is fluxstream.Outcome.CANCELLED
    assert isinstance(recorded.log_error, RelayLeaseLostError)
    await _cut_short(upstream, stolen_at)


async def test_a_stream_its_caller_reads_keeps_going_to_its_caller(
    make_log: MakeLog, log_kind: str, server_factory: Callable[..., ServerThread],
) -> None:
    """``log.record(stream)`` read by its caller (the default): the caller shows the reply
    itself, so a lost lease stops the recording only; the caller reads the whole reply and
    ``log_error`` says why nothing more was recorded."""
    upstream = server_factory(profile="openai", faults="drip=0.002")
    log = make_log(lease=5.0)
    req = request(tokens=300)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        recorded = log.record(client.chat.stream(content_key="read", **req))
        text = ""
        async with anyio.create_task_group() as tg:

            async def read() -> None:
                nonlocal text
                async with recorded:
                    async for event in recorded:
                        if isinstance(event, fluxstream.TextDelta):
                            text += event.text

            tg.start_soon(read)
            await _steal_after(log, log_kind, "read", 3)
    assert recorded.outcome is fluxstream.Outcome.DONE
    assert text == expected_text(req)
    assert isinstance(recorded.log_error, RelayLeaseLostError)
    assert upstream.records.responses[0].ending == "complete"
