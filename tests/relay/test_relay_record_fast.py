"""The recording side's shortcuts, each against the general path it replaces: an entry's
JSON written by msgspec against pydantic's serializer (random entries: the bytes stored must
not change, so followers and old readers read what they read before)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

import fluxstream._events as ev
from fluxstream.relay.codec import decode_entry, entry_json

_EVENTS: TypeAdapter[list[ev.Event]] = TypeAdapter(list[ev.Event])


def general(events: list[Any]) -> bytes:
    """pydantic's serializer for every entry (what ``entry_json`` did before msgspec)."""
    return b'{"e":' + _EVENTS.dump_json(events) + b"}"


# Every code point, surrogates included (msgspec refuses those: pydantic then decides).
texts = st.text(st.characters(exclude_categories=()), max_size=12)
numbers = st.integers(min_value=-(2**70), max_value=2**70)
keys = st.sampled_from(["k", "reply-é", "", "a\"b\\c\x00"])
texts_of = [
    st.builds(kind, keys, numbers, numbers, texts)
    for kind in (ev.TextDelta, ev.ReasoningDelta, ev.RefusalDelta)
]
calls = st.builds(
    ev.ToolCallDelta, keys, numbers, numbers, st.none() | texts, st.none() | texts, texts,
    numbers, st.booleans(),
)
finishes = st.builds(ev.Finish, keys, numbers, st.sampled_from(["stop", "length"]))
events = st.one_of(*texts_of, calls, finishes)


def outcome(encode: Any, items: list[Any]) -> bytes | str:
    try:
        return bytes(encode(items))
    except Exception as exc:  # the error itself is compared
        return f"{type(exc).__name__}: {exc}"


@settings(max_examples=600, deadline=None)
@given(st.lists(events, max_size=5))
def test_entry_json_writes_what_pydantic_writes(items: list[Any]) -> None:
    assert outcome(entry_json, items) == outcome(general, items)
    assert outcome(entry_json, tuple(items)) == outcome(general, items)


def test_plain_entries_take_msgspec_and_read_back() -> None:
    items = [
        ev.TextDelta("k", 0, 3, "é\u2028</\x01\"\\ 😀"),
        ev.ToolCallDelta("k", 1, 0, None, "f", "{", 0),
    ]
    assert entry_json(items) == general(items)
    assert decode_entry(2, entry_json(items)).events == tuple(items)
    # A lone surrogate: msgspec refuses it, and pydantic's error is the one raised.
    with pytest.raises(ValueError, match="surrogates not allowed") as caught:
        entry_json([ev.TextDelta("k", 0, 0, "\ud800")])
    assert type(caught.value).__name__ == "PydanticSerializationError"


def test_a_terminal_entry_is_unchanged() -> None:
    end = {"outcome": "done", "reason": None, "reply": {"id": "x"}, "token": {"v": 1}}
    data = entry_json([ev.End(ev.Outcome.DONE, None)], end)
    assert data == b'{"e":' + _EVENTS.dump_json([ev.End(ev.Outcome.DONE, None)]) + b',"end":' + (
        TypeAdapter(dict[str, Any]).dump_json(end)) + b"}"


def test_the_writers_wake_up_keeps_its_timer_and_still_wakes_in_time() -> None:
    """The asyncio wake-up keeps one timer between waits: a wait that needs to wake sooner
    than the kept timer still wakes at its own time, a set() still wakes it at once, and a
    wait after the timer fired gets a new one."""
    import asyncio

    from fluxstream.relay.writer import _LoopWake

    async def main() -> None:
        loop = asyncio.get_running_loop()
        wake = _LoopWake(loop)
        # Woken by set() long before its timer: the timer (60 s out) is kept.
        waiting = asyncio.ensure_future(wake.wait(60.0))
        await asyncio.sleep(0)
        wake.set()
        await asyncio.wait_for(waiting, 5)
        kept = wake._timer
        assert kept is not None and kept.when() > loop.time() + 30
        # A shorter wait wakes at its own time, not at the kept timer's.
        wake.clear()
        started = loop.time()
        await asyncio.wait_for(wake.wait(0.05), 5)
        assert 0.04 <= loop.time() - started < 5
        assert kept.cancelled()
        # Its timer fired: the next wait makes a new one, and a later one keeps it.
        assert wake._timer is None
        waiting = asyncio.ensure_future(wake.wait(0.05))
        await asyncio.sleep(0)
        timer = wake._timer
        await asyncio.wait_for(waiting, 5)
        assert timer is not None and not timer.cancelled()
        wake.clear()
        waiting = asyncio.ensure_future(wake.wait(60.0))
        await asyncio.sleep(0)
        assert wake._timer is not None and wake._timer.when() > loop.time() + 30
        wake.set()
        await asyncio.wait_for(waiting, 5)
        wake.clear()
        held = wake._timer
        waiting = asyncio.ensure_future(wake.wait(120.0))  # later than the kept one: kept
        await asyncio.sleep(0)
        assert wake._timer is held
        wake.stop()
        assert held.cancelled() and wake._timer is None
        waiting.cancel()

    asyncio.run(main())


# ---------------------------------------------------------------- a frame's write results

def _shown(results: list[Any]) -> list[Any]:
    """Results comparable: an error as its type and message (each call makes new ones)."""
    return [
        (type(r).__name__, str(r)) if isinstance(r, Exception) else (type(r).__name__, r)
        for r in results
    ]


def _write(kind: str) -> Any:
    from fluxstream.relay.codec import plain_entry
    from fluxstream.relay.writer import Write

    entry = plain_entry(7, (ev.TextDelta("k", 0, 0, "x"),))
    return {
        "append": Write("k", "me", entry),
        "final": Write("k", "me", entry, None, True),
        "refresh": Write("k", "me"),
        "release": Write("k", "me", release=True),
    }[kind]


def _reply(kind: str) -> Any:
    from redis.exceptions import ResponseError

    return {
        "0": 0, "1": 1, "-1": -1, "-2": -2, "false": False, "0.0": 0.0,
        "xadd": ResponseError("ERR XADD id equal or smaller"), "wrongtype": ResponseError("WRONG"),
        "error": OSError("gone"), "other": b"0",
    }[kind]


_WRITE_KINDS = st.sampled_from(["append", "final", "refresh", "release"])
# Mostly zeros, as a frame's replies are: the shortcut and the general path both run.
_REPLY_KINDS = st.sampled_from(
    ["0"] * 8 + ["1", "-1", "-2", "false", "0.0", "xadd", "wrongtype", "error", "other"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_WRITE_KINDS, _REPLY_KINDS), max_size=8))
def test_a_frames_results_read_as_each_writes_own(pairs: list[tuple[str, str]]) -> None:
    from fluxstream.relay.redis_log import _results, _written

    writes = [_write(w) for w, _ in pairs]
    replies = [_reply(r) for _, r in pairs]
    general = [_written(w, r) for w, r in zip(writes, replies, strict=True)]
    assert _shown(_results(writes, replies)) == _shown(general)


def test_results_of_all_zero_replies_are_false_and_a_cancel_is_not_lost() -> None:
    from fluxstream.relay.redis_log import _results

    writes = [_write("append") for _ in range(5)]
    assert _results(writes, [0] * 5) == [False] * 5
    assert _results(writes, [0, 0, 1, 0, 0]) == [False, False, True, False, False]


def test_results_of_a_reply_count_that_is_not_the_writes_raise() -> None:
    from fluxstream.relay.redis_log import _results

    for replies in ([0, 0, 0], [0, 0, 1], [0]):
        with pytest.raises(ValueError):  # as zip(strict=True): never read as all written
            _results([_write("append")] * 2, replies)
