"""Sans-IO parts of the relay: coalescing, positions, entries, the takeover's trim and gaps."""

from __future__ import annotations

import pytest

from fluxstream._events import End, Finish, Outcome, ReasoningDelta, TextDelta, ToolCallDelta
from fluxstream.errors import RelayPositionError
from fluxstream.relay import Entry, Position, coalesce, parse_position
from fluxstream.relay.codec import decode_entry, encode_entry
from fluxstream.relay.takeover import StoredReply


def test_coalesce_joins_contiguous_deltas_of_one_channel_only() -> None:
    events = [
        TextDelta("k", 0, 0, "ab"), TextDelta("k", 0, 2, "c"),
        ReasoningDelta("k", 0, 0, "r"), TextDelta("k", 0, 3, "d"), TextDelta("k", 1, 0, "x"),
        TextDelta("k", 1, 5, "gap"),
        ToolCallDelta("k", 0, 0, "id", "f", "{", 0), ToolCallDelta("k", 0, 0, None, None, "}", 1),
        ToolCallDelta("k", 0, 1, "id2", "g", "", 0),
        Finish("k", 0, "stop"),
    ]
    assert coalesce(events) == [
        TextDelta("k", 0, 0, "abc"), ReasoningDelta("k", 0, 0, "r"), TextDelta("k", 0, 3, "d"),
        TextDelta("k", 1, 0, "x"), TextDelta("k", 1, 5, "gap"),
        ToolCallDelta("k", 0, 0, "id", "f", "{}", 0), ToolCallDelta("k", 0, 1, "id2", "g", "", 0),
        Finish("k", 0, "stop"),
    ]


def test_entries_round_trip_through_json() -> None:
    events = [TextDelta("k", 0, 0, "é👋🏽\n\"\\"), Finish("k", 0, "stop")]
    end = {"outcome": "done", "reason": None, "reply": {"id": "x"}, "token": None}
    assert decode_entry(3, encode_entry(events)) == Entry(3, tuple(events))
    assert decode_entry(4, encode_entry([End(Outcome.DONE, None)], end)).end == end


def test_positions_parse_strictly_and_order() -> None:
    assert parse_position("12-3") == Position(12, 3) > Position(12, 2) > Position(11, 9)
    assert str(Position(5, 0)) == "5-0"
    for bad in ["12", "a-b", "1-2-3", " -1", "1" * 16 + "-0", "1-" + "1" * 10]:
        with pytest.raises(RelayPositionError):
            parse_position(bad)


def test_takeover_trims_what_is_stored_and_fills_what_the_token_is_ahead_by() -> None:
    stored = StoredReply.from_entries("k", [Entry(1, (TextDelta("k", 0, 0, "Hello"),))])
    # The token got further than the stored events: the gap is appended first.
    reply = {"choices": [{"index": 0, "text": "Hello, wor", "finish_reason": None}]}
    assert stored.gaps(reply) == [TextDelta("k", 0, 5, ", wor")]
    # Resumed events that repeat stored text are trimmed, new ones pass.
    assert stored.filter(TextDelta("k", 0, 7, "wo")) == []
    assert stored.filter(TextDelta("k", 0, 8, "orld")) == [TextDelta("k", 0, 10, "ld")]
    assert stored.filter(TextDelta("k", 0, 12, "!")) == [TextDelta("k", 0, 12, "!")]
    assert stored.filter(Finish("k", 0, "stop")) == [Finish("k", 0, "stop")]
    assert stored.filter(Finish("k", 0, "stop")) == []
    # A token behind the stored events adds nothing.
    assert stored.gaps({"choices": [{"index": 0, "text": "Hel"}]}) == []


def test_takeover_gaps_cover_tool_calls_and_finish() -> None:
    stored = StoredReply.from_entries(
        "k", [Entry(1, (ToolCallDelta("k", 0, 0, "c1", "f", '{"a"', 0),))]
    )
    reply = {"choices": [{
        "index": 0, "text": "", "finish_reason": "tool_calls",
        "tool_calls": [{"index": 0, "id": "c1", "name": "f", "arguments": '{"a": 1}'},
                       {"index": 1, "id": "c2", "name": "g", "arguments": "{}"}],
    }]}
    assert stored.gaps(reply) == [
        ToolCallDelta("k", 0, 0, None, None, ": 1}", 4),
        ToolCallDelta("k", 0, 1, "c2", "g", "{}", 0),
        Finish("k", 0, "tool_calls"),
    ]


def test_redis_keys_are_safe_for_any_content_key() -> None:
    from fluxstream.relay import RedisReplyLog

    log = RedisReplyLog("redis://127.0.0.1:1/0", prefix="p:")
    plain = log.keys("abc-1.2_3")
    assert plain["stream"] == "p:{abc-1.2_3}:s"
    seen = set()
    for key in ["a{b}", "a}b{", "a:b", "a b", "*", "\n", "é", "x" * 101, "{", "}", ""]:
        names = log.keys(key)
        tag = names["stream"][len("p:"):].split("}")[0]
        # One hash tag per reply, made only of safe characters: no key can reach another's.
        assert tag.startswith("{#") and all(c in "0123456789abcdef" for c in tag[2:])
        assert len({n.split("}")[0] for n in names.values()}) == 1
        seen.add(names["stream"])
    assert len(seen) == 11


def test_coalesce_joins_a_long_run_once_and_breaks_where_the_old_rules_did() -> None:
    """A frame of many deltas becomes one event per run (text joined once); a tool-call
    fragment with an id, a name or a replacement, or a replaced run, starts anew."""
    text = [TextDelta("k", 0, i, "é") for i in range(500)]
    assert coalesce(text) == [TextDelta("k", 0, 0, "é" * 500)]
    calls = [
        ToolCallDelta("k", 0, 0, "id", "f", "{", 0), ToolCallDelta("k", 0, 0, None, None, "a", 1),
        ToolCallDelta("k", 0, 0, None, None, "b", 2),
        ToolCallDelta("k", 0, 0, None, None, "{}", 0, replace=True),
        ToolCallDelta("k", 0, 0, None, None, "x", 2),
        ToolCallDelta("k", 0, 0, None, "g", "y", 3),
    ]
    assert coalesce(calls) == [
        ToolCallDelta("k", 0, 0, "id", "f", "{ab", 0),
        ToolCallDelta("k", 0, 0, None, None, "{}", 0, replace=True),
        ToolCallDelta("k", 0, 0, None, None, "x", 2),
        ToolCallDelta("k", 0, 0, None, "g", "y", 3),
    ]
    assert coalesce([]) == [] and coalesce(text[:1]) == text[:1]


def test_a_packed_write_is_the_command_packed_argument_by_argument() -> None:
    """The producer's commands, packed from a per-reply prefix, are byte for byte what
    packing every argument gives (append with and without token, final, refresh, release),
    and a changed lease or TTL packs the prefix again."""
    pytest.importorskip("redis")
    from fluxstream.relay._redis_connection import pack
    from fluxstream.relay._redis_writes import WriteCommands
    from fluxstream.relay.redis_log import RedisReplyLog
    from fluxstream.relay.writer import Write

    log = RedisReplyLog("redis://127.0.0.1:1/0")
    timing = [5.0, 3600.0]
    commands = WriteCommands(log.keys, {"append": "a" * 40, "refresh": "r" * 40,
                                        "release": "l" * 40}, lambda: (timing[0], timing[1]),
                             "p:written")
    entry = Entry(7, (TextDelta("k", 0, 0, "é\"x"),))
    end = Entry(8, (End(Outcome.DONE, None),), {"outcome": "done", "reply": None})
    writes = [
        Write("a b{c}", "owner", entry), Write("a b{c}", "owner", entry, {"t": [1, "é"]}),
        Write("a b{c}", "owner", end, None, True), Write("a b{c}", "owner"),
        Write("a b{c}", "owner", release=True), Write("other", "owner2", entry),
    ]
    for _ in range(2):  # the second time from the prefixes kept
        for write in writes:
            assert commands.packed(write) == pack(commands.args(write))
    timing[0] = 0.25
    for write in writes:
        assert commands.packed(write) == pack(commands.args(write))
        assert b"$3\r\n250\r\n" in commands.packed(write) or write.release
