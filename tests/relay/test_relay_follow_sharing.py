"""The follower side's shortcuts, each against the general path it replaces: the msgspec
decoding of an entry against pydantic's (random entries, random damage), the followed items
and SSE bytes shared by every follower of a process against what each used to build for
itself, and the tailer's incrementally kept ``XREAD`` against many streams coming and going."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError
from relay_support import RedisServer

from fluxstream._events import (
    End,
    Event,
    Finish,
    Outcome,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
)
from fluxstream.errors import RelayError
from fluxstream.relay import Position, RelayEvent, to_sse
from fluxstream.relay.codec import (
    Entry,
    _position,
    _relay_event,
    decode_entries,
    decode_entry,
    encode_entry,
    end_record,
    plain_entry,
    relayed,
    sse_event,
)


class _Reference(BaseModel):
    """The general path: pydantic validates the whole entry (what ``decode_entry`` did for
    every entry before msgspec took the common ones)."""

    e: list[Event]
    end: dict[str, Any] | None = None


def reference(data: bytes) -> tuple[tuple[Any, ...], dict[str, Any] | None]:
    raw = _Reference.model_validate_json(data)
    return tuple(raw.e), raw.end


texts = st.text(max_size=12)
small = st.integers(min_value=0, max_value=2**40)
keys = st.sampled_from(["k", "reply-é", ""])
deltas = st.one_of(
    st.builds(TextDelta, keys, small, small, texts),
    st.builds(ReasoningDelta, keys, small, small, texts),
    st.builds(RefusalDelta, keys, small, small, texts),
    st.builds(
        ToolCallDelta, keys, small, small, st.none() | texts, st.none() | texts, texts, small,
        st.booleans(),
    ),
)
events = st.one_of(deltas, st.builds(Finish, keys, small, st.sampled_from(["stop", "length"])))


@settings(max_examples=400, deadline=None)
@given(st.lists(events, min_size=1, max_size=6))
def test_entries_decode_as_pydantic_decodes_them(items: list[Any]) -> None:
    data = encode_entry(items).encode()
    entry = decode_entry(7, data)
    assert entry.number == 7
    assert (entry.events, entry.end) == reference(data)
    assert [type(e) for e in entry.events] == [type(e) for e in items]
    assert entry.events == tuple(items)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(deltas, min_size=1, max_size=4), st.data())
def test_damaged_entries_decode_as_pydantic_decodes_them_or_fail_alike(
    items: list[Any], data: st.DataObject
) -> None:
    """Random damage of a stored entry (bytes cut, replaced, inserted): whatever the fast
    path accepts, pydantic accepts and decodes the same; what pydantic refuses is refused."""
    raw = bytearray(encode_entry(items).encode())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw)))
        what = data.draw(st.sampled_from(["cut", "put", "insert"]))
        piece = data.draw(st.sampled_from(
            [b'"', b",", b"}", b"]", b"1", b"1.0", b"true", b"null", b'"type":"text"',
             b'"type":"reasoning"', b"\\ud800", b"\xff", b" ", b'"x":1', b"-"]
        ))
        if what == "cut":
            del raw[at:at + data.draw(st.integers(1, 8))]
        elif what == "put":
            raw[at:at + len(piece)] = piece
        else:
            raw[at:at] = piece
    damaged = bytes(raw)
    try:
        expected = reference(damaged)
    except ValidationError:
        with pytest.raises(ValueError):
            decode_entry(1, damaged)
        return
    entry = decode_entry(1, damaged)
    assert (entry.events, entry.end) == expected


def test_the_fast_path_refuses_what_pydantic_refuses() -> None:
    """The damage that msgspec alone would let through: an event without its ``type``
    (msgspec fills in the default), a mixed entry, a float for an int."""
    text = b'{"key":"k","choice":0,"offset":0,"text":"a"'
    for data in (
        b'{"e":[' + text + b'},' + text + b',"type":"text"}]}',
        b'{"e":[' + text + b',"type":"reasoning"},' + text + b',"type":"text"}]}',
        b'{"e":[{"key":"k","choice":0,"offset":1.0,"text":"a","type":"text"}]}',
        b'{"e":[' + text + b',"type":"text"}],"end":{"outcome":"done"}}',
    ):
        try:
            expected = reference(data)
        except ValidationError:
            with pytest.raises(ValueError):
                decode_entry(1, data)
            continue
        entry = decode_entry(1, data)
        assert (entry.events, entry.end) == expected


def _stored_forms(items: list[Any], kind: str) -> bytes:
    """An entry as the log may hold it: its encoding, an end entry, or a damaged copy."""
    if kind == "end":
        return encode_entry([End(Outcome.DONE, None)], end_record(Outcome.DONE, None, None, None)
                            ).encode()
    data = encode_entry(items).encode()
    if kind == "no type":  # what msgspec alone would accept: an event without its type
        return data.replace(b',"type":', b',"typ":', 1)
    return data


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(events, min_size=1, max_size=3),
                          st.sampled_from(["plain", "plain", "end", "no type"])),
                min_size=1, max_size=6),
       st.integers(1, 10**9))
def test_entries_decoded_together_are_each_decoded_alone(
    stored: list[tuple[list[Any], str]], first: int
) -> None:
    """One read's entries decoded in one loop (a tailer's ``XREAD``, an ``XRANGE``) are
    what each entry's own decoding gives, in order; one that decoding alone refuses is
    refused."""
    numbers = [first + at for at in range(len(stored))]
    datas = [_stored_forms(items, kind) for items, kind in stored]
    alone: list[Any] = []
    for number, data in zip(numbers, datas, strict=True):
        try:
            alone.append(decode_entry(number, data))
        except ValueError:
            with pytest.raises(ValueError):
                decode_entries(numbers, datas)
            return
    together = decode_entries(numbers, datas)
    assert together == alone
    assert [(e.number, e.events, e.end, e.token) for e in together] == [
        (e.number, e.events, e.end, e.token) for e in alone
    ]


def test_raw_entries_decode_together_as_one_at_a_time() -> None:
    """The tailer's and ``XRANGE``'s raw entries: every shape a Redis reply may take
    (RESP2 bytes, text under ``decode_responses``, RESP3 maps, extra fields) decodes as
    :func:`_decode` decodes each; one without data fails alike."""
    from fluxstream.relay.redis_log import _decode, _decode_all

    text = encode_entry([TextDelta("k", 0, 0, "a")]).encode()
    end = encode_entry([End(Outcome.DONE, None)], end_record(Outcome.DONE, None, None, None))
    shapes: list[list[Any]] = [
        [[b"1-0", [b"d", text]], [b"2-0", [b"d", end.encode()]]],
        [["1-0", ["d", text.decode()]], ["2-0", ["d", end]]],
        [[b"1-0", {b"d": text}], [b"2-0", [b"x", b"1", b"d", end.encode()]]],
        [[b"1-0", [b"d", text]], [b"2-0", {"d": end}]],
    ]
    for items in shapes:
        assert _decode_all(items) == [_decode(item) for item in items]
    with pytest.raises(RelayError):
        _decode_all([[b"1-0", [b"d", text]], [b"2-0", [b"x", b"1"]]])
    with pytest.raises(RelayError):
        _decode([b"2-0", [b"x", b"1"]])


def test_end_entries_and_other_events_take_the_general_path() -> None:
    end = end_record(Outcome.DONE, None, {"id": "x"}, {"t": 1})
    data = encode_entry([End(Outcome.DONE, None)], end)
    entry = decode_entry(9, data)
    assert entry.events == (End(Outcome.DONE, None),) and entry.end == end
    assert decode_entry(9, data.encode()) == entry


def test_followed_items_are_made_once_per_entry_and_equal_to_one_built_per_follower() -> None:
    items = [TextDelta("k", 0, 0, "a"), Finish("k", 0, "stop"), ReasoningDelta("k", 0, 0, "r")]
    entry = decode_entry(4, encode_entry(items))
    first = relayed(entry)
    assert relayed(entry) is first
    assert first == tuple(RelayEvent(Position(4, i), e) for i, e in enumerate(items))
    assert entry == decode_entry(4, encode_entry(items))  # the cache is not part of equality


@settings(max_examples=300, deadline=None)
@given(st.lists(events, min_size=0, max_size=4), st.integers(0, 10**12))
def test_values_built_field_by_field_are_the_constructors(items: list[Any], number: int) -> None:
    """The entries the fast decoding builds and the followed items ``relayed`` builds skip
    their frozen dataclasses' ``__init__``: equal, alike in ``repr``, hash and order, each
    field the one given, and later cached values still kept off equality."""
    events = tuple(items)
    built, general = plain_entry(number, events), Entry(number, events)
    assert built == general and repr(built) == repr(general)
    assert (built.number, built.events, built.end, built.token) == (number, events, None, None)
    for index, event in enumerate(events):
        position, general_position = _position(number, index), Position(number, index)
        assert position == general_position and repr(position) == repr(general_position)
        assert hash(position) == hash(general_position) and vars(position) == vars(
            general_position
        )
        assert position < Position(number, index + 1) and not position < general_position
        item = _relay_event(position, event)
        assert item == RelayEvent(general_position, event)
        assert repr(item) == repr(RelayEvent(general_position, event))
        assert item.id == f"{number}-{index}"
    assert relayed(built) == tuple(
        RelayEvent(Position(number, i), e) for i, e in enumerate(events)
    )
    for index, item in enumerate(relayed(built)):  # one event: built inline in relayed
        assert vars(item.position) == vars(Position(number, index))
        assert hash(item.position) == hash(Position(number, index))
        assert repr(item) == repr(RelayEvent(Position(number, index), events[index]))
    assert built == general  # the cached items are not part of equality


_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


@given(st.lists(events, min_size=1, max_size=4), st.integers(1, 10**6))
def test_sse_bytes_are_the_general_encoding(items: list[Any], number: int) -> None:
    for index, event in enumerate(items):
        item = RelayEvent(Position(number, index), event)
        general = (
            b"id: " + item.id.encode() + b"\nevent: " + event.type.encode()
            + b"\ndata: " + _EVENT.dump_json(event) + b"\n\n"
        )
        assert sse_event(item) == general
        assert sse_event(item) is sse_event(item)
        assert json.loads(general.split(b"data: ", 1)[1]) == json.loads(_EVENT.dump_json(event))


@pytest.mark.anyio
async def test_followers_of_one_process_share_the_decoded_events(
    redis_server: RedisServer,
) -> None:
    """Three followers of one Redis reply (one log, one process) get the very same items:
    each entry decoded once, its items built once, its SSE bytes serialised once."""
    from fluxstream.relay import RedisReplyLog

    log = RedisReplyLog(redis_server.url, prefix="share:", lease=2.0)
    writer = RedisReplyLog(redis_server.url, prefix="share:", lease=2.0)
    try:
        access = writer._access()
        owner = access.new_owner()
        await access.create("k", owner, {})
        got: list[list[RelayEvent]] = [[], [], []]
        sse: list[list[bytes]] = [[], []]

        async def follow(into: list[RelayEvent]) -> None:
            async for item in log.follow("k"):
                into.append(item)

        async def follow_sse(into: list[bytes]) -> None:
            async for chunk in to_sse(log.follow("k")):
                into.append(chunk)

        from fluxstream.relay.codec import Entry

        async def until(check: Callable[[], bool]) -> None:
            with anyio.fail_after(5):
                for _ in range(2000):  # the deadline ends it first
                    if check():
                        return
                    await anyio.sleep(0.005)

        waiters = log._tailer._waiters
        stream = log.keys("k")["stream"]
        async with anyio.create_task_group() as tg:
            for into in got:
                tg.start_soon(follow, into)
            for chunks in sse:
                tg.start_soon(follow_sse, chunks)
            # Every follower waits on the tailer before an entry comes, and has each entry
            # before the next (none reads one of its own, however slow the machine).
            await until(lambda: len(waiters.get(stream, ())) == 5)
            for n in range(1, 6):
                entry = Entry(n, (TextDelta("k", 0, n - 1, "x"), TextDelta("k", 1, n - 1, "y")))
                await writer._append("k", owner, entry, token=None, final=False)
                await until(lambda n=n: all(len(seen) >= 2 * n for seen in [*got, *sse]))
            end = Entry(6, (End(Outcome.DONE, None),), end_record(Outcome.DONE, None, None, None))
            await writer._append("k", owner, end, token=None, final=True)
        assert len(got[0]) == 11
        for other in got[1:]:
            assert other == got[0]
            assert all(a is b for a, b in zip(other, got[0], strict=True))
        assert sse[0] == sse[1]
        assert sse[0] == [sse_event(item) for item in got[0]]
        assert all(a is b for a, b in zip(sse[0], sse[1], strict=True))
    finally:
        await log.aclose()
        await writer.aclose()


@pytest.mark.anyio
async def test_many_streams_coming_and_going_are_all_followed_exactly(
    redis_server: RedisServer,
) -> None:
    """The tailer keeps its ``XREAD`` between reads and changes it where it changes: replies
    that start and end at different moments (streams added while a read is blocked, removed
    when their linger ends) are each followed exactly."""
    from fluxstream.relay import RedisReplyLog
    from fluxstream.relay.codec import Entry

    log = RedisReplyLog(redis_server.url, prefix="many:", lease=2.0)
    writer = RedisReplyLog(redis_server.url, prefix="many:", lease=2.0)
    access = writer._access()
    try:
        texts: dict[str, str] = {}

        owners = {f"r{i}": access.new_owner() for i in range(12)}
        for key, owner in owners.items():
            await access.create(key, owner, {})

        async def produce(key: str, entries: int, delay: float) -> None:
            owner = owners[key]
            await anyio.sleep(delay)
            for n in range(1, entries + 1):
                entry = Entry(n, (TextDelta(key, 0, n - 1, chr(97 + n % 26)),))
                await writer._append(key, owner, entry, token=None, final=False)
                await anyio.sleep(0.01 * (1 + n % 3))
            end = Entry(
                entries + 1, (End(Outcome.DONE, None),),
                end_record(Outcome.DONE, None, None, None),
            )
            await writer._append(key, owner, end, token=None, final=True)

        async def follow(key: str) -> None:
            buf = ""
            async for item in log.follow(key):
                if isinstance(item.event, TextDelta):
                    assert item.event.offset == len(buf)
                    buf += item.event.text
            texts[key] = buf

        with anyio.fail_after(60):
            async with anyio.create_task_group() as producers:
                for i in range(12):
                    producers.start_soon(produce, f"r{i}", 5 + i * 3, 0.05 * (i % 4))
                await anyio.sleep(0.02)
                async with anyio.create_task_group() as followers:
                    for i in range(12):
                        for _ in range(2):
                            followers.start_soon(follow, f"r{i}")
                        await anyio.sleep(0.03)
        for i in range(12):
            entries = 5 + i * 3
            assert texts[f"r{i}"] == "".join(chr(97 + n % 26) for n in range(1, entries + 1))
    finally:
        await log.aclose()
        await writer.aclose()


@pytest.mark.anyio
async def test_a_waiter_cancelled_or_timed_out_leaves_the_others_of_its_stream_waiting(
    redis_server: RedisServer,
) -> None:
    """The tailer's waits: one follower's wait cancelled, another's timed out, a third woken
    by the entry; the cancel and the time-out take only their own waiter off (none is
    left behind), the woken one gets the entry."""
    from fluxstream.relay import RedisReplyLog
    from fluxstream.relay.codec import Entry

    log = RedisReplyLog(redis_server.url, prefix="waits:", lease=2.0)
    writer = RedisReplyLog(redis_server.url, prefix="waits:", lease=2.0)
    access = writer._access()
    try:
        owner = access.new_owner()
        await access.create("k", owner, {})
        tailer = log._tailer
        stream = log.keys("k")["stream"]
        woken: list[Any] = []

        async def read(wait: float) -> None:
            woken.append(await log._read("k", 0, wait))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as waits:
                # Woken by the entry, whatever a loaded machine adds before it is written.
                waits.start_soon(read, 60.0)
                async with anyio.create_task_group() as cancelled:
                    cancelled.start_soon(read, 5.0)
                    for _ in range(1000):  # until both wait (the deadline ends it first)
                        if len(tailer._waiters.get(stream, ())) == 2:
                            break
                        await anyio.sleep(0.005)
                    assert len(tailer._waiters[stream]) == 2
                    cancelled.cancel_scope.cancel()
                assert len(tailer._waiters[stream]) == 1
                await read(0.1)  # times out: nothing written yet
                assert woken == [[]] and len(tailer._waiters[stream]) == 1
                entry = Entry(1, (TextDelta("k", 0, 0, "a"),))
                await writer._append("k", owner, entry, token=None, final=False)
        assert [[e.number for e in entries] for entries in woken] == [[], [1]]
        assert stream not in tailer._waiters and (
            tailer._deadlines is None or not tailer._deadlines.pending()
        )
    finally:
        await log.aclose()
        await writer.aclose()
