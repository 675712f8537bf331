"""The relay's economy under many streams: one writer per log batches the writes of every
recorded stream (one round trip per batch on Redis) without mixing their fates, and the
followers' tailer serves the entries it read from its cache, falling back to Redis for a
follower further behind. Run against the memory log and a real Redis alike where both apply.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from relay_support import Followed, expected_text, follow_all, request, steal_lease

import fluxstream
from fluxstream.errors import RelayLeaseLostError
from fluxstream.relay import ReplyLog
from fluxstream.relay._redis_connection import pack
from fluxstream.relay.log import Write
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MakeLog = Callable[..., ReplyLog]


def count_batches(log: ReplyLog) -> list[int]:
    """Wrap the log's batch write; the returned list gets each batch's size."""
    sizes: list[int] = []
    inner = log._write_many

    async def counted(writes: list[Write]) -> list[bool | Exception]:
        sizes.append(len(writes))
        return await inner(writes)

    log._write_many = counted  # type: ignore[method-assign]
    return sizes


async def test_the_streams_of_one_log_are_written_together_and_each_stays_exact(
    make_log: MakeLog, upstream: ServerThread
) -> None:
    log, other = make_log(frame=0.02), make_log()
    sizes = count_batches(log)
    req = request(tokens=60)
    expected = expected_text(req)
    keys = [f"batch-{i}" for i in range(12)]
    shown: dict[str, str] = {}
    elapsed: dict[str, float] = {}
    recorded: dict[str, Any] = {}

    async def produce(client: fluxstream.AsyncClient, key: str) -> None:
        started = time.monotonic()
        text = ""
        recorded[key] = log.record(client.chat.stream(content_key=key, **req))
        async with recorded[key] as stream:
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta):
                    text += event.text
        shown[key] = text
        elapsed[key] = time.monotonic() - started

    async with fluxstream.AsyncClient(upstream.base_url) as client:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for key in keys:
                    tg.start_soon(produce, client, key)
    for key in keys:
        assert recorded[key].log_error is None and shown[key] == expected
        # The pacing of one stream is unchanged: one write per frame at most (+ first, end).
        assert recorded[key].writes <= elapsed[key] / 0.02 + 3
        seen = await follow_all(other, key)
        seen.check()
        assert seen.text == expected
        assert seen.end.outcome is fluxstream.Outcome.DONE
    writes = sum(r.writes + r.refreshes for r in recorded.values())
    assert sum(sizes) == writes  # every write went through the log's batch call


class HeldStream:
    """The part of a stream a recorder uses, fed by the test (no network, no timing)."""

    def __init__(self, key: str) -> None:
        self.content_key = key
        self.outcome = fluxstream.Outcome.DONE
        self.reply = type("Reply", (), {"end_reason": None})()

    def resume_token(self) -> dict[str, Any]:
        return {"v": 1, "request": {"model": "m"}, "reply": {"choices": []}}

    def cancel(self) -> None:
        pass


async def test_what_is_due_together_is_written_in_one_batch(make_log: MakeLog) -> None:
    """Events that arrive for many streams before the writer looks go out in one call (one
    round trip on Redis), however many streams."""
    from fluxstream.relay.producer import Recorder

    # No lease refresh falls due while the test runs (a third of the lease after each
    # start), however slow a loaded machine makes the forty starts: it would be a batch of
    # its own.
    log = make_log(lease=600.0)
    sizes = count_batches(log)
    recorders = [Recorder(HeldStream(f"held-{i}"), log._access()) for i in range(40)]  # type: ignore[arg-type]
    for recorder in recorders:
        await recorder.start()
    await anyio.sleep(0.05)  # the writer is idle: nothing is due
    sizes.clear()
    for recorder in recorders:  # no await in between: all due at the writer's next look
        recorder.on_event(fluxstream.TextDelta("k", 0, 0, "hello"))
    for _ in range(500):  # the writer's round trip (bounded: 5 s)
        if sum(r.writes for r in recorders) == len(recorders):
            break
        await anyio.sleep(0.01)
    assert sizes == [len(recorders)]
    for recorder in recorders:
        await recorder.finish()
        assert recorder.log_error is None and recorder.writes == 2


async def test_a_stream_whose_lease_is_lost_stops_recording_alone(
    make_log: MakeLog, upstream: ServerThread
) -> None:
    """A stream its caller reads (``log.record(stream)``) goes on to its caller when its lease
    is lost: only its recording stops (see ``test_relay_lease_lost.py`` for a stream the
    relay alone reads, whose upstream is cancelled then)."""
    log = make_log()
    req = request(tokens=80)
    expected = expected_text(req)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        lost = log.record(client.chat.stream(content_key="lost", **req))
        kept = log.record(client.chat.stream(content_key="kept", **req))
        texts = {"lost": "", "kept": ""}

        async def consume(name: str, stream: Any) -> None:
            async with stream:
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        texts[name] += event.text
                        if name == "lost" and len(texts[name]) > 20 and "stolen" not in texts:
                            texts["stolen"] = ""
                            pending = steal_lease(log, "lost")
                            if pending is not None:
                                await pending

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(consume, "lost", lost)
                tg.start_soon(consume, "kept", kept)
    # The consumer of the stream that lost its lease still got the whole reply.
    assert texts["lost"] == expected and texts["kept"] == expected
    assert isinstance(lost.log_error, RelayLeaseLostError)
    assert kept.log_error is None
    seen = await follow_all(log, "kept")
    seen.check()
    assert seen.text == expected and seen.end.outcome is fluxstream.Outcome.DONE


@pytest.mark.parametrize("log_kind", ["redis"])
async def test_followers_behind_the_tailer_cache_read_redis_and_stay_exact(
    make_log: MakeLog, upstream: ServerThread
) -> None:
    producer_log, follower_log = make_log(frame=0.0), make_log()
    req = request(tokens=120)  # one entry per delta: more entries than the tailer keeps
    expected = expected_text(req)
    ranges: list[int] = []
    inner = follower_log._range  # type: ignore[attr-defined]

    async def counted(stream: str, after: int) -> Any:
        ranges.append(after)
        return await inner(stream, after)

    follower_log._range = counted  # type: ignore[attr-defined]
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        recorded = producer_log.record(client.chat.stream(content_key="cache", **req))
        await recorded.start()
        async with anyio.create_task_group() as tg:
            results: dict[str, Followed] = {}

            async def live() -> None:
                results["live"] = await follow_all(follower_log, "cache")

            tg.start_soon(live)
            async with recorded:
                async for _ in recorded:
                    pass
    assert recorded.writes > 60
    live_reads = len(ranges)
    # The live follower was woken by the tailer for each entry, and read nearly all of them
    # from its cache, not with a read of its own.
    assert live_reads < recorded.writes / 4, (live_reads, recorded.writes)
    # Still watched (the tailer lingers): one follower from the start (far behind the cache)
    # reads Redis, one from near the end is served from the cache; both exact.
    ranges.clear()
    full = await follow_all(follower_log, "cache")
    assert ranges and ranges[0] == 0
    near = full.events[-5]
    ranges.clear()
    rest = await follow_all(follower_log, "cache", after=near.id)
    assert not ranges
    assert [e.event for e in rest.events] == [e.event for e in full.events[-4:]]
    for seen in (results["live"], full):
        seen.check()
        assert seen.text == expected


def test_pack_writes_resp_bulk_strings() -> None:
    assert pack(["SET", "k", "wörd", 12, b"\x00\r\n"]) == (
        b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nw\xc3\xb6rd\r\n$2\r\n12\r\n$3\r\n\x00\r\n\r\n"
    )


async def test_a_stream_whose_write_cannot_be_built_stops_recording_alone(
    make_log: MakeLog, upstream: ServerThread
) -> None:
    """One stream's failure while its entry is prepared (here: its resume token cannot be
    read) is that stream's ``log_error``; the writer goes on for the others."""
    log = make_log()
    req = request(tokens=40)
    expected = expected_text(req)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        broken = log.record(client.chat.stream(content_key="unbuildable", **req))
        kept = log.record(client.chat.stream(content_key="buildable", **req))

        def fail(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("no token")

        broken.recorder._entry = fail  # type: ignore[method-assign]
        texts = {"unbuildable": "", "buildable": ""}

        async def consume(name: str, stream: Any) -> None:
            async with stream:
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        texts[name] += event.text

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(consume, "unbuildable", broken)
                tg.start_soon(consume, "buildable", kept)
    assert texts == {"unbuildable": expected, "buildable": expected}
    assert isinstance(broken.log_error, RuntimeError)
    assert kept.log_error is None
    seen = await follow_all(log, "buildable")
    assert seen.text == expected and seen.end.outcome is fluxstream.Outcome.DONE


async def test_a_stream_whose_events_are_all_trimmed_longer_than_the_lease_keeps_it(
    make_log: MakeLog, upstream: ServerThread
) -> None:
    """A takeover trims the resumed events that repeat the stored text, so for a while it has
    nothing to write; that while can outlast the lease (the stored token is up to a second
    behind). The lease must still be refreshed. Regression: such a stream sat in the writer's
    set of streams with something to write while it had nothing, which the refresh scan skips;
    its lease lapsed, a second taker took the reply over, the first lost its writes, and every
    follower ended "producer lost" with the text cut (the multi-process SIGKILL test failed
    about one run in three)."""
    from fluxstream.relay.producer import RecordedStream, Recorder

    # The trimming (2.5 s) outlasts the lease (1.2 s) twice over; the lease, refreshed every
    # 0.4 s, outlasts a loaded worker's stalled loop (one of 0.3 s lapsed under a stall of
    # 0.2 s). The reply (4 s at the drip) outlasts the trimming. No resume token is due
    # meanwhile (its write would refresh the lease too): only the refresh keeps the lease.
    lease, trimming = 1.2, 2.5
    log = make_log(lease=lease, token_interval=60.0)
    req = request(tokens=400)
    started = time.monotonic()

    def trim(event: Any) -> list[Any]:  # the first seconds repeat stored text: all dropped
        if time.monotonic() - started < trimming and not isinstance(event, fluxstream.End):
            return []
        return [event]

    async with fluxstream.AsyncClient(upstream.base_url) as client:
        stream = client.chat.stream(
            content_key="trimmed", extra_headers={"X-Fluxstream-Fault": "drip=0.01"}, **req
        )
        recorded = RecordedStream.adopt(
            stream, Recorder(stream, log._access(), key="trimmed", transform=trim)
        )
        with anyio.fail_after(30):
            async with recorded:
                async for _event in recorded:
                    pass
    assert time.monotonic() - started > trimming  # the stream outlasted the trimming
    assert recorded.log_error is None
    assert recorded.refreshes >= 1
    assert recorded.reply.outcome is fluxstream.Outcome.DONE
