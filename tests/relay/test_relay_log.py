"""The reply log contract, run against the memory log and a real Redis alike.

The upstream is always the embedded server (real sockets on 127.0.0.1), whose replies are
known in advance, so every follower's text is compared with the exact reply.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from relay_support import (
    Followed,
    cancel_after,
    expected_text,
    follow_all,
    lapse_lease,
    request,
)

import fluxstream
from fluxstream.errors import RelayKeyError, RelayPositionError
from fluxstream.relay import (
    CANCELLED_BY_RELAY,
    MemoryReplyLog,
    Position,
    ReplyLog,
    parse_position,
    produce,
    to_sse,
)
from fluxstream.server import ServerThread
from fluxstream.sse import SSEDecoder

pytestmark = pytest.mark.anyio

MakeLog = Callable[..., ReplyLog]


async def test_followers_joining_at_start_middle_and_after_end_get_the_exact_reply(
    make_log: MakeLog, upstream: ServerThread
) -> None:
    producer_log, other = make_log(), make_log()
    req = request(tokens=80)
    expected = expected_text(req)
    results: dict[str, Followed] = {}

    async def follower(name: str, log: ReplyLog, **options: Any) -> None:
        results[name] = await follow_all(log, "join", **options)

    async with fluxstream.AsyncClient(upstream.base_url) as client:
        async with anyio.create_task_group() as tg:
            recorded = producer_log.record(client.chat.stream(content_key="join", **req))
            async with recorded:
                tg.start_soon(follower, "start", other)
                shown = ""
                async for event in recorded:
                    if isinstance(event, fluxstream.TextDelta):
                        shown += event.text
                        if len(shown) > len(expected) // 2 and "middle" not in results:
                            results["middle"] = Followed()  # reserve: start once
                            tg.start_soon(follower, "middle", other)
            assert recorded.log_error is None and shown == expected
    results["after"] = await follow_all(other, "join")
    for name, seen in results.items():
        seen.check()
        assert seen.text == expected, name
        assert seen.end.outcome is fluxstream.Outcome.DONE
    # The positions are the same for everyone: a follower that resumes after any position a
    # follower saw gets exactly the rest.
    full = results["after"].events
    cut = random.Random(7).randrange(1, len(full) - 1)
    rest = await follow_all(other, "join", after=full[cut - 1].id)
    assert [e.event for e in rest.events] == [e.event for e in full[cut:]]


async def test_a_fast_reply_costs_a_handful_of_writes_per_frame(
    make_log: MakeLog, server_factory: Callable[..., ServerThread]
) -> None:
    upstream = server_factory(profile="openai", faults="drip=0.001")
    log = make_log(frame=0.05)
    req = request(tokens=300)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        started = time.monotonic()
        recorded = log.record(client.chat.stream(content_key="frames", **req))
        async with recorded:
            async for _ in recorded:
                pass
        elapsed = time.monotonic() - started
    seen = await follow_all(log, "frames")
    seen.check()
    assert seen.text == expected_text(req)
    deltas = sum(1 for e in seen.events if e.event.type == "text")
    # One write per 50 ms frame at most (plus the first and the end), far fewer than tokens.
    assert recorded.writes <= elapsed / 0.05 + 3, (recorded.writes, elapsed)
    assert deltas < 300 / 3


async def test_cancel_from_another_worker_stops_the_upstream_and_ends_every_follower(
    make_log: MakeLog, server_factory: Callable[..., ServerThread]
) -> None:
    upstream = server_factory(profile="openai", faults="drip=0.01")
    producer_log, other = make_log(), make_log()
    req = request(tokens=1000)  # 10 s at the drip: the cancel lands long before the end
    followers: list[Followed] = []

    async def follower() -> None:
        followers.append(await follow_all(other, "stop"))

    async with fluxstream.AsyncClient(upstream.base_url) as client:
        recorded = producer_log.record(client.chat.stream(content_key="stop", **req))

        def follow(tg: Any) -> None:
            tg.start_soon(follower)
            tg.start_soon(follower)

        _, asked = await cancel_after(recorded, other, 10, during=follow)
    record = await upstream.records.wait_disconnect(timeout=10.0)
    # Stopped at once, not at the reply's end (10 s after the cancel): the bound leaves a
    # loaded machine's stalled loop its slack.
    assert record.time - asked < 3.0, record.time - asked
    assert not record.completed
    assert recorded.outcome is fluxstream.Outcome.CANCELLED
    assert len(followers) == 2
    for seen in followers:
        seen.check()
        assert seen.end.outcome is fluxstream.Outcome.CANCELLED
        assert expected_text(req).startswith(seen.text) and seen.text
    # Abort and resume together: the cancelled reply is still there, from the start.
    again = await follow_all(other, "stop")
    assert again.text == followers[0].text
    assert again.end.outcome is fluxstream.Outcome.CANCELLED
    assert await other.cancel("stop") is fluxstream.Outcome.CANCELLED  # already ended: kept


async def test_cancel_without_a_live_producer_records_cancelled(make_log: MakeLog) -> None:
    log = make_log(lease=0.2)
    await log._create("orphan", "gone", {"key": "orphan"})
    await anyio.sleep(0.3)  # the lease lapses
    assert await log.cancel("orphan") is fluxstream.Outcome.CANCELLED
    seen = await follow_all(log, "orphan")
    assert seen.end.outcome is fluxstream.Outcome.CANCELLED
    assert seen.end.reason == CANCELLED_BY_RELAY


async def test_a_producer_that_stops_writing_is_reported_lost(make_log: MakeLog) -> None:
    log = make_log(lease=0.3)
    await log._create("lost", "gone", {"key": "lost"})
    started = time.monotonic()
    seen = await follow_all(log, "lost")
    assert seen.end.outcome is fluxstream.Outcome.TRUNCATED
    assert seen.end.reason == "producer lost"
    # Within the lease (plus one poll and a loaded machine's slack, as in the SIGKILL test;
    # unnoticed, the follow would end with the reply's TTL of an hour, or never).
    assert time.monotonic() - started < 0.3 + 2.0


async def test_eventsource_reconnects_with_last_event_id_on_the_other_worker(
    make_log: MakeLog, upstream: ServerThread
) -> None:
    """A browser-like client: reads the relay's SSE bytes, is cut at a random byte, reconnects
    to the other worker with ``Last-Event-ID``, and renders by offset."""
    workers = [make_log(), make_log()]
    req = request(tokens=120)
    expected = expected_text(req)
    rng = random.Random(12)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce, client.chat.stream(content_key="es", **req), workers[0])
            with anyio.fail_after(10):  # until the reply exists (the producer created it)
                for _ in range(2000):  # the deadline ends it first
                    if (await workers[0]._state("es")).exists:
                        break
                    await anyio.sleep(0.005)
            buffer: list[str] = []
            last_id: str | None = None
            ended = None
            connections = 0
            with anyio.fail_after(20):
                while ended is None:
                    worker = workers[connections % 2]
                    connections += 1
                    decoder = SSEDecoder()
                    budget = rng.randrange(1, 400)  # the cut, in bytes of this connection
                    sent = 0
                    source = to_sse(worker.follow("es", last_event_id=last_id))
                    async for chunk in source:
                        piece = chunk[: budget - sent]
                        sent += len(piece)
                        for sse in decoder.feed(piece):
                            last_id = sse.id  # EventSource keeps the id of dispatched events
                            event = fluxstream.relay.codec._EVENTS.validate_json(
                                "[" + sse.data + "]"
                            )[0]
                            if isinstance(event, fluxstream.TextDelta):
                                assert event.offset == len(buffer), "text shown twice or lost"
                                buffer.extend(event.text)
                            elif isinstance(event, fluxstream.End):
                                ended = event
                        if sent >= budget or ended is not None:
                            break
                    await source.aclose()  # type: ignore[attr-defined]
    assert "".join(buffer) == expected
    assert ended.outcome is fluxstream.Outcome.DONE
    assert connections > 3


async def test_bad_input_gets_typed_errors(make_log: MakeLog, upstream: ServerThread) -> None:
    log = make_log()
    with pytest.raises(RelayKeyError):
        await follow_all(log, "never-relayed")
    with pytest.raises(RelayKeyError):
        await log.cancel("never-relayed")
    odd = "a b{c}:*?\n\x00é" + "x" * 2000
    req = request(tokens=20)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        await produce(client.chat.stream(content_key=odd, **req), log)
        seen = await follow_all(log, odd)
        assert seen.text == expected_text(req)
        # A key is recorded once: a second producer's recording fails (typed, reported), its
        # own stream is not broken.
        again = log.record(client.chat.stream(content_key=odd, **req))
        async with again:
            async for _ in again:
                pass
        assert isinstance(again.log_error, RelayKeyError)
        assert again.reply.text == expected_text(req)
        # Keys that differ only in characters Redis cares about stay apart.
        await produce(client.chat.stream(content_key="x{y}", **request("one", 5)), log)
        await produce(client.chat.stream(content_key="x}y{", **request("two", 5)), log)
    assert (await follow_all(log, "x{y}")).text == expected_text(request("one", 5))
    assert (await follow_all(log, "x}y{")).text == expected_text(request("two", 5))
    for bad in ["abc", "1-2-3", "9" * 60, "-1-0", "1_0", "1-", "\n1-0x"]:
        with pytest.raises(RelayPositionError):
            await follow_all(log, odd, last_event_id=bad)
    last = seen.events[-1].position
    for past in [Position(last.entry + 1, 0), Position(last.entry, last.index + 1)]:
        with pytest.raises(RelayPositionError):
            await follow_all(log, odd, after=str(past))
    # After the very last event: an empty follow.
    empty = Followed()
    async for item in log.follow(odd, after=seen.events[-1].id):
        empty.events.append(item)
    assert empty.events == []
    assert parse_position(None) == parse_position("") == Position(0, 0)


@pytest.mark.trio_only
async def test_memory_log_on_trio(anyio_backend: str, upstream: ServerThread) -> None:
    log = MemoryReplyLog()
    req = request(tokens=40)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        async with anyio.create_task_group() as tg:
            seen: list[Followed] = []

            async def follower() -> None:
                seen.append(await follow_all(log, "trio"))

            recorded = log.record(client.chat.stream(content_key="trio", **req))
            async with recorded:
                tg.start_soon(follower)
                async for _ in recorded:
                    pass
    seen[0].check()
    assert seen[0].text == expected_text(req)


async def test_a_takeover_that_cannot_resume_leaves_the_reply_lost_not_broken(
    make_log: MakeLog,
) -> None:
    """A takeover client that cannot resume the stored token (another API, a bad token) must
    not crash the follower: the reply ends ``producer lost`` for everyone."""

    class Unresumable:
        class chat:
            @staticmethod
            def resume(token: Any) -> Any:
                raise ValueError("unsupported resume token version")

    # The producer's lease lapses once it wrote its entry, not on a clock that a stalled
    # loop could let run out before the entry is written.
    log = make_log()
    await log._create("cannot", "gone", {"key": "cannot", "body": {}})
    entry = fluxstream.relay.Entry(1, (fluxstream.TextDelta("cannot", 0, 0, "Hel"),))
    await log._append("cannot", "gone", entry, token={"version": 99, "key": "cannot"}, final=False)
    await lapse_lease(log, "cannot")
    seen = await follow_all(log, "cannot", takeover=Unresumable())
    assert seen.text == "Hel"
    assert seen.end.outcome is fluxstream.Outcome.TRUNCATED
    assert seen.end.reason == "producer lost"


async def test_complete_on_a_recorded_stream_records_everything(
    make_log: MakeLog, upstream: ServerThread
) -> None:
    log = make_log()
    req = request(tokens=30)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        async with log.record(client.chat.stream(content_key="complete", **req)) as recorded:
            reply = await recorded.complete()
    assert reply.text == expected_text(req)
    seen = await follow_all(log, "complete")
    assert seen.text == expected_text(req)
    assert seen.end.outcome is fluxstream.Outcome.DONE
