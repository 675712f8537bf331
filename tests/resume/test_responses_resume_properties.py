"""Properties of reading a Responses stream, over generated streams: text, reasoning
summaries and function calls, with or without ``output_index`` / ``summary_index`` (as
llama.cpp and LiteLLM send them).

* The reply does not depend on where the bytes were cut into reads.
* A ``starting_after=N`` re-read, or a resume from a token taken after event ``N``, whose
  server starts anywhere from 0 to ``N + 1`` gives exactly the reply of an uncut read:
  nothing shown twice, nothing lost.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from resume_tokens import token
from sse_frames import frames

from fluxstream._parser import StreamParser

TEXT = st.text(alphabet="ab€😀 ", min_size=1, max_size=4)


@st.composite
def streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The payloads of one response, numbered from 0."""
    indexed = draw(st.booleans())
    events: list[dict[str, Any]] = [{"type": "response.created",
                                     "response": {"id": "resp_1", "status": "in_progress"}}]
    kinds = draw(st.lists(st.sampled_from(["text", "summary", "call"]), min_size=1,
                          max_size=4))
    for position, kind in enumerate(kinds):
        where = {"output_index": position} if indexed else {}
        parts = draw(st.lists(TEXT, min_size=1, max_size=3))
        if kind == "text":
            item = {"type": "message", "id": f"msg_{position}", "content": []}
            events.append({"type": "response.output_item.added", **where, "item": item})
            events += [{"type": "response.output_text.delta", **where, "content_index": 0,
                        "delta": p} for p in parts]
            events.append({"type": "response.output_text.done", **where, "content_index": 0,
                           "text": "".join(parts)})
        elif kind == "summary":
            item = {"type": "reasoning", "id": f"rs_{position}", "summary": []}
            events.append({"type": "response.output_item.added", **where, "item": item})
            events += [{"type": "response.reasoning_summary_text.delta", **where,
                        "delta": p} for p in parts]
            events.append({"type": "response.reasoning_summary_text.done", **where,
                           "summary_index": 0, "text": "".join(parts)})
        else:
            fc = f"fc_{position}"
            args = json.dumps({"q": "".join(parts)})
            item = {"type": "function_call", "id": fc, "call_id": f"call_{position}",
                    "name": "f", "arguments": ""}
            events.append({"type": "response.output_item.added", **where, "item": item})
            named = draw(st.booleans())
            events += [{"type": "response.function_call_arguments.delta", **where,
                        **({"item_id": fc} if named else {}), "delta": args[i:i + 5]}
                       for i in range(0, len(args), 5)]
            events.append({"type": "response.output_item.done", **where,
                           "item": {**item, "arguments": args}})
    events.append({"type": "response.completed",
                   "response": {"id": "resp_1", "status": "completed",
                                "usage": {"input_tokens": 1, "output_tokens": 2}}})
    return [{**e, "sequence_number": n} for n, e in enumerate(events)]


def wire(events: list[dict[str, Any]]) -> bytes:
    return frames(*events, named=True)


def summary(parser: StreamParser) -> tuple[Any, ...]:
    reply = parser.reply
    choice = reply.choices[0]
    calls = [(c.id, c.name, c.arguments) for c in choice.tool_calls]
    return (reply.text, choice.reasoning, calls, choice.finish_reason, reply.outcome)


def whole(events: list[dict[str, Any]]) -> tuple[Any, ...]:
    parser = StreamParser(format="responses")
    parser.feed(wire(events))
    parser.close()
    return summary(parser)


@settings(max_examples=150, deadline=None)
@given(streams(), st.data())
def test_the_reply_does_not_depend_on_read_boundaries(events: list[dict[str, Any]],
                                                      data: st.DataObject) -> None:
    raw = wire(events)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=12)))
    parser = StreamParser(format="responses")
    for start, end in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        parser.feed(raw[start:end])
    parser.close()
    assert summary(parser) == whole(events)


@settings(max_examples=200, deadline=None)
@given(streams(), st.data())
def test_a_re_read_from_anywhere_up_to_n_plus_1_shows_nothing_twice(
    events: list[dict[str, Any]], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(1, len(events) - 1), label="events delivered")
    start = data.draw(st.integers(0, cut), label="first event the server sends again")
    by_token = data.draw(st.booleans(), label="resumed from a token")
    first = StreamParser(content_key="k", format="responses")
    first.feed(wire(events[:cut]))
    assert first.sequence == cut - 1
    if by_token:
        parser = StreamParser.from_token(token(first), format="responses")
    else:
        parser = first
        parser.new_connection()
    parser.feed(wire(events[start:]))
    parser.close()
    assert summary(parser) == whole(events)
    assert parser.reply.skipped_frames == cut - start
