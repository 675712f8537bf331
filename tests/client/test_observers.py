"""Stream observers (``fluxstream._observe``) on real sockets: told when a stream opens, of each
event it delivers and exactly once when it ends, on every way a stream ends; an observer that
raises never breaks the stream. Run on asyncio and trio, and on httpx with ``--transport httpx``.
"""

from __future__ import annotations

import gc
import logging
import warnings
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import fluxstream
from fluxstream import Outcome, StreamInfo, StreamObserver, StreamStats, Timeouts
from fluxstream._core.progress import Progress
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hi there"}]
#: Events a little apart, so that a stream left early has not read its end already (a fast
#: server's whole reply can come in one read, and such a stream has ended ``done``).
SLOW = {"X-Fluxstream-Fault": "drip=0.02"}
NO_RESUME = ResumePolicy(last_event_id=False, starting_after=False)


class Seen:
    """Everything an observer was told, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.info: StreamInfo | None = None
        self.events: list[fluxstream.Event] = []
        self.ends: list[tuple[fluxstream.Reply, StreamStats]] = []

    def on_open(self, info: StreamInfo) -> None:
        self.calls.append("open")
        self.info = info

    def on_event(self, event: fluxstream.Event) -> None:
        self.calls.append("event")
        self.events.append(event)

    def on_end(self, reply: fluxstream.Reply, stats: StreamStats) -> None:
        self.calls.append("end")
        self.ends.append((reply, stats))

    def ended(self) -> tuple[fluxstream.Reply, StreamStats]:
        """The one end, after an open and every event."""
        assert self.calls.count("open") == 1 and self.calls[0] == "open", self.calls
        assert self.calls.count("end") == 1 and self.calls[-1] == "end", self.calls
        return self.ends[0]


async def test_a_stream_that_ends_done_is_observed_open_events_end(server: ServerThread) -> None:
    seen = Seen()
    delivered: list[fluxstream.Event] = []
    async with fluxstream.AsyncClient(server.base_url, observers=[seen]) as client:
        async with client.chat.stream(model="m", messages=MSG, max_tokens=12) as stream:
            async for event in stream:
                delivered.append(event)
            assert isinstance(stream, fluxstream.ReplyStream)
    reply, stats = seen.ended()
    assert seen.events == delivered
    assert seen.info == StreamInfo(stream.content_key, "chat/completions", "m", False)
    assert reply == stream.reply and reply.outcome is Outcome.DONE
    assert stats.attempts == 1 and stats.bytes > 0 and stats.content_events >= 12
    assert stats.time_to_first_token is not None and stats.duration is not None
    assert stats.time_to_last_token is not None
    assert stats.time_to_first_token <= stats.time_to_last_token <= stats.duration
    assert stats.time_per_chunk is not None and stats.time_per_chunk >= 0
    assert stats.observer_errors == 0


async def test_client_observers_come_first_then_the_calls_own(server: ServerThread) -> None:
    order: list[str] = []

    class Named(StreamObserver):  # a subclass: the callbacks it leaves out are no-ops
        def __init__(self, name: str) -> None:
            self.name = name

        def on_end(self, reply: fluxstream.Reply, stats: StreamStats) -> None:
            order.append(self.name)

    async with fluxstream.AsyncClient(server.base_url, observers=[Named("client")]) as client:
        await client.chat.complete(model="m", messages=MSG, observers=[Named("call")])
        await client.responses.complete(model="m", input="hi", observers=[Named("responses")])
        await client.messages.complete(
            model="m", messages=MSG, max_tokens=50, observers=[Named("messages")]
        )
    assert order == ["client", "call", "client", "responses", "client", "messages"]


async def test_a_truncated_stream_is_observed(server: ServerThread) -> None:
    seen = Seen()
    drop = {"X-Fluxstream-Fault": "drop-after-events=3"}
    async with fluxstream.AsyncClient(server.base_url, resume=NO_RESUME) as client:
        stream = client.chat.stream(model="m", messages=MSG, extra_headers=drop,
                                    observers=[seen])
        async with stream:
            async for _ in stream:
                pass
    reply, stats = seen.ended()
    assert reply.outcome is Outcome.TRUNCATED and stats.attempts == 1
    assert seen.events[-1] == fluxstream.End(Outcome.TRUNCATED, reply.end_reason)


async def test_a_resumed_stream_counts_its_attempts(server: ServerThread) -> None:
    seen = Seen()
    drop = {"X-Fluxstream-Fault": "drop-after-events=3,fail-first=1"}
    async with fluxstream.AsyncClient(server.base_url) as client:
        reply = await client.chat.complete(model="m", messages=MSG, extra_headers=drop,
                                           observers=[seen])
    _, stats = seen.ended()
    assert reply.outcome is Outcome.DONE and stats.attempts == 2 and stats.resumes == 1


async def test_a_failed_request_is_observed_and_its_error_raised(server: ServerThread) -> None:
    seen = Seen()
    refused = {"X-Fluxstream-Fault": "status=400"}
    async with fluxstream.AsyncClient(server.base_url) as client:
        with pytest.raises(fluxstream.APIStatusError):
            await client.chat.complete(model="m", messages=MSG, extra_headers=refused,
                                       observers=[seen])
    reply, stats = seen.ended()
    assert reply.outcome is Outcome.FAILED and seen.events == [] and stats.attempts == 1


async def test_a_stall_that_fails_the_stream_is_observed(server: ServerThread) -> None:
    seen = Seen()
    stall = {"X-Fluxstream-Fault": "stall=30,stall-after-events=2"}
    async with fluxstream.AsyncClient(server.base_url, timeouts=Timeouts(stall=0.3)) as client:
        stream = client.chat.stream(model="m", messages=MSG, extra_headers=stall,
                                    observers=[seen])
        with anyio.fail_after(20), pytest.raises(fluxstream.StallTimeoutError):
            async with stream:
                async for _ in stream:
                    pass
    reply, _ = seen.ended()
    assert reply.outcome is Outcome.FAILED


async def test_a_cancelled_task_is_observed_cancelled(server: ServerThread) -> None:
    seen = Seen()
    slow = {"X-Fluxstream-Fault": "drip=0.05"}
    async with fluxstream.AsyncClient(server.base_url) as client:
        stream = client.chat.stream(model="m", messages=MSG, extra_headers=slow,
                                    observers=[seen])
        # cancelled once an event came (a fixed 0.4 s could pass before any did on a loaded
        # machine, and ``seen.events`` below needs one)
        with anyio.CancelScope() as scope:
            async for _ in stream:  # no `async with`: the cancellation itself ends it
                scope.cancel()
        assert scope.cancelled_caught
        assert seen.calls[-1] == "end"  # told at once, not when the stream is collected
        await stream.aclose()
    reply, _ = seen.ended()
    assert reply.outcome is Outcome.CANCELLED and seen.events


async def test_cancel_from_the_loop_is_observed_cancelled(server: ServerThread) -> None:
    seen = Seen()
    async with fluxstream.AsyncClient(server.base_url) as client:
        stream = client.chat.stream(model="m", messages=MSG, max_tokens=50, extra_headers=SLOW,
                                    observers=[seen])
        async for event in stream:
            if isinstance(event, fluxstream.TextDelta):
                stream.cancel()
        reply, _ = seen.ended()
    assert reply.outcome is Outcome.CANCELLED
    assert isinstance(seen.events[-1], fluxstream.End)


async def test_break_inside_async_with_is_observed_at_the_exit(server: ServerThread) -> None:
    seen = Seen()
    async with fluxstream.AsyncClient(server.base_url) as client:
        async with client.chat.stream(model="m", messages=MSG, extra_headers=SLOW,
                                      observers=[seen]) as stream:
            async for _ in stream:
                break
            assert "end" not in seen.calls
    reply, _ = seen.ended()
    assert reply.outcome is Outcome.CANCELLED and len(seen.events) == 1


async def test_break_without_async_with_is_observed_when_collected(
    server: ServerThread,
) -> None:
    seen = Seen()
    async with fluxstream.AsyncClient(server.base_url) as client:
        stream = client.chat.stream(model="m", messages=MSG, max_tokens=50, extra_headers=SLOW,
                                    observers=[seen])
        async for _ in stream:
            break
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            del stream
            gc.collect()
        assert any(issubclass(w.category, ResourceWarning) for w in caught)
        # Observed by the finalizer itself, not by a close it leaves to the loop: checked
        # before anything else runs, so a late end fails here instead of racing a sleep.
        seen.ended()
    reply, stats = seen.ended()  # still the one end once the client closed
    assert reply.outcome is Outcome.CANCELLED and stats.duration is not None


async def test_an_ended_stream_collected_before_its_last_event_is_observed(
    server_factory: Callable[..., ServerThread],
) -> None:
    """A JSON reply ends with its response (nothing is left open to abandon): a consumer
    that breaks after the first event and drops the stream still gets its ``on_end``."""
    seen = Seen()
    upstream = server_factory(profile="json")
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        stream = client.chat.stream(model="m", messages=MSG, observers=[seen])
        async for _ in stream:
            break
        del stream
        gc.collect()
    reply, _ = seen.ended()
    assert reply.outcome is Outcome.DONE


async def test_a_client_closed_under_a_stream_is_observed(server: ServerThread) -> None:
    seen = Seen()
    slow = {"X-Fluxstream-Fault": "drip=0.05"}
    client = fluxstream.AsyncClient(server.base_url, observers=[seen])
    stream = client.chat.stream(model="m", messages=MSG, max_tokens=200, extra_headers=slow)
    with anyio.fail_after(20):
        try:
            async with stream:
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        await client.aclose()
        except fluxstream.FluxstreamError:
            pass
    reply, _ = seen.ended()
    assert reply.outcome in (Outcome.TRUNCATED, Outcome.FAILED, Outcome.CANCELLED)


async def test_a_stream_closed_before_it_opened_is_not_observed(server: ServerThread) -> None:
    seen = Seen()
    async with fluxstream.AsyncClient(server.base_url, observers=[seen]) as client:
        stream = client.chat.stream(model="m", messages=MSG)
        await stream.aclose()
        del stream
        gc.collect()
    assert seen.calls == []


async def test_a_json_reply_has_its_first_token_when_it_ends(
    server_factory: Callable[..., ServerThread], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first token of a whole JSON reply was set after the stream's end: whatever read
    the stats at the end (an observer) had none."""
    at_end: list[float | None] = []
    end = Progress.end

    def spy(self: Progress, now: float) -> None:
        at_end.append(self.first_token)
        end(self, now)

    monkeypatch.setattr(Progress, "end", spy)
    seen = Seen()
    upstream = server_factory(profile="json")
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        reply = await client.chat.complete(model="m", messages=MSG, observers=[seen])
    assert reply.outcome is Outcome.DONE and reply.text
    assert at_end and at_end[0] is not None
    _, stats = seen.ended()
    assert stats.time_to_first_token is not None and stats.content_events >= 1


async def test_an_observer_that_raises_never_breaks_the_stream(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def on_open(self, info: StreamInfo) -> None:
            raise RuntimeError("open")

        def on_event(self, event: fluxstream.Event) -> None:
            raise RuntimeError("event")

        def on_end(self, reply: fluxstream.Reply, stats: StreamStats) -> None:
            raise RuntimeError("end")

    seen = Seen()
    with caplog.at_level(logging.WARNING, logger="fluxstream"):
        async with fluxstream.AsyncClient(server.base_url, observers=[Broken()]) as client:
            async with client.chat.stream(
                model="m", messages=MSG, max_tokens=5, observers=[seen]
            ) as stream:
                reply = await stream.complete()
    assert reply.outcome is Outcome.DONE
    _, stats = seen.ended()  # the observer after the broken one is still told everything
    events = len(seen.events)
    assert stats.observer_errors == 1 + events  # on_open and every on_event so far
    assert stream.stats.observer_errors == 2 + events  # and its on_end
    failures = [r for r in caplog.records if "stream observer" in r.getMessage()]
    assert len(failures) == 1 and "Broken" in failures[0].getMessage()


async def test_cancellation_raised_by_an_observer_is_not_swallowed(
    server: ServerThread,
) -> None:
    class Interrupting:
        def on_open(self, info: StreamInfo) -> None:
            pass

        def on_event(self, event: fluxstream.Event) -> None:
            raise KeyboardInterrupt

        def on_end(self, reply: fluxstream.Reply, stats: StreamStats) -> None:
            pass

    async with fluxstream.AsyncClient(server.base_url) as client:
        with pytest.raises(KeyboardInterrupt):
            async with client.chat.stream(model="m", messages=MSG,
                                          observers=[Interrupting()]) as stream:
                async for _ in stream:
                    pass


async def test_a_resumed_token_is_observed_as_resuming(server: ServerThread) -> None:
    seen = Seen()
    async with fluxstream.AsyncClient(server.base_url) as client:
        async with client.chat.stream(model="m", messages=MSG, max_tokens=20,
                                      extra_headers=SLOW) as first:
            async for event in first:
                if isinstance(event, fluxstream.TextDelta):
                    break
            token = first.resume_token()
        reply = await client.chat.resume(token, observers=[seen]).until_done()
    assert reply.outcome is Outcome.DONE
    assert seen.info is not None and seen.info.resuming
    assert seen.ended()[0] == reply


async def test_retries_before_content_are_attempts(server: ServerThread) -> None:
    seen = Seen()
    flaky = {"X-Fluxstream-Fault": "fail-first=2"}
    fast = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0)
    async with fluxstream.AsyncClient(server.base_url, retry=fast) as client:
        await client.chat.complete(model="m", messages=MSG, extra_headers=flaky,
                                   observers=[seen])
    assert seen.ended()[1].attempts == 3


def test_an_observer_is_a_stream_observer() -> None:
    assert isinstance(Seen(), StreamObserver)
    any_value: Any = object()
    assert not isinstance(any_value, StreamObserver)


def test_an_observer_keeping_the_no_op_on_event_is_not_called_per_event() -> None:
    """An observer that reads what it needs at the end (``StreamObserver``'s own ``on_event``
    kept) costs a stream nothing per event; one that overrides it is told of each."""
    from fluxstream._core.observers import ObserverSet
    from fluxstream._events import TextDelta

    class EndOnly(StreamObserver):
        pass

    class Counting(StreamObserver):
        def __init__(self) -> None:
            self.events = 0

        def on_event(self, event: fluxstream.Event) -> None:
            self.events += 1

    quiet = ObserverSet([EndOnly()])
    assert not quiet.watches_events
    counting = Counting()
    both = ObserverSet([EndOnly(), counting])
    assert both.watches_events
    both.event(TextDelta(key="k", choice=0, offset=0, text="a"))
    assert counting.events == 1
