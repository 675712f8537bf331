"""Stream limits reach every format, not only the one that declared a slot for them.

Chat Completions refuses a tool call past ``max_tool_calls`` (and a choice past
``max_choices``) before it keeps anything of it: the read raises
:class:`~fluxstream.errors.LimitExceededError` at once. Responses and Anthropic Messages never
got the parser's limits: a frame holding many calls (a proxy that emulates a stream with the
final response alone, or a ``message_start`` holding every block) made the format keep every
call and build an event for each, and the assembler refused them only afterwards, deferring
the error to the next read. Now each format bounds its own tool-call state with the same
typed error, at the same point, as Chat Completions does.
"""

from __future__ import annotations

from typing import Any

import pytest
from sse_frames import frames

from fluxstream._limits import StreamLimits
from fluxstream._parser import StreamParser
from fluxstream.errors import LimitExceededError

LIMITS = StreamLimits(max_tool_calls=2)
CALLS = 50


def _chat() -> bytes:
    calls = [{"index": i, "id": f"c{i}", "function": {"name": "f", "arguments": "{}"}}
             for i in range(CALLS)]
    return frames({"id": "x", "model": "m",
                    "choices": [{"index": 0, "delta": {"tool_calls": calls}}]})


def _responses() -> bytes:
    output = [{"type": "function_call", "id": f"fc{i}", "call_id": f"c{i}", "name": "f",
               "arguments": "{}"} for i in range(CALLS)]
    return frames({"type": "response.completed", "sequence_number": 0,
                    "response": {"id": "r", "status": "completed", "output": output}})


def _anthropic() -> bytes:
    content = [{"type": "tool_use", "id": f"t{i}", "name": "f", "input": {}}
               for i in range(CALLS)]
    return frames({"type": "message_start",
                    "message": {"id": "m", "model": "m", "content": content}})


STREAMS = {"chat_completions": _chat, "responses": _responses,
           "anthropic_messages": _anthropic}


def _calls_kept(parser: StreamParser) -> int:
    fmt: Any = parser._format
    if getattr(fmt, "inner", None) is not None:
        fmt = fmt.inner
    if hasattr(fmt, "_choices"):
        return sum(len(choice.calls) for choice in fmt._choices.values())
    return len(fmt.calls)


@pytest.mark.parametrize("fmt", ["chat_completions", "responses", "anthropic_messages"])
@pytest.mark.parametrize("named", [True, False], ids=["named", "auto"])
def test_a_frame_past_max_tool_calls_raises_at_once_in_every_format(fmt: str,
                                                                   named: bool) -> None:
    parser = StreamParser(format=fmt if named else "auto", limits=LIMITS)
    with pytest.raises(LimitExceededError) as raised:
        parser.feed(STREAMS[fmt]())
    assert raised.value.name == "max_tool_calls"
    assert _calls_kept(parser) <= LIMITS.max_tool_calls


@pytest.mark.parametrize("fmt", ["responses", "anthropic_messages"])
def test_the_reply_ends_failed_and_keeps_nothing_past_the_limit(fmt: str) -> None:
    parser = StreamParser(format=fmt, limits=LIMITS)
    with pytest.raises(LimitExceededError):
        parser.feed(STREAMS[fmt]())
    parser.fail("limit")
    reply = parser.reply
    assert reply.outcome.value == "failed"
    assert all(len(choice.tool_calls) <= LIMITS.max_tool_calls for choice in reply.choices)
