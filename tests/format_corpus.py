"""Shared checks for the recorded streams of every format (``resp-*``, ``anth-*``, ``cc-*``).

The corpus' expectations (``tests/fixtures/chat/*.json``) use the corpus' own field names; this
module maps a :class:`~fluxstream._reply.Reply` onto them, feeds a stream in the read patterns
the issue asks for (whole, one byte at a time, random reads) and checks that the normalized
events themselves are consistent (offsets rebuild every channel, one ``End`` last).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from fluxstream._events import (
    End,
    Event,
    Outcome,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallDone,
)
from fluxstream._parser import StreamParser
from fluxstream._reply import Reply

MODES = ["whole", "bytewise", "random-1", "random-2", "random-3"]


def reads(body: bytes, mode: str) -> list[bytes]:
    """``body`` cut as ``mode`` says (seeded, so a failure reproduces)."""
    if mode == "whole":
        return [body]
    if mode == "bytewise":
        return [body[i : i + 1] for i in range(len(body))]
    rng = random.Random(int(mode.split("-")[1]))
    out, pos = [], 0
    while pos < len(body):
        size = rng.randint(1, 48)
        out.append(body[pos : pos + size])
        pos += size
    return out


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def as_corpus(reply: Reply) -> dict[str, Any]:
    """The reply in the corpus' field names (``ended`` is how the bytes ended)."""
    return {
        "choices": {
            str(c.index): {
                "text": c.text,
                "reasoning": c.reasoning,
                "refusal": c.refusal,
                "tool_calls": [
                    {"index": t.index, "id": t.id, "name": t.name,
                     "arguments": _arguments(t.arguments)}
                    for t in c.tool_calls
                ],
                "finish_reason": c.finish_reason,
            }
            for c in reply.choices
        },
        "usage": reply.usage.model_dump(exclude_unset=True) if reply.usage else None,
        "error": {"message": reply.error.message} if reply.error else None,
        "ended": reply.stream_end.value if reply.stream_end else None,
    }


def check_reply(reply: Reply, exp: dict[str, Any]) -> None:
    got = as_corpus(reply)
    assert got["choices"] == exp["choices"]
    assert got["usage"] == exp["usage"]
    assert got["error"] == exp["error"]
    assert got["ended"] == exp["ended"]
    if exp["error"] is not None:
        assert reply.outcome is Outcome.FAILED
    else:
        assert reply.outcome is not None and reply.outcome.value == exp["ended"]


def run(data: list[bytes], **kwargs: Any) -> tuple[list[Event], StreamParser]:
    parser = StreamParser(content_key="k", **kwargs)
    events: list[Event] = []
    for piece in data:
        events += parser.feed(piece)
    return events + parser.close(), parser


def check_events_rebuild_reply(events: list[Event], reply: Reply) -> None:
    """Writing each delta at its offset (twice: idempotent) rebuilds every channel and every
    tool call's arguments; exactly one ``End``, last; every call of a cleanly ended reply is
    announced done once, fully assembled."""
    assert sum(type(e) is End for e in events) == 1 and type(events[-1]) is End
    bufs: dict[tuple[str, int], list[str]] = {}
    args: dict[tuple[int, int], list[str]] = {}
    for ev in events + events:
        if isinstance(ev, (TextDelta, ReasoningDelta, RefusalDelta)):
            buf = bufs.setdefault((ev.type, ev.choice), [])
            assert ev.offset <= len(buf)
            buf[ev.offset : ev.offset + len(ev.text)] = list(ev.text)
        elif isinstance(ev, ToolCallDelta):
            buf = args.setdefault((ev.choice, ev.call), [])
            assert ev.offset <= len(buf)
            if ev.replace:
                buf[ev.offset :] = list(ev.arguments)
            else:
                buf[ev.offset : ev.offset + len(ev.arguments)] = list(ev.arguments)
    for choice in reply.choices:
        assert "".join(bufs.get(("text", choice.index), [])) == choice.text
        assert ("".join(bufs.get(("reasoning", choice.index), [])) or None) == choice.reasoning
        assert ("".join(bufs.get(("refusal", choice.index), [])) or None) == choice.refusal
        for call in choice.tool_calls:
            assert "".join(args[(choice.index, call.index)]) == call.arguments
    done = [e for e in events if isinstance(e, ToolCallDone)]
    calls = {(c.index, t.index): t for c in reply.choices for t in c.tool_calls}
    if reply.outcome in (Outcome.DONE, Outcome.FINISHED):
        assert sorted((e.choice, e.call.index) for e in done) == sorted(calls)
        for e in done:
            assert e.call == calls[(e.choice, e.call.index)]


def expected(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    return data
