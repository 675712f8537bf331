"""Responses text parts whatever order and indices their events come in: a part's text is
shown once and never lost.

* A part's ``.done`` is used when no delta of that part arrived; a delta of the same part
  arriving *after* that ``.done`` (a hostile or buggy order) was shown again (``ABAB``): it
  is dropped and counted, also after a resume from a token taken between the two.
* Without ``output_index`` (llama.cpp) the parts of two message items are told apart by
  ``item_id``, as function calls are: the second item's text, sent only in its ``.done``,
  was taken for the first item's and lost.
"""

from __future__ import annotations

from typing import Any

from resume_tokens import token
from sse_frames import frames

from fluxstream._events import SkippedFrame
from fluxstream._parser import StreamParser

CREATED = {"type": "response.created", "response": {"id": "r", "status": "in_progress"}}
COMPLETED = {"type": "response.completed", "response": {"id": "r", "status": "completed"}}


def wire(*events: dict[str, Any]) -> bytes:
    return frames(*events, named=True)


def read(*events: dict[str, Any]) -> StreamParser:
    parser = StreamParser(format="responses")
    parser.feed(wire(CREATED, *events, COMPLETED))
    parser.close()
    return parser


PART = {"output_index": 0, "content_index": 0}


def test_a_delta_after_its_parts_done_is_not_shown_again() -> None:
    parser = read({"type": "response.output_text.done", **PART, "text": "AB"},
                  {"type": "response.output_text.delta", **PART, "delta": "A"},
                  {"type": "response.output_text.delta", **PART, "delta": "B"})
    assert parser.reply.text == "AB"
    assert parser.reply.skipped_frames == 2


def test_a_late_summary_delta_is_not_shown_again() -> None:
    where = {"output_index": 0, "summary_index": 0}
    parser = read({"type": "response.reasoning_summary_text.done", **where, "text": "why"},
                  {"type": "response.reasoning_summary_text.delta", **where, "delta": "why"})
    assert parser.reply.choices[0].reasoning == "why"


def test_a_token_between_a_done_and_a_late_delta_keeps_it_out() -> None:
    first = StreamParser(format="responses")
    first.feed(wire(CREATED, {"type": "response.output_text.done", **PART, "text": "AB"}))
    resumed = StreamParser.from_token(token(first), format="responses")
    events = resumed.feed(wire({"type": "response.output_text.delta", **PART, "delta": "AB"},
                               COMPLETED))
    resumed.close()
    assert resumed.reply.text == "AB"
    assert [type(e) for e in events if isinstance(e, SkippedFrame)] == [SkippedFrame]


def test_another_part_after_a_done_is_still_shown() -> None:
    other = {"output_index": 0, "content_index": 1}
    parser = read({"type": "response.output_text.done", **PART, "text": "AB"},
                  {"type": "response.output_text.delta", **other, "delta": "CD"})
    assert parser.reply.text == "ABCD" and parser.reply.skipped_frames == 0


def test_two_message_items_without_output_index_are_two_parts() -> None:
    first = {"item_id": "msg_1", "content_index": 0}
    second = {"item_id": "msg_2", "content_index": 0}
    parser = read(
        {"type": "response.output_item.added", "item": {"id": "msg_1", "type": "message"}},
        {"type": "response.output_text.delta", **first, "delta": "AB"},
        {"type": "response.output_text.done", **first, "text": "AB"},
        {"type": "response.output_item.added", "item": {"id": "msg_2", "type": "message"}},
        {"type": "response.output_text.done", **second, "text": "CD"},
    )
    assert parser.reply.text == "ABCD"
