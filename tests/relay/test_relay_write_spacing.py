"""The writer's round-trip spacing: a round trip starts no sooner than ``spacing`` after the
previous one started, so writes that become due in separate event-loop passes under load
share one round trip; a write after a quiet spell goes at once; nothing waits longer than
the spacing beyond its due time; spacing 0 is the writer as it was. Driven by hand-made
streams and a batch write that notes each call and when it started (the writer's clock,
``time.monotonic``), on asyncio and on trio; then on a real Redis through the recorder.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from relay_support import RedisServer, follow_all

import fluxstream
from fluxstream.relay import MemoryReplyLog, RedisReplyLog
from fluxstream.relay.writer import Write, Writer, current_loop

pytestmark = pytest.mark.anyio
BOTH = pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])


class Hand:
    """A stream whose writes the test makes due: each :meth:`due` is one write, going
    whenever the writer takes it (no frame of its own); :meth:`end` makes its last one."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.pending: list[float] = []  # when each waiting write became due
        self.refresh = False
        self.ending = False
        self.ended = False
        self.done = anyio.Event()
        #: (when it became due, when the round trip that took it started)
        self.held: list[tuple[float, float]] = []

    def due(self, writer: Writer) -> None:
        self.pending.append(time.monotonic())
        writer.wake(self)

    def end(self, writer: Writer) -> None:
        self.ending = True
        self.due(writer)

    def ready_at(self) -> float:
        return self.pending[0] if self.pending else math.inf

    def idle_due(self, now: float) -> bool:
        return self.refresh

    def take(self, now: float) -> list[Write]:
        if not self.pending:  # a lease refresh
            self.refresh = False
            return [Write(self.key, "me")]
        self.held.extend((at, now) for at in self.pending)
        self.pending = []
        return [Write(self.key, "me", final=self.ending)]

    def written(self, outcomes: list[tuple[Write, Any]], now: float) -> bool:
        assert all(result is False for _, result in outcomes)
        self.ended = any(write.final for write, _ in outcomes)
        if self.ended:
            self.done.set()
        return self.ended

    def broken(self, exc: BaseException) -> None:
        raise AssertionError(f"{self.key} broke: {exc!r}")

    def abandoned(self) -> None:
        pass


class Calls:
    """The batch write: notes each call (the keys written, refreshes marked, and when it
    started) and lets the test wait for the n-th."""

    def __init__(self) -> None:
        self.keys: list[list[str]] = []
        self.started: list[float] = []
        self._changed = anyio.Event()

    async def __call__(self, writes: list[Write]) -> list[bool | Exception]:
        self.started.append(time.monotonic())
        self.keys.append([w.key + ("!" if w.final else "") for w in writes])
        self._changed.set()
        self._changed = anyio.Event()
        await anyio.lowlevel.checkpoint()  # a round trip gives the loop a pass
        return [False for _ in writes]

    async def reach(self, count: int) -> None:
        with anyio.fail_after(10):
            while len(self.keys) < count:
                await self._changed.wait()


def writing(
    spacing: float, names: list[str], *, lease: float = 600.0
) -> tuple[Calls, Writer, list[Hand]]:
    """A writer with ``spacing`` on a noting batch write, writing for a stream per name."""
    calls = Calls()
    writer = Writer(calls, lease, current_loop(), spacing)
    streams = [Hand(name) for name in names]
    for stream in streams:
        writer.add(stream)
    return calls, writer, streams


def count_pauses(writer: Writer) -> list[float]:
    """The writer's pauses for the spacing (how long each was asked to be)."""
    pauses: list[float] = []
    pause = writer._wake.pause

    async def counted(within: float) -> None:
        pauses.append(within)
        await pause(within)

    writer._wake.pause = counted  # type: ignore[method-assign]
    return pauses


async def finish(writer: Writer, streams: list[Hand]) -> None:
    """End every stream and wait until the writer has written their ends and stopped."""
    for stream in streams:
        if not stream.ended:
            stream.end(writer)
    with anyio.fail_after(10):
        for stream in streams:
            await stream.done.wait()
    for _ in range(100):  # its loop sees no stream left and ends (bounded)
        if not writer._running:
            break
        await anyio.lowlevel.checkpoint()
    assert not writer._running


@BOTH
async def test_writes_due_in_consecutive_passes_within_the_spacing_share_a_round_trip(
    anyio_backend: str,
) -> None:
    spacing = 1.0  # the premise below holds through a loaded machine's stall of a second
    calls, writer, streams = writing(spacing, [f"k{i}" for i in range(4)])
    streams[0].due(writer)
    await calls.reach(1)
    for stream in streams[1:]:  # each in its own pass, as upstream deltas arrive
        stream.due(writer)
        await anyio.lowlevel.checkpoint()
        await anyio.lowlevel.checkpoint()
    # The premise: all this happened well within the spacing of the first round trip.
    assert time.monotonic() - calls.started[0] < spacing
    await calls.reach(2)
    assert calls.keys == [["k0"], ["k1", "k2", "k3"]]
    assert calls.started[1] - calls.started[0] >= spacing - 0.002
    await finish(writer, streams)


@BOTH
async def test_a_write_after_a_quiet_spell_goes_at_once(anyio_backend: str) -> None:
    spacing = 0.2
    calls, writer, (first, second) = writing(spacing, ["first", "second"])
    pauses = count_pauses(writer)
    first.due(writer)  # no round trip before it: at once
    await calls.reach(1)
    # The spacing passes with nothing due.
    await anyio.sleep(max(0.0, calls.started[0] + spacing - time.monotonic()) + 0.01)
    assert time.monotonic() >= calls.started[0] + spacing
    second.due(writer)
    await calls.reach(2)
    assert pauses == []
    assert calls.keys == [["first"], ["second"]]
    # No wait: the round trip started in the writer's next pass (a generous bound for load).
    assert calls.started[1] - second.held[0][0] < spacing
    await finish(writer, [first, second])


@BOTH
async def test_round_trips_are_spaced_and_nothing_waits_longer_than_the_spacing(
    anyio_backend: str,
) -> None:
    """Under a seeded random load: round trips start at least the spacing apart, writes
    share them, and no write waits much beyond the spacing after it became due (the bound
    is generous for a loaded machine; the spacing between starts is exact)."""
    spacing = 0.03
    calls, writer, streams = writing(spacing, [f"s{i}" for i in range(20)])
    draw = random.Random(40)
    for _ in range(150):
        draw.choice(streams).due(writer)
        if draw.random() < 0.3:
            await anyio.sleep(draw.random() * 0.004)
        else:
            await anyio.lowlevel.checkpoint()
    await finish(writer, streams)
    gaps = [b - a for a, b in zip(calls.started, calls.started[1:], strict=False)]
    assert min(gaps) >= spacing - 0.002
    assert max(len(keys) for keys in calls.keys) > 1
    held = [start - due for stream in streams for due, start in stream.held]
    assert len(held) == 150 + len(streams)
    assert max(held) < spacing + 0.5


@BOTH
async def test_spacing_zero_never_waits(anyio_backend: str) -> None:
    """With no spacing the writer is what it was: each write goes in the writer's next pass
    after it became due (or with the round trip out, in the next one), never paused."""
    calls, writer, streams = writing(0.0, [f"z{i}" for i in range(3)])
    pauses = count_pauses(writer)
    for i in range(9):
        streams[i % 3].due(writer)
        await calls.reach(i + 1)
    assert calls.keys == [[f"z{i % 3}"] for i in range(9)]
    assert pauses == []
    await finish(writer, streams)
    assert pauses == []


@BOTH
async def test_the_end_and_a_lease_refresh_still_go_under_spacing(anyio_backend: str) -> None:
    spacing = 0.2
    # A lease of 0.3 s: a refresh scan every 0.05 s.
    calls, writer, (busy, idle) = writing(spacing, ["busy", "idle"], lease=0.3)
    busy.due(writer)
    await calls.reach(1)
    idle.refresh = True  # its refresh is found by the next scan, once the spacing passed
    busy.end(writer)  # its end, as soon as the spacing allows
    await calls.reach(2)
    assert sorted(calls.keys[1]) == ["busy!", "idle"]
    assert calls.started[1] - calls.started[0] >= spacing - 0.002
    with anyio.fail_after(10):  # the round trip's outcome reaches the stream
        await busy.done.wait()
    assert not idle.ended
    assert calls.started[1] - busy.held[-1][0] < spacing + 0.5
    await finish(writer, [idle])
    assert calls.keys[-1] == ["idle!"]


def test_the_asyncio_pause_ignores_set_and_leaves_the_kept_timer() -> None:
    """A pause ends at its time, not at a ``set()`` (a stream woken meanwhile joins the
    next round trip without a scan per wake-up), on a timer of its own: the timer kept
    between waits stays as it was, and a later wait still wakes on ``set()``."""
    import asyncio

    from fluxstream.relay.writer import _LoopWake

    async def main() -> None:
        loop = asyncio.get_running_loop()
        wake = _LoopWake(loop)
        waiting = asyncio.ensure_future(wake.wait(60.0))
        await asyncio.sleep(0)
        kept = wake._timer
        wake.set()
        await asyncio.wait_for(waiting, 5)
        wake.clear()
        started = loop.time()
        pausing = asyncio.ensure_future(wake.pause(0.1))
        await asyncio.sleep(0)
        wake.set()
        await asyncio.sleep(0)
        assert not pausing.done()
        await asyncio.wait_for(pausing, 5)
        assert loop.time() - started >= 0.1 - 0.002
        assert wake._timer is kept and kept is not None and not kept.cancelled()
        # Set during the pause: the next wait returns at once.
        await asyncio.wait_for(wake.wait(60.0), 5)
        wake.clear()
        # A cancelled pause takes its timer away.
        def live() -> list[asyncio.TimerHandle]:
            return [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]

        assert live() == [kept]
        pausing = asyncio.ensure_future(wake.pause(120.0))
        await asyncio.sleep(0)
        assert len(live()) == 2
        pausing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pausing
        assert live() == [kept]
        wake.stop()
        assert kept.cancelled()

    asyncio.run(main())


@pytest.mark.parametrize("bad", [-0.001, math.nan, math.inf, -math.inf])
def test_a_bad_write_spacing_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="write_spacing"):
        RedisReplyLog("redis://127.0.0.1:1/0", write_spacing=bad)


def test_the_logs_choose_their_spacing() -> None:
    """Redis's batch write costs a round trip, the memory log's none."""
    assert RedisReplyLog("redis://127.0.0.1:1/0").write_spacing > 0
    assert RedisReplyLog("redis://127.0.0.1:1/0", write_spacing=0).write_spacing == 0
    assert MemoryReplyLog().write_spacing == 0


async def test_recorded_streams_share_round_trips_on_redis_and_stay_exact(
    redis_server: RedisServer,
) -> None:
    """Through the recorder on a real Redis: events that arrive in separate passes go in
    one round trip after the spacing, and every reply reads back whole."""
    from test_relay_batching import HeldStream

    from fluxstream.relay.producer import Recorder

    # A spacing of a second: the premise below (every delta in before the spacing passed)
    # holds through a loaded machine's stall; no lease refresh falls due meanwhile.
    spacing = 1.0
    log = RedisReplyLog(redis_server.url, prefix="spacing:", frame=0.0, write_spacing=spacing,
                        lease=60.0)
    sizes: list[int] = []
    batch = anyio.Event()
    inner = log._write_many

    async def counted(writes: list[Write]) -> list[bool | Exception]:
        nonlocal batch
        results = await inner(writes)
        sizes.append(len(writes))
        batch.set()
        batch = anyio.Event()
        return results

    log._write_many = counted  # type: ignore[method-assign]
    recorders = [Recorder(HeldStream(f"sp-{i}"), log._access()) for i in range(6)]  # type: ignore[arg-type]
    try:
        for recorder in recorders:
            await recorder.start()
        sizes.clear()
        recorders[0].on_event(fluxstream.TextDelta("k", 0, 0, "a"))
        with anyio.fail_after(10):
            await batch.wait()
        started = time.monotonic()
        for recorder in recorders:  # one delta each, in its own pass
            offset = 1 if recorder is recorders[0] else 0
            recorder.on_event(fluxstream.TextDelta("k", 0, offset, "b"))
            await anyio.lowlevel.checkpoint()
        assert time.monotonic() - started < spacing  # the premise
        with anyio.fail_after(10):
            await batch.wait()
        assert sizes == [1, len(recorders)]
        async with anyio.create_task_group() as tg:  # the ends together: one spacing, not six
            for recorder in recorders:
                tg.start_soon(recorder.finish)
        for recorder in recorders:
            assert recorder.log_error is None
        for i in range(len(recorders)):
            seen = await follow_all(log, f"sp-{i}")
            assert seen.text == ("ab" if i == 0 else "b")
            assert seen.end.outcome is fluxstream.Outcome.DONE
    finally:
        await log.aclose()
