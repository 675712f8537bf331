"""Adversarial properties of the Responses and Anthropic Messages formats (named and ``auto``).

Recorded streams (``tests/fixtures/chat/resp-*``, ``anth-*``) are mutated event by event —
reordered, duplicated, dropped, indices out of range or of the wrong type, ``*.done`` /
``content_block_stop`` removed, unknown event types, deltas for items and blocks that never
started, deep JSON, ``sequence_number`` going backwards — and fed to a strict
:class:`~fluxstream.parser.StreamParser`. Whatever arrives:

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
from fixture_files import chat_streams, require
from format_corpus import check_events_rebuild_reply, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxstream.errors import FluxstreamError
from fluxstream.events import Event
from fluxstream.parser import StreamParser

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
    parts = []
    for p in payloads:
        text = p if isinstance(p, str) else json.dumps(p)
        kind = p.get("type") if isinstance(p, dict) else None
        head = f"event: {kind}\n" if named and isinstance(kind, str) else ""
        parts.append(f"{head}data: {text}\n\n")
    return "".join(parts).encode()


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


def mutate(events: list[dict[str, Any]], data: st.DataObject) -> list[Any]:
    """A hostile version of a recorded stream: a handful of random edits."""
    out: list[Any] = [dict(e) for e in events]
    for _ in range(data.draw(st.integers(1, 6), label="edits")):
        if not out:
            break
        op = data.draw(st.sampled_from(
            ["swap", "dup", "drop", "index", "unknown", "deep", "field", "seq_back", "junk"]),
            label="op")
        i = data.draw(st.integers(0, len(out) - 1), label="at")
        ev = out[i]
        if op == "swap":
            j = data.draw(st.integers(0, len(out) - 1), label="with")
            out[i], out[j] = out[j], out[i]
        elif op == "dup":
            out.insert(i, ev)
        elif op == "drop":
            del out[i]
        elif op == "index" and isinstance(ev, dict):
            keys = [k for k in _INDEX_KEYS if k in ev] or ["index"]
            key = data.draw(st.sampled_from(keys), label="key")
            out[i] = {**ev, key: data.draw(st.sampled_from(_ODD_VALUES), label="value")}
        elif op == "unknown":
            out.insert(i, {"type": data.draw(st.sampled_from(
                ["response.mystery", "mystery", "content_block_mystery", "text", "error",
                 "message_delta", "response.output_item.added", "ping", "keepalive"]))})
        elif op == "deep":
            depth = data.draw(st.sampled_from([50, 300, 5000]), label="depth")
            out.insert(i, '{"type":"response.output_item.added","output_index":9,"item":'
                       + "[" * depth + "]" * depth + "}")
        elif op == "field" and isinstance(ev, dict) and ev:
            key = data.draw(st.sampled_from(sorted(ev)), label="field")
            out[i] = {**ev, key: data.draw(st.sampled_from([*_ODD_VALUES, "x", {"a": 1}]))}
        elif op == "seq_back" and isinstance(ev, dict) and type(ev.get("sequence_number")) is int:
            out[i] = {**ev, "sequence_number": max(0, ev["sequence_number"] - 3)}
        elif op == "junk":
            out.insert(i, data.draw(st.sampled_from(["[1,2]", "nul", "{", "\"s\"", "{}"])))
    return out


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


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_token_after_any_event_of_a_mutated_stream_resumes_exactly(data: st.DataObject) -> None:
    """Whatever the stream, a resume token taken after any event and resumed with the rest
    gives the reply of reading it in one go (found: resumed final arguments spliced with
    the streamed ones, absurd sequence numbers, negative block indices, ``auto`` deciding
    again on the first event after the token)."""
    from test_formats_resume_tokens import content, read, resumed

    path = data.draw(st.sampled_from(RESP + ANTH), label="fixture")
    fmt = data.draw(st.sampled_from([FORMAT[path.stem.split("-")[0]], "auto"]), label="fmt")
    pieces = [encode([e]) for e in mutate(events_of(path), data)]
    cut = data.draw(st.integers(1, max(1, len(pieces) - 1)), label="cut")
    reply = resumed(pieces, cut, fmt)
    if reply is not None:
        assert content(reply) == content(read(pieces, fmt))


def test_auto_resumed_from_a_token_is_not_decided_again_by_a_ping() -> None:
    """A Responses stream resumed with ``format="auto"``: the first event after the token
    is a ``ping`` (which the Responses format counts as a heartbeat). Before, the resumed
    ``auto`` decided again on it and read the rest as Anthropic Messages: text lost."""
    from test_formats_resume_tokens import content, read, token

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
