"""Adversarial properties of the Responses and Anthropic Messages formats (named and ``auto``).

Recorded streams (``tests/fixtures/chat/resp-*``, ``anth-*``) are mutated event by event —
reordered, duplicated, dropped, indices out of range or of the wrong type, ``*.done`` /
``content_block_stop`` removed, unknown event types, deltas for items and blocks that never
started, deep JSON, ``sequence_number`` going backwards — and fed to a strict
:class:`~fluxstream._parser.StreamParser`. Whatever arrives:

* nothing but a typed :class:`~fluxstream.errors.FluxstreamError` is raised, and the reply
  (and its JSON) can still be built;
* the events do not depend on where the reads were cut;
* every delta lands at its offset (the events rebuild the reply);
* removing only the closing events (``*.done``, ``content_block_stop``, pings) loses no text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fixture_files import chat_stream, chat_streams, require
from format_corpus import check_events_rebuild_reply, run
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sse_frames import frames

from fluxstream._events import Event
from fluxstream._parser import StreamParser
from fluxstream.errors import FluxstreamError, ResumeMismatchError

RESP = chat_streams("resp-")
ANTH = chat_streams("anth-")
FORMAT = {"resp": "responses", "anth": "anthropic_messages"}


def events_of(path: Path) -> list[dict[str, Any]]:
    """The JSON payloads of a recorded stream, in order (frames that are not JSON objects,
    such as a ``[DONE]`` a harness appended, are left out)."""
    out = []
    for line in require(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("data:"):
            data = line[5:].strip()
            if data.startswith("{"):
                out.append(json.loads(data))
    return out


def encode(payloads: list[Any], *, named: bool = True) -> bytes:
    return frames(*payloads, named=named)


def pieces(body: bytes, cuts: list[int]) -> list[bytes]:
    cuts = sorted(set(c for c in cuts if 0 < c < len(body)))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


def feed_all(data: list[bytes], fmt: str, *, strict: bool = True) -> tuple[list[Event], Any]:
    """Events and parser, or the typed error the strict parser raised (anything else is a
    bug and propagates)."""
    try:
        events, parser = run(data, format=fmt, strict=strict)
    except FluxstreamError as exc:
        return [], type(exc)
    reply = parser.reply
    reply.model_dump_json()  # serialisable whatever arrived
    check_events_rebuild_reply(events, reply)
    return events, parser


_INDEX_KEYS = ("index", "output_index", "content_index", "summary_index", "sequence_number")
_ODD_VALUES: list[Any] = [-1, 0, 1, 2, 7, 10**6, 2**70, True, None, "0", 1.5, [], {}]


#: One edit of a recorded stream: ``(op, at, *arguments)`` (see :func:`apply`).
Edit = tuple[Any, ...]
_OPS = ["swap", "dup", "drop", "index", "unknown", "deep", "field", "seq_back", "junk"]


def draw_edits(draw: Any, events: list[dict[str, Any]]) -> tuple[Edit, ...]:
    """A handful of random edits (``draw(strategy, label)`` draws), each valid for the
    stream as the edits before it left it."""
    out: list[Any] = [dict(e) for e in events]
    edits: list[Edit] = []
    for _ in range(draw(st.integers(1, 6), "edits")):
        if not out:
            break
        op = draw(st.sampled_from(_OPS), "op")
        i = draw(st.integers(0, len(out) - 1), "at")
        ev = out[i]
        edit: Edit = (op, i)
        if op == "swap":
            edit = (op, i, draw(st.integers(0, len(out) - 1), "with"))
        elif op == "index" and isinstance(ev, dict):
            keys = [k for k in _INDEX_KEYS if k in ev] or ["index"]
            edit = ("field", i, draw(st.sampled_from(keys), "key"),
                    draw(st.sampled_from(_ODD_VALUES), "value"))
        elif op == "unknown":
            edit = (op, i, draw(st.sampled_from(
                ["response.mystery", "mystery", "content_block_mystery", "text", "error",
                 "message_delta", "response.output_item.added", "ping", "keepalive"]), "type"))
        elif op == "deep":
            edit = (op, i, draw(st.sampled_from([50, 300, 5000]), "depth"))
        elif op == "field" and isinstance(ev, dict) and ev:
            edit = (op, i, draw(st.sampled_from(sorted(ev)), "field"),
                    draw(st.sampled_from([*_ODD_VALUES, "x", {"a": 1}]), "value"))
        elif op == "junk":
            edit = (op, i, draw(st.sampled_from(["[1,2]", "nul", "{", '"s"', "{}"]), "junk"))
        out = apply(out, [edit])
        edits.append(edit)
    return tuple(edits)


def apply(events: list[Any], edits: Any) -> list[Any]:
    """``events`` with ``edits`` made, in order (an edit that does not apply is a no-op)."""
    out: list[Any] = [dict(e) if isinstance(e, dict) else e for e in events]
    for op, i, *args in edits:
        if not out:
            break
        ev = out[i]
        if op == "swap":
            out[i], out[args[0]] = out[args[0]], out[i]
        elif op == "dup":
            out.insert(i, ev)
        elif op == "drop":
            del out[i]
        elif op == "field" and isinstance(ev, dict) and args:
            out[i] = {**ev, args[0]: args[1]}
        elif op == "unknown":
            out.insert(i, {"type": args[0]})
        elif op == "deep":
            out.insert(i, '{"type":"response.output_item.added","output_index":9,"item":'
                       + "[" * args[0] + "]" * args[0] + "}")
        elif op == "seq_back" and isinstance(ev, dict) and type(ev.get("sequence_number")) is int:
            out[i] = {**ev, "sequence_number": max(0, ev["sequence_number"] - 3)}
        elif op == "junk":
            out.insert(i, args[0])
    return out


def mutate(events: list[dict[str, Any]], data: st.DataObject) -> list[Any]:
    """A hostile version of a recorded stream: a handful of random edits."""
    return apply(events, draw_edits(lambda s, label: data.draw(s, label=label), events))


@st.composite
def mutated_cases(draw: Any) -> tuple[str, str, tuple[Edit, ...], int]:
    """(fixture, format, edits, cut): a recorded stream, mutated, read with a resume token
    taken after ``cut`` events."""
    path = draw(st.sampled_from(RESP + ANTH))
    fmt = draw(st.sampled_from([FORMAT[path.stem.split("-")[0]], "auto"]))
    events = events_of(path)
    edits = draw_edits(lambda s, label: draw(s), events)
    cut = draw(st.integers(1, max(1, len(apply(events, edits)) - 1)))
    return path.stem, fmt, edits, cut


@pytest.mark.parametrize("fmt_name", ["named", "auto"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_streams_raise_only_typed_errors_and_ignore_read_boundaries(
    fmt_name: str, data: st.DataObject
) -> None:
    path = data.draw(st.sampled_from(RESP + ANTH), label="fixture")
    fmt = FORMAT[path.stem.split("-")[0]] if fmt_name == "named" else "auto"
    body = encode(mutate(events_of(path), data), named=data.draw(st.booleans(), label="named"))
    whole = feed_all([body], fmt)
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=12), label="cuts")
    assert feed_all(pieces(body, cuts), fmt)[0] == whole[0]
    lax = feed_all([body], fmt, strict=False)
    assert lax[1].__class__ is StreamParser  # non-strict never raises on these


def _closing(event: dict[str, Any]) -> bool:
    kind = event.get("type", "")
    return kind in ("content_block_stop", "ping", "keepalive") or (
        kind.endswith(".done") and kind != "response.output_item.done"
        and kind != "response.function_call_arguments.done"
    )


@pytest.mark.parametrize("path", RESP + ANTH, ids=[p.stem for p in RESP + ANTH])
def test_closing_events_removed_lose_no_text(path: Path) -> None:
    """Servers and proxies that never send the ``*.done`` / ``content_block_stop`` events:
    the text, reasoning and tool calls are the same."""
    fmt = FORMAT[path.stem.split("-")[0]]
    events = events_of(path)
    _, whole = run([encode(events)], format=fmt)
    _, bare = run([encode([e for e in events if not _closing(e)])], format=fmt)
    a, b = whole.reply.choices, bare.reply.choices
    assert [(c.text, c.reasoning, c.refusal) for c in a] == [
        (c.text, c.reasoning, c.refusal) for c in b]
    assert [[(t.id, t.name, t.arguments) for t in c.tool_calls] for c in a] == [
        [(t.id, t.name, t.arguments) for t in c.tool_calls] for c in b]


def _number(event: Any) -> int | None:
    value = event.get("sequence_number") if isinstance(event, dict) else None
    return value if type(value) is int and 0 <= value < 2**53 else None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutated_cases())
# A first frame whose ``type`` is not a string: ``auto`` took it for Chat Completions and
# dropped the whole reply (a token taken after it gave the text).
@example(case=("resp-syn-error-event-flat", "auto", (("field", 0, "type", None),), 1))
@example(case=("anth-docs-basic", "auto", (("field", 0, "type", None),), 1))
@example(case=("resp-syn-error-event-flat", "auto",
               (("swap", 0, 0), ("swap", 0, 0), ("swap", 0, 0), ("field", 0, "type", None)), 1))
@example(case=("resp-vercel-azure-function-call", "auto", (("field", 0, "type", 5),), 2))
@example(case=("anth-docs-basic", "auto", (("field", 0, "type", []),), 1))
# A re-read that goes on past a hole, and one that starts over (replays dropped, counted).
@example(case=("resp-vercel-azure-function-call", "responses", (("drop", 3),), 3))
@example(case=("resp-vercel-azure-function-call", "responses", (("seq_back", 4),), 4))
@example(case=("resp-syn-error-event-flat", "responses", (("swap", 1, 2),), 1))
@example(case=("resp-syn-error-event-flat", "responses", (("drop", 0),) * 4, 1))
def test_a_token_after_any_event_of_a_mutated_stream_resumes_exactly(
    case: tuple[str, str, tuple[Edit, ...], int],
) -> None:
    """Whatever the stream, a resume token taken after any event and resumed with the rest
    gives the reply of reading it in one go (found: resumed final arguments spliced with
    the streamed ones, absurd sequence numbers, negative block indices, ``auto`` deciding
    again on the first event after the token, ``auto`` deciding on a first frame whose
    ``type`` is not a string). The rest is what a Responses re-read sends, so its leading
    events at or below the token's ``sequence_number`` are replays (dropped, as a whole read
    of the stream without them shows), and a rest that goes on past ``N + 1`` is a rejected
    re-read (ResumeMismatchError), never a splice."""
    from resume_tokens import content, read, token

    name, fmt, edits, cut = case
    events = apply(events_of(chat_stream(name)), edits)
    pieces = [encode([e]) for e in events]
    first = StreamParser(content_key="k", format=fmt)
    for piece in pieces[:cut]:
        first.feed(piece)
    if first.finished or first.done:
        return  # nothing to resume
    saved = token(first)
    after = saved["sequence"]
    rest = list(range(cut, len(events)))
    if after is not None:
        new = [i for i in rest if (_number(events[i]) or -1) > after] or [len(events)]
        rest = [i for i in rest if not (i < new[0] and _number(events[i]) is not None)]
    second = StreamParser.from_token(saved, format=fmt)
    try:
        for i in rest:
            second.feed(pieces[i])
    except ResumeMismatchError:
        # Only a re-read whose first new event is not N + 1 is refused.
        assert after is not None and new[0] < len(events)
        assert _number(events[new[0]]) != after + 1
        return
    second.close()
    kept = pieces[:cut] + [pieces[i] for i in rest]
    assert content(second.reply) == content(read(kept, fmt))


def test_auto_resumed_from_a_token_is_not_decided_again_by_a_ping() -> None:
    """A Responses stream resumed with ``format="auto"``: the first event after the token
    is a ``ping`` (which the Responses format counts as a heartbeat). Before, the resumed
    ``auto`` decided again on it and read the rest as Anthropic Messages: text lost."""
    from resume_tokens import content, read, token

    path = require(chat_streams("resp-vercel-azure-text")[0])
    pieces = [encode([e]) for e in events_of(path)]
    first = StreamParser(content_key="k", format="auto")
    for piece in pieces[:3]:
        first.feed(piece)
    second = StreamParser.from_token(token(first), format="auto")
    for piece in [encode([{"type": "ping"}]), *pieces[3:]]:
        second.feed(piece)
    second.close()
    assert content(second.reply) == content(read(pieces, "responses"))
