"""A tool call's corrected arguments (``ToolCallDelta(replace=True)``) that arrive before the
call's name (so before its type is known) replace the held text from their offset, as the
assembler replaces them in the reply; they were appended to it."""

from __future__ import annotations

from pydantic import BaseModel

from fluxstream._assembly import ReplyAssembler
from fluxstream._events import ToolCallDelta
from fluxstream.structured import StructuredTracker


class Args(BaseModel):
    x: int


def test_replace_before_the_name_matches_the_reply() -> None:
    events = [
        ToolCallDelta("k", 0, 0, "c1", None, '{"x": 12', 0),
        ToolCallDelta("k", 0, 0, None, None, "3}", 6, replace=True),
        ToolCallDelta("k", 0, 0, None, "f", "", 8),
    ]
    tracker = StructuredTracker(tools={"f": Args})
    assembler = ReplyAssembler("k")
    for event in events:
        tracker.feed(event)
        assembler.feed([event])
    arguments = assembler.choices()[0].tool_calls[0].arguments
    assert arguments == '{"x": 3}'
    builder = tracker.call(0, 0)
    assert builder is not None
    assert builder.text == arguments
    assert builder.value == Args(x=3)


def test_replace_after_the_name_matches_the_reply() -> None:
    events = [
        ToolCallDelta("k", 0, 0, "c1", "f", '{"x": 12', 0),
        ToolCallDelta("k", 0, 0, None, None, "3}", 6, replace=True),
    ]
    tracker = StructuredTracker(tools={"f": Args})
    for event in events:
        tracker.feed(event)
    builder = tracker.call(0, 0)
    assert builder is not None and builder.text == '{"x": 3}'
