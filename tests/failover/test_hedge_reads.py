"""What a hedged race reads, and what of it the reply keeps, on raw sockets whose bytes the
test writes: the first upstream's reads are parsed once when it wins (the race reads them
into the stream's own parser); when the hedge serves instead (it won, or the first failed
while it was out), nothing the first upstream sent before losing (its id and model, a bad
frame, a comment, an event id and ``retry:``, a usage snapshot, an error event) reaches the
reply, its resume token or the caller's events: the reply is the one the winner alone
gives. Run on asyncio and trio, and on httpx with ``--transport httpx``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import anyio.abc
import pytest
from raw_upstream import HEAD, LIFE, MSG, RequestReader, until_client_closes, upstream
from sse_frames import DONE, chat_choice, chat_chunk, chat_frame, chat_text, frame

import fluxstream
from fluxstream import Failover, Handoff, Outcome, Upstream
from fluxstream._parser import StreamParser
from fluxstream.sse import SSEDecoder

pytestmark = pytest.mark.anyio

LOSER = dict(id="loser-id", model="loser-model")
WINNER = dict(id="winner-id", model="winner-model")
#: What the first upstream sends at once, then nothing more before the hedge is due: no
#: content, yet every kind of state a parser keeps (its ids, a skipped frame, a heartbeat,
#: an event id and a retry time, a usage snapshot).
LOSER_PRELUDE = (
    b"retry: 7000\n\n"
    + frame(chat_chunk({"index": 0, "delta": {"role": "assistant", "content": ""}}, **LOSER),
            id="L-1")
    + b": ping\n\n"
    + b"data: not json\n\n"
    + frame(chat_chunk(usage={"prompt_tokens": 999, "completion_tokens": 0,
                              "total_tokens": 999}, **LOSER), id="L-2")
)
LOSER_ERROR = frame({"error": {"message": "overloaded", "type": "server_error"}})
#: The hedge's whole reply, with event ids of its own.
WINNER_BODY = (
    frame(chat_chunk({"index": 0, "delta": {"role": "assistant", "content": ""}}, **WINNER),
          id="W-1")
    + chat_text("Hello", event_id="W-2", **WINNER)
    + chat_text(", world", event_id="W-3", **WINNER)
    + chat_frame(chat_choice(finish="stop"), event_id="W-4", **WINNER)
    + DONE
)
HEDGE_AFTER = 0.2


def client_of(first: str, second: str, **failover: Any) -> fluxstream.AsyncClient:
    return fluxstream.AsyncClient(
        first, api_key="k", fallbacks=[Upstream(second, api_key="k2")],
        failover=Failover(per_upstream_attempts=1, **failover) if failover else None,
    )


def shapes(events: list[Any]) -> list[dict[str, Any]]:
    """The events as the caller reads them, but for the stream's content key."""
    return [
        {k: v for k, v in dataclasses.asdict(e).items() if k != "key"} for e in events
    ]


async def collect(stream: fluxstream.ReplyStream) -> list[Any]:
    with anyio.fail_after(LIFE):
        async with stream:
            return [event async for event in stream]


async def alone(winner: str) -> tuple[fluxstream.Reply, dict[str, Any], list[Any]]:
    """The reply, resume token and events the winner gives a stream asked of it alone."""
    async with fluxstream.AsyncClient(winner, api_key="k") as client:
        stream = client.chat.stream(model="m", messages=MSG)
        events = await collect(stream)
        return stream.reply, stream.resume_token(), events


@pytest.mark.parametrize("how", ["the hedge wins", "the first fails while hedging"])
async def test_a_serving_hedge_keeps_nothing_the_first_upstream_sent(how: str) -> None:
    hedge_asked = anyio.Event()

    async def first_script(sock: anyio.abc.SocketStream, index: int) -> None:
        await RequestReader(sock).next()
        await sock.send(HEAD + LOSER_PRELUDE)
        if how == "the first fails while hedging":
            await hedge_asked.wait()
            await sock.send(LOSER_ERROR)
        await until_client_closes(first, sock, index)

    async def second_script(sock: anyio.abc.SocketStream, index: int) -> None:
        await RequestReader(sock).next()
        if index == 0:  # the hedge (the reply alone is asked after)
            hedge_asked.set()
            if how == "the first fails while hedging":
                await first.wait_closed(0)  # the race is decided: the first failed
        await sock.send(HEAD + WINNER_BODY)

    async with upstream(first_script) as first, upstream(second_script) as second:
        async with client_of(first.base, second.base, hedge_after=HEDGE_AFTER) as client:
            stream = client.chat.stream(model="m", messages=MSG)
            events = await collect(stream)
        with anyio.fail_after(LIFE):
            await first.wait_closed(0)
        expected, expected_token, expected_events = await alone(second.base)
        assert (first.connections, second.connections) == (1, 2)
    reply = stream.reply
    # the caller saw a Handoff, then exactly what the winner alone gives
    assert isinstance(events[0], Handoff) and events[0].offset == 0
    assert (events[0].reason.startswith("hedged")) is (how == "the hedge wins")
    assert shapes(events[1:]) == shapes(expected_events)
    assert not any(e.type in ("skipped", "usage", "error") for e in events)
    assert reply.outcome is Outcome.DONE and reply.text == expected.text == "Hello, world"
    assert (reply.id, reply.model) == ("winner-id", "winner-model")
    assert (reply.skipped_frames, reply.heartbeats, reply.bytes, reply.events) == (
        expected.skipped_frames, expected.heartbeats, expected.bytes, expected.events,
    ) == (0, 0, len(WINNER_BODY), 5)
    assert reply.usage is None and reply.usage_updates == [] and reply.error is None
    token = stream.resume_token()
    for field in ("last_event_id", "reconnection_time", "offsets", "wire"):
        assert token[field] == expected_token[field], field
    assert token["last_event_id"] == "W-4" and token["reconnection_time"] is None
    lost, served = reply.segments
    assert (lost.upstream, lost.start, lost.end, lost.requests) == (
        Upstream(first.base).label, 0, 0, 1)
    assert lost.kind == ("lost_hedge" if how == "the hedge wins" else "error_event")
    assert lost.usage is None and lost.usage_estimate is None and lost.request_id is None
    assert (served.upstream, served.kind, served.end) == (
        Upstream(second.base).label, "done", len("Hello, world"))


async def test_a_race_cancelled_before_content_keeps_nothing_it_read() -> None:
    """Cancelled while the first upstream had sent only its prelude: nothing of it was
    delivered, and the reply says so (no id, no counts of the prelude's frames)."""

    def prelude(up: Any) -> Any:
        async def script(sock: anyio.abc.SocketStream, index: int) -> None:
            await RequestReader(sock).next()
            await sock.send(HEAD + LOSER_PRELUDE)
            await until_client_closes(up(), sock, index)

        return script

    async with upstream(prelude(lambda: first)) as first, \
            upstream(prelude(lambda: second)) as second:
        async with client_of(first.base, second.base, hedge_after=HEDGE_AFTER) as client:
            stream = client.chat.stream(model="m", messages=MSG)
            events: list[Any] = []

            async def consume() -> None:
                events.extend([event async for event in stream])

            with anyio.fail_after(LIFE):
                async with anyio.create_task_group() as group:
                    group.start_soon(consume)
                    await second.parked.wait()  # the hedge was asked, and answered too
                    await first.parked.wait()
                    stream.cancel()
                await first.wait_closed(0)
                await second.wait_closed(0)
    reply = stream.reply
    assert reply.outcome is Outcome.CANCELLED
    assert all(e.type == "end" for e in events)  # nothing of the prelude
    assert (reply.id, reply.model, reply.skipped_frames, reply.heartbeats, reply.usage) == (
        None, None, 0, 0, None)


async def test_the_first_upstream_winning_has_its_reads_parsed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Armed and never fired, a hedge adds no parser and no second parse of any byte: the
    race reads the first upstream's bytes into the stream's own parser, whose events are
    the reply's."""
    fed: list[int] = []
    made: list[int] = []
    feed, init = SSEDecoder.feed, StreamParser.__init__

    def counted_feed(self: SSEDecoder, data: bytes) -> Any:
        fed.append(len(data))
        return feed(self, data)

    def counted_init(self: StreamParser, **kwargs: Any) -> None:
        made.append(1)
        init(self, **kwargs)

    async def answer(sock: anyio.abc.SocketStream, index: int) -> None:
        await RequestReader(sock).next()
        await sock.send(HEAD + WINNER_BODY)

    async def never(sock: anyio.abc.SocketStream, index: int) -> None:
        await RequestReader(sock).next()

    async def counts(**failover: Any) -> tuple[int, int, list[Any], fluxstream.Reply]:
        fed.clear()
        made.clear()
        async with client_of(first.base, second.base, **failover) as client:
            stream = client.chat.stream(model="m", messages=MSG)
            events = await collect(stream)
        return len(made), sum(fed), events, stream.reply

    monkeypatch.setattr(SSEDecoder, "feed", counted_feed)
    monkeypatch.setattr(StreamParser, "__init__", counted_init)
    async with upstream(answer) as first, upstream(never) as second:
        plain = await counts()
        armed = await counts(hedge_after=30.0)
        assert second.connections == 0
    assert armed[0] == plain[0] == 1  # the stream's own parser, and no probe
    assert armed[1] == plain[1] == armed[3].bytes == len(WINNER_BODY)  # each byte once
    assert shapes(armed[2]) == shapes(plain[2])
    assert armed[3].text == "Hello, world" and armed[3].id == "winner-id"


def tool_call(arguments: str, *, first: bool = False) -> dict[str, Any]:
    call: dict[str, Any] = {"index": 0, "function": {"arguments": arguments}}
    if first:
        call.update(id="call-1", type="function")
        call["function"]["name"] = "weather"
    return {"index": 0, "delta": {"tool_calls": [call]}}


#: A reply that exercises what a parser keeps: event ids and a ``retry:``, a comment and a
#: bad frame before content, reasoning inside think tags, a tool call's arguments (path
#: events), usage (a cost), in two writes (the race reads the first; the reader the rest).
PRELUDE = (
    b"retry: 20\n\n: warming up\n\ndata: not json\n\n"
    + frame(chat_chunk({"index": 0, "delta": {"role": "assistant", "content": ""}}), id="1")
)
REST = (
    chat_text("<think>pondering", event_id="2") + chat_text("</think>Hel", event_id="3")
    + chat_text("lo", event_id="4")
    + frame(chat_chunk(tool_call('{"city": "Pa', first=True)), id="5")
    + frame(chat_chunk(tool_call('ris"}')), id="6")
    + chat_frame(chat_choice(finish="tool_calls"), event_id="7")
    + frame(chat_chunk(usage={"prompt_tokens": 12, "completion_tokens": 30,
                              "total_tokens": 42}), id="8")
    + DONE
)
TOOLS = [{"type": "function", "function": {
    "name": "weather", "parameters": {"type": "object", "properties": {"city": {}}}}}]
#: What the first upstream sends in each case: the race meets content, an error event, a
#: frame it cannot read (strict), or the end of the body, before any content.
FIRST_SENDS = {
    "a whole reply": (PRELUDE, REST),
    "an error event before content": (PRELUDE, LOSER_ERROR),
    "a bad frame in strict mode": (PRELUDE, REST),  # the prelude's, read by the race
    "the end before content": (PRELUDE, b""),
}


@pytest.mark.parametrize("case", list(FIRST_SENDS))
async def test_an_armed_hedge_that_never_fires_changes_nothing(case: str) -> None:
    """The same stream with ``hedge_after`` armed (never reached) and without: the same
    events, reply (reasoning split out of tagged text, path events, usage and cost,
    segments) and resume token, whatever the race met before content; the reader acts on
    what the race read (a hand-off, a failure, a retry) as it would on its own reads."""
    first_writes = FIRST_SENDS[case]

    async def first_script(sock: anyio.abc.SocketStream, index: int) -> None:
        await RequestReader(sock).next()
        await sock.send(HEAD + first_writes[0])
        await anyio.sleep(0.05)  # two reads, most likely; the same outcome either way
        if first_writes[1]:
            await sock.send(first_writes[1])

    async def second_script(sock: anyio.abc.SocketStream, index: int) -> None:
        await RequestReader(sock).next()
        await sock.send(HEAD + PRELUDE + REST)

    async def run(**failover: Any) -> tuple[list[Any], dict[str, Any], dict[str, Any], str]:
        client = fluxstream.AsyncClient(
            first.base, api_key="k", fallbacks=[Upstream(second.base, api_key="k2")],
            failover=Failover(per_upstream_attempts=2, **failover),
            prices={"m": fluxstream.ModelPrice(input="1", output="2")},
        )
        async with client:
            stream = client.chat.stream(
                model="m", messages=MSG, content_key="same-key", tools=TOOLS,
                think_tags=True, json_paths=True, strict=case == "a bad frame in strict mode",
            )
            events: list[Any] = []
            raised = ""
            try:
                with anyio.fail_after(LIFE):
                    async with stream:
                        async for event in stream:
                            events.append(event)
            except fluxstream.errors.FluxstreamError as exc:
                raised = repr(exc)
            return events, stream.reply.model_dump(), stream.resume_token(), raised

    async with upstream(first_script) as first, upstream(second_script) as second:
        plain = await run()
        asked = (first.connections, second.connections)
        armed = await run(hedge_after=30.0)
        assert (first.connections, second.connections) == (asked[0] * 2, asked[1] * 2)
    assert armed[0] == plain[0]
    assert armed[1] == plain[1]
    assert armed[2] == plain[2]
    assert armed[3] == plain[3]
    kinds = {e.type for e in plain[0]}
    reply = plain[1]
    text = "".join(e.text for e in plain[0] if e.type == "text")
    if case == "a bad frame in strict mode":
        assert reply["outcome"] == "failed" and not text
        assert plain[3].startswith("StreamFailedError") and "invalid JSON" in plain[3]
        return
    assert text == "Hello" and reply["cost"] is not None
    assert {"reasoning", "text", "tool_call_delta", "path_start", "path_done"} <= kinds
    assert ("handoff" in kinds) is (case != "a whole reply")  # else the fallback served
    assert (reply["skipped_frames"], reply["heartbeats"]) >= (1, 1)


ROLE = b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
CONTENT = b'{"choices":[{"index":0,"delta":{"content":"hi"}}]}'
ERROR = b'{"error":{"message":"overloaded","type":"server_error"}}'
FINISHED = b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([ROLE, CONTENT], True),
        ([ERROR], False),
        ([ERROR, CONTENT], True),
        ([ROLE], None),
        ([ERROR, b"[DONE]"], False),
        ([ROLE, FINISHED, b"[DONE]"], True),
        ([b"not json", ROLE], None),
    ],
    ids=["content", "error-event", "error-then-content-in-the-same-read", "no-content-yet",
         "error-then-the-sentinel", "finished-without-content", "a-bad-frame"],
)
@pytest.mark.parametrize("held", [True, False], ids=["held", "not-held"])
def test_a_read_into_the_streams_parser_is_decided_as_the_probe_decides_it(
    events: list[bytes], expected: bool | None, held: bool
) -> None:
    """The race decides a read of the first upstream by the stream's own parser once it
    has read it (its hold keeps an error event and what follows it out of the reply while
    another upstream could take over) exactly as a probe decides it event by event."""
    from fluxstream._core.error_hold import ErrorHold
    from fluxstream._io.hedge_reading import decided, probed

    data = b"".join(b"data: " + e + b"\n\n" for e in events)
    probe = StreamParser(content_key="k", format="chat_completions")
    assert probed(probe, data) is expected
    parser = StreamParser(content_key="k", format="chat_completions")
    hold = parser.hold = ErrorHold() if held else None
    assert decided(parser, parser.feed(data)) is expected
    if held and expected is not True and ERROR in events:
        assert hold is not None and hold.error is not None  # never in the reply yet
        assert parser.reply.error is None


@pytest.mark.asyncio_only
async def test_the_first_racer_takes_back_only_its_own_interruption() -> None:
    """On asyncio a winning hedge interrupts the first racer by cancelling the stream's
    task: taken back where the racer runs when it was the only cancellation, never when
    the caller's came too (before or after), nor when only the caller's came; the task's
    count of cancel requests is back where it was."""
    import asyncio
    from types import SimpleNamespace

    from fluxstream._io.hedge_racers import Racers
    from fluxstream._io.hedge_reading import Racer
    from fluxstream._io.hedge_timer import TimerRace

    async def racing(stop: list[str]) -> tuple[asyncio.Task[None], Racer]:
        connecting = asyncio.Event()

        async def connect() -> None:
            connecting.set()
            await asyncio.sleep(LIFE)

        channel = SimpleNamespace(connect=connect, recovery=SimpleNamespace(cancelled=False))
        race = TimerRace(Racers(channel, SimpleNamespace()), 1.0)  # type: ignore[arg-type]
        racer = Racer(SimpleNamespace(), None)  # type: ignore[arg-type]
        task = asyncio.create_task(race._run_first(racer))
        await connecting.wait()
        for who in stop:
            if who == "hedge":
                race.stop_first()
            else:
                task.cancel()
        await asyncio.wait([task], timeout=LIFE)
        assert task.done() and race._first_task is None
        return task, racer

    task, racer = await racing(["hedge"])
    assert task.result() is None and racer.error is None and racer.attempt is None
    assert task.cancelling() == 0
    for stop in (["hedge", "caller"], ["caller", "hedge"], ["caller"]):
        task, _ = await racing(stop)
        assert task.cancelled(), stop
