"""Anthropic's ``message_stop`` is an end marker like ``[DONE]``: when no stop reason ever
arrived (no ``message_delta`` with one), the reply did not say it was complete, so the stream
is ``truncated`` ("message_stop without a finish reason"), with the same opt-out
(``require_finish_reason=False``) that ``[DONE]`` has."""

from __future__ import annotations

from typing import Any

import pytest
from sse_frames import frames

from fluxstream._events import End, Outcome
from fluxstream._parser import StreamParser


def body(*events: dict[str, Any]) -> bytes:
    return frames(*events, named=True)


START = {"type": "message_start", "message": {"id": "msg_1", "model": "claude"}}
TEXT = [
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}},
    {"type": "content_block_stop", "index": 0},
]
STOP = {"type": "message_stop"}


def end_of(data: bytes, **kwargs: Any) -> End:
    parser = StreamParser(format="anthropic_messages", **kwargs)
    events = parser.feed(data) + parser.close()
    assert parser.reply.text == "Hel"
    ends = [e for e in events if isinstance(e, End)]
    assert len(ends) == 1 and events[-1] is ends[0]
    return ends[0]


@pytest.mark.parametrize("delta", [None, {"type": "message_delta", "delta": {}},
                                   {"type": "message_delta", "delta": {"stop_reason": None},
                                    "usage": {"output_tokens": 3}}])
def test_message_stop_without_a_stop_reason_is_truncated(delta: Any) -> None:
    events = [START, *TEXT, *([delta] if delta else []), STOP]
    end = end_of(body(*events))
    assert end.outcome is Outcome.TRUNCATED
    assert end.reason == "message_stop without a finish reason"


def test_message_stop_after_a_stop_reason_is_done() -> None:
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}
    assert end_of(body(START, *TEXT, delta, STOP)).outcome is Outcome.DONE


def test_the_opt_out_of_done_without_a_finish_reason_applies() -> None:
    end = end_of(body(START, *TEXT, STOP), require_finish_reason=False)
    assert end.outcome is Outcome.DONE


@pytest.mark.parametrize("fmt", ["anthropic_messages", "auto"])
def test_an_error_before_message_stop_is_still_failed(fmt: str) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    parser = StreamParser(format=fmt)
    parser.feed(body(START, *TEXT, error, STOP))
    parser.close()
    assert parser.reply.outcome is Outcome.FAILED
