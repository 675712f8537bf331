"""Hedged first tokens on real sockets, two embedded servers with scripted delays: a slow
first upstream loses to the hedge (text exact, ``Handoff``, segments, its connection closed
while the winner's reply is read, within ``CLOSE_WITHIN`` as the server sees it); a fast one
sends no hedge; the first upstream winning after the hedge was sent closes the hedge; failures
on either side (the other goes on, no third request); both failing; the caller cancelling
mid-race (both connections closed). Run on asyncio and trio, and on httpx with
``--transport httpx``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from waiting import WITHIN, until

import fluxstream
from fluxstream import Failover, Handoff, Outcome, Upstream
from fluxstream._retry import RetryPolicy
from fluxstream.errors import APIStatusError
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hello there"}]
#: The loser's connection must be closed within this of the winner's first content (with room
#: for a loaded worker's stalls: 0.2 s was overrun by one). That it is closed by the winner's
#: first content, not at the stream's end, is proven by ``read(loser=)`` waiting for it there.
CLOSE_WITHIN = 1.0
#: A first token slower than any test waits for: such a server only ever loses. (5 s was not:
#: a loaded run outlasted it, the slow server went on and was never seen to be closed.)
SLOW = "stall=60,stall-after-events=1"
FAST_RETRY = RetryPolicy(max_attempts=2, base_delay=0.05, max_delay=0.05)


def requests_to(server: ServerThread, path: str = "/chat/completions") -> int:
    return sum(1 for r in server.records.requests if r.path.endswith(path))


@pytest.fixture(scope="module")
def clean() -> Iterator[ServerThread]:
    """A server with no faults: what the others answer when they do answer."""
    with ServerThread(profile="openai") as running:
        yield running


async def answer_of(server: ServerThread, **extra: Any) -> str:
    """What a server of the same profile answers (the scripts are deterministic)."""
    async with fluxstream.AsyncClient(server.base_url, api_key="k") as client:
        reply = await client.chat.complete(model="m", messages=MSG, **extra)
    return reply.text


async def read(
    stream: fluxstream.ReplyStream, loser: ServerThread | None = None
) -> tuple[str, list[Any], float]:
    """The text as ``buf[offset:]`` shows it, the other events, and when the first text
    came (``time.monotonic``, the clock of the servers' disconnect records). With ``loser``,
    the first text is held until that server saw its connection close: a loser closed only
    when the stream ends (or the client closes) fails here, however fast the machine."""
    shown = ""
    others: list[Any] = []
    first = math.nan
    async with stream:
        async for event in stream:
            if event.type == "text":
                assert event.offset == len(shown)
                if not shown:
                    first = time.monotonic()
                    if loser is not None:
                        await until(lambda: loser.find_disconnect() is not None,
                                    "the losing upstream closed while the winner is read")
                shown += event.text
            else:
                others.append(event)
    return shown, others, first


def client_of(primary: ServerThread, fallback: ServerThread, **failover: Any) -> Any:
    return fluxstream.AsyncClient(
        primary.base_url, api_key="k", fallbacks=[Upstream(fallback.base_url, api_key="k2")],
        failover=Failover(**failover) if failover else None,
    )


def test_hedge_after_is_a_finite_positive_number_or_none() -> None:
    assert Failover().hedge_after is None
    assert Failover(hedge_after=0.25).hedge_after == 0.25
    for bad in (0, -1.0, math.nan, math.inf, True, "1"):
        with pytest.raises(ValueError, match="hedge_after"):
            Failover(hedge_after=bad)  # type: ignore[arg-type]


async def test_a_slow_first_upstream_loses_to_the_hedge(clean: ServerThread) -> None:
    expected = await answer_of(clean, max_tokens=1024)
    with ServerThread(profile="openai", faults=SLOW) as primary, \
            ServerThread(profile="openai") as fallback:
        before = requests_to(fallback)
        # no hedging on the client: this request asks for it (failover= per request)
        async with client_of(primary, fallback) as client:
            started = time.monotonic()
            stream = client.messages.stream(
                model="m", messages=MSG, max_tokens=1024,
                failover=Failover(hedge_after=0.3),
            )
            shown, others, first = await read(stream, loser=primary)
        # Any close of it: it never completes (SLOW). Its request may not have been read by
        # then on a loaded machine (the client's segments count the one request it sent).
        closed = await primary.wait_disconnect(WITHIN)
        assert requests_to(primary, "/messages") <= 1
        assert requests_to(fallback) == before + 1
    assert 0.3 <= first - started < 3.0  # the hedge's first token, not the primary's
    assert closed.time - first < CLOSE_WITHIN, closed.time - first
    reply = stream.reply
    assert reply.outcome is Outcome.DONE
    assert shown == reply.text == expected
    handoffs = [e for e in others if isinstance(e, Handoff)]
    assert len(handoffs) == 1 and handoffs[0].reason.startswith("hedged")
    assert handoffs[0].offset == 0 and handoffs[0].api == "chat_completions"
    assert others[0] is handoffs[0]  # before anything else
    lost, served = reply.segments
    assert (lost.api, lost.start, lost.end, lost.kind, lost.requests) == (
        "anthropic_messages", 0, 0, "lost_hedge", 1)
    assert (served.api, served.start, served.end, served.kind, served.requests) == (
        "chat_completions", 0, len(expected), "done", 1)
    assert served.upstream == handoffs[0].upstream


async def test_a_fast_first_upstream_sends_no_hedge() -> None:
    with ServerThread(profile="openai") as primary, ServerThread(profile="openai") as fallback:
        expected = await answer_of(primary)
        async with client_of(primary, fallback, hedge_after=1.0) as client:
            shown, others, _ = await read(client.chat.stream(model="m", messages=MSG))
            reply = await client.chat.complete(model="m", messages=MSG)  # pooled, again
        assert requests_to(primary) == 3 and requests_to(fallback) == 0
    assert shown == reply.text == expected
    assert not any(isinstance(e, Handoff) for e in others)
    assert [(s.kind, s.requests) for s in reply.segments] == [("done", 1)]


async def test_the_first_upstream_winning_after_the_hedge_was_sent_closes_the_hedge(
    clean: ServerThread,
) -> None:
    expected = await answer_of(clean)
    with ServerThread(profile="openai", faults="stall=0.8,stall-after-events=1") as primary, \
            ServerThread(profile="openai", faults=SLOW) as fallback:
        async with client_of(primary, fallback, hedge_after=0.2) as client:
            stream = client.chat.stream(model="m", messages=MSG)
            shown, others, first = await read(stream, loser=fallback)
        closed = await fallback.wait_disconnect(WITHIN)  # SLOW: any close is the abort
        assert requests_to(fallback) <= 1  # sent (see the segments), maybe not read yet
    assert closed.time - first < CLOSE_WITHIN, closed.time - first
    reply = stream.reply
    assert shown == reply.text == expected and reply.outcome is Outcome.DONE
    assert not any(isinstance(e, Handoff) for e in others)
    lost, served = reply.segments
    assert (lost.upstream, lost.kind, lost.requests) == (
        Upstream(fallback.base_url).label, "lost_hedge", 1)
    assert (served.kind, served.requests, served.end) == ("done", 1, len(expected))


async def test_a_failing_hedge_leaves_the_first_upstream_going() -> None:
    # the hedge's 503 must come before the primary's content: 2 s of stall leave a loaded
    # worker room (0.6 s left 0.5 s)
    with ServerThread(profile="openai", faults="stall=2,stall-after-events=1") as primary, \
            ServerThread(profile="openai", faults="status=503") as fallback:
        async with client_of(primary, fallback, hedge_after=0.1, cooldown_failures=1) as client:
            stream = client.chat.stream(model="m", messages=MSG, retry=FAST_RETRY)
            shown, others, _ = await read(stream)
            # the failed hedge counts for the circuit breaker: the next stream skips it
            again = await client.chat.complete(model="m", messages=MSG)
        assert requests_to(fallback) == 1  # the hedge is never retried
    reply = stream.reply
    assert reply.outcome is Outcome.DONE and shown == reply.text
    assert not any(isinstance(e, Handoff) for e in others)
    failed, served = reply.segments
    assert failed.kind == "failed" and failed.detail.startswith("APIStatusError")
    assert "503" in failed.detail
    assert failed.requests == 1 and (served.kind, served.requests) == ("done", 1)
    assert [s.kind for s in again.segments] == ["done"]  # no hedge on a cooling upstream


async def test_the_first_upstream_failing_while_hedging_hands_over_to_the_hedge(
    clean: ServerThread,
) -> None:
    expected = await answer_of(clean)
    # the primary's 503 (at 0.5 s) must come before the hedge's content (2.1 s): room for a
    # loaded worker (0.7 s left 0.2 s)
    with ServerThread(profile="openai", faults="delay=0.5,status=503") as primary, \
            ServerThread(profile="openai", faults="stall=2,stall-after-events=1") as fallback:
        async with client_of(
            primary, fallback, hedge_after=0.1, per_upstream_attempts=1
        ) as client:
            stream = client.chat.stream(model="m", messages=MSG)
            shown, others, _ = await read(stream)
        # the hedge is the next upstream, asked already: no third request
        assert requests_to(primary) == 1 and requests_to(fallback) == 1
    reply = stream.reply
    assert reply.outcome is Outcome.DONE and shown == reply.text == expected
    handoffs = [e for e in others if isinstance(e, Handoff)]
    assert len(handoffs) == 1 and "503" in handoffs[0].reason
    failed, served = reply.segments
    assert "503" in failed.detail and failed.requests == 1 and failed.kind == "failed"
    assert (served.kind, served.requests) == ("done", 1)


async def test_both_failing_ends_the_stream_with_both_requests_counted() -> None:
    # the hedge (at 0.1 s) fails before the primary's first 503 (at 1 s): the segments' order
    with ServerThread(profile="openai", faults="delay=1,status=503") as primary, \
            ServerThread(profile="openai", faults="status=503") as fallback:
        async with client_of(primary, fallback, hedge_after=0.1) as client:
            stream = client.chat.stream(model="m", messages=MSG, retry=FAST_RETRY)
            with pytest.raises(APIStatusError):
                await read(stream)
        # the primary's own two attempts, one hedge, and nothing asked twice
        assert requests_to(primary) == 2 and requests_to(fallback) == 1
    reply = stream.reply
    assert reply.outcome is Outcome.FAILED
    assert [(s.start, s.end, s.requests) for s in reply.segments] == [(0, 0, 1), (0, 0, 2)]
    assert all("503" in s.detail and s.kind == "failed" for s in reply.segments)


@pytest.mark.parametrize("how", ["stream.cancel()", "cancel scope"])
async def test_cancelling_mid_race_closes_both_connections(how: str) -> None:
    with ServerThread(profile="openai", faults=SLOW) as primary, \
            ServerThread(profile="openai", faults=SLOW) as fallback:
        async with client_of(primary, fallback, hedge_after=0.2) as client:
            stream = client.chat.stream(model="m", messages=MSG)
            cancelled_at = math.nan

            async def consume() -> None:
                async for _ in stream:
                    pass

            async def both_asked() -> None:
                """Until each server has the request (the hedge was sent and arrived): a
                fixed wait could cancel before the hedge reached a loaded machine's server."""
                for _ in range(1000):  # 10 s at most
                    if requests_to(primary) and requests_to(fallback):
                        return
                    await anyio.sleep(0.01)
                raise AssertionError("the hedge never reached its server")

            if how == "stream.cancel()":
                async with anyio.create_task_group() as group:
                    group.start_soon(consume)
                    await both_asked()
                    cancelled_at = time.monotonic()
                    stream.cancel()
            else:
                with anyio.CancelScope() as scope:
                    async with anyio.create_task_group() as group:
                        group.start_soon(consume)
                        await both_asked()
                        scope.cancel()
                cancelled_at = time.monotonic()
            await stream.aclose()
            for server in (primary, fallback):
                closed = await server.wait_disconnect(WITHIN)  # SLOW: any close is the abort
                assert closed.time - cancelled_at < CLOSE_WITHIN, (how, closed.time)
        assert requests_to(primary) == 1 and requests_to(fallback) == 1
    reply = stream.reply
    assert reply.outcome is Outcome.CANCELLED
    assert sorted((s.kind, s.requests) for s in reply.segments) == [
        ("cancelled", 1), ("cancelled", 1)]


def three(primary: ServerThread, second: ServerThread, third: ServerThread,
          **failover: Any) -> Any:
    return fluxstream.AsyncClient(
        primary.base_url, api_key="k",
        fallbacks=[Upstream(second.base_url, api_key="k2"),
                   Upstream(third.base_url, api_key="k3")],
        failover=Failover(per_upstream_attempts=1, **failover),
    )


async def test_a_hedge_failing_after_the_first_delivers_both_handoffs_in_order(
    clean: ServerThread,
) -> None:
    """The first fails while the hedge is out, then the hedge fails too: the reply moves on
    to the third upstream, and the caller sees both moves, in the order they happened."""
    expected = await answer_of(clean)
    with ServerThread(profile="openai", faults="delay=0.3,status=503") as primary, \
            ServerThread(profile="openai", faults="delay=1.2,status=503") as second, \
            ServerThread(profile="openai") as third:
        async with three(primary, second, third, hedge_after=0.1) as client:
            stream = client.chat.stream(model="m", messages=MSG)
            shown, others, _ = await read(stream)
        assert [requests_to(s) for s in (primary, second, third)] == [1, 1, 1]
    reply = stream.reply
    assert reply.outcome is Outcome.DONE and shown == reply.text == expected
    handoffs = [e for e in others if isinstance(e, Handoff)]
    assert [h.upstream for h in handoffs] == [Upstream(second.base_url).label,
                                              Upstream(third.base_url).label]
    assert all("503" in h.reason and h.offset == 0 for h in handoffs)
    assert others[:2] == handoffs  # before anything else
    assert [(s.upstream, s.kind, s.requests) for s in reply.segments] == [
        (Upstream(primary.base_url).label, "failed", 1),
        (Upstream(second.base_url).label, "failed", 1),
        (Upstream(third.base_url).label, "done", 1),
    ]


async def test_a_handoff_before_content_hedges_the_next_pair_too(clean: ServerThread) -> None:
    """The first upstream fails at once; the second, asked next, is slow: the third is
    asked after ``hedge_after`` as well, and wins."""
    expected = await answer_of(clean)
    with ServerThread(profile="openai", faults="status=503") as primary, \
            ServerThread(profile="openai", faults=SLOW) as second, \
            ServerThread(profile="openai") as third:
        async with three(primary, second, third, hedge_after=0.3) as client:
            started = time.monotonic()
            stream = client.chat.stream(model="m", messages=MSG)
            shown, others, first = await read(stream, loser=second)
        # SLOW: any close is the abort. The third may win before the second's server read
        # the request on a loaded machine (the client's segments and handoffs show it asked).
        closed = await second.wait_disconnect(WITHIN)
        assert [requests_to(s) for s in (primary, third)] == [1, 1]
        assert requests_to(second) <= 1
    assert first - started < 3.0  # the third's first token, not the second's
    assert closed.time - first < CLOSE_WITHIN, closed.time - first
    reply = stream.reply
    assert reply.outcome is Outcome.DONE and shown == reply.text == expected
    handoffs = [e for e in others if isinstance(e, Handoff)]
    assert [h.upstream for h in handoffs] == [Upstream(second.base_url).label,
                                              Upstream(third.base_url).label]
    assert "503" in handoffs[0].reason and handoffs[1].reason.startswith("hedged")
    assert sorted((s.upstream, s.kind) for s in reply.segments) == sorted([
        (Upstream(primary.base_url).label, "failed"),
        (Upstream(second.base_url).label, "lost_hedge"),
        (Upstream(third.base_url).label, "done"),
    ])


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_armed_hedge_that_never_fires_starts_no_task(clean: ServerThread) -> None:
    """On asyncio, a hedge is a timer until it fires: a request whose content comes in time
    runs no task beyond what the same request without ``hedge_after`` runs (the race's task
    group used to start one per request), and nothing is put back in front of its body (the
    race read it into the stream's own parser), which is read directly."""
    import asyncio

    from fluxstream._io.attempt import PushedBack

    async def tasks_during(fallback: ServerThread, **failover: Any) -> tuple[int, str, bool]:
        seen = 0
        pushed_back_left = False
        async with client_of(clean, fallback, **failover) as client:
            await client.chat.complete(model="m", messages=MSG)  # pooled connection, imports
            stream = client.chat.stream(model="m", messages=MSG)
            shown = ""
            async with stream:
                async for event in stream:
                    seen = max(seen, len(asyncio.all_tasks()))
                    if event.type == "text":
                        shown += event.text
                attempt = stream._reader.channel.attempt
                pushed_back_left = attempt is not None and type(attempt.body) is PushedBack
        return seen, shown, pushed_back_left

    with ServerThread(profile="openai") as fallback:
        plain = await tasks_during(fallback)
        armed = await tasks_during(fallback, hedge_after=30.0)
        assert requests_to(fallback) == 0
    assert armed[0] == plain[0]
    assert armed[1] == plain[1] == await answer_of(clean)
    assert not armed[2]


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
          b'{"choices":[{"index":0,"delta":{"content":"hi"}}]}'], True),
        ([b'{"error":{"message":"overloaded","type":"server_error"}}'], False),
        ([b'{"error":{"message":"overloaded","type":"server_error"}}',
          b'{"choices":[{"index":0,"delta":{"content":"hi"}}]}'], True),
        ([b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'], None),
    ],
    ids=["content", "error-event", "error-then-content-in-the-same-read", "no-content-yet"],
)
def test_the_race_probe_decides_a_read_as_the_reader_would(
    events: list[bytes], expected: bool | None
) -> None:
    """The probe reads a racer's read only up to its first content (the rest is the
    reader's), yet decides it as the whole read would: content after an error event in the
    same read is content."""
    from fluxstream._io.hedge_reading import probed
    from fluxstream._parser import StreamParser

    data = b"".join(b"data: " + e + b"\n\n" for e in events)
    for cut in (data, data.replace(b"\n", b"\r\n")):
        probe = StreamParser(content_key="k", format="chat_completions")
        assert probed(probe, cut) is expected
