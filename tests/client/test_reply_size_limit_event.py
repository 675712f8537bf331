"""``max_reply_chars``: the delta that would cross the limit is not kept in the reply.

The assembler applied every event of a batch and compared the total once at the end, so the
delta that crossed the limit (and every later one of the same batch) was already in
``reply`` when ``LimitExceededError`` was raised: the reply held text that was never delivered
as an event, and how much depended on how the bytes were cut into reads. The limit is a
bound on what is kept, so what is kept now stops before the delta that crosses it, as the
``max_tool_calls``/``max_choices`` checks already do (they raise before creating the call or
choice)."""

from __future__ import annotations

import pytest
from sse_frames import chat_text

from fluxstream._assembly import ReplyAssembler
from fluxstream._events import Event, ReasoningDelta, TextDelta, ToolCallDelta
from fluxstream._limits import StreamLimits
from fluxstream.errors import LimitExceededError


def _kept(asm: ReplyAssembler) -> tuple[str, str | None, list[str]]:
    choice = asm.choices()[0]
    return choice.text, choice.reasoning, [call.arguments for call in choice.tool_calls]


EVENTS: list[Event] = [
    TextDelta("k", 0, 0, "aaaa"),
    ReasoningDelta("k", 0, 0, "rr"),
    ToolCallDelta("k", 0, 0, "c1", "f", '{"x":', 0),
    TextDelta("k", 0, 4, "bbbb"),
    ToolCallDelta("k", 0, 0, None, None, "1}", 5),
    TextDelta("k", 0, 8, "cccc"),
]


def _size(ev: Event) -> int:
    if isinstance(ev, (TextDelta, ReasoningDelta)):
        return len(ev.text)
    assert isinstance(ev, ToolCallDelta)
    return len(ev.arguments)


@pytest.mark.parametrize("limit", [3, 4, 5, 6, 10, 11, 12, 13, 14, 17, 18, 19])
@pytest.mark.parametrize("batch", [1, 2, 3, 6])
def test_the_crossing_delta_is_not_kept_however_events_are_batched(
    limit: int, batch: int
) -> None:
    """Kept: the events before the first one that crosses the limit, in any batching."""
    asm = ReplyAssembler("k", limits=StreamLimits(max_reply_chars=limit))
    raised = None
    for start in range(0, len(EVENTS), batch):
        try:
            asm.feed(EVENTS[start : start + batch])
        except LimitExceededError as exc:
            raised = exc
            break
    kept: list[Event] = []
    for ev in EVENTS:
        if sum(map(_size, kept)) + _size(ev) > limit:
            break
        kept.append(ev)
    assert (raised is not None) == (sum(map(_size, EVENTS)) > limit)
    text, reasoning, args = _kept(asm)
    assert text == "".join(e.text for e in kept if isinstance(e, TextDelta))
    assert (reasoning or "") == "".join(e.text for e in kept if isinstance(e, ReasoningDelta))
    assert "".join(args) == "".join(e.arguments for e in kept if isinstance(e, ToolCallDelta))
    if raised is not None:
        assert raised.name == "max_reply_chars"
        assert raised.size > limit


def test_one_delta_per_feed_keeps_what_was_delivered() -> None:
    asm = ReplyAssembler("k", limits=StreamLimits(max_reply_chars=10))
    asm.feed([TextDelta("k", 0, 0, "a" * 6)])
    with pytest.raises(LimitExceededError) as info:
        asm.feed([TextDelta("k", 0, 6, "b" * 6)])
    assert info.value.size == 12
    assert _kept(asm)[0] == "a" * 6


def test_text_before_another_limit_in_the_same_batch_is_counted() -> None:
    """``max_tool_calls`` raised mid-batch: the text applied before it still counts toward
    ``max_reply_chars`` (the batch's count was dropped with the exception)."""
    asm = ReplyAssembler("k", limits=StreamLimits(max_reply_chars=10, max_tool_calls=1))
    with pytest.raises(LimitExceededError, match="max_tool_calls"):
        asm.feed(
            [
                TextDelta("k", 0, 0, "aaaa"),
                ToolCallDelta("k", 0, 0, "c0", "f", "", 0),
                ToolCallDelta("k", 0, 1, "c1", "g", "", 0),
            ]
        )
    assert _kept(asm)[0] == "aaaa"
    with pytest.raises(LimitExceededError, match="max_reply_chars"):
        asm.feed([TextDelta("k", 0, 4, "b" * 7)])
    assert _kept(asm)[0] == "aaaa"


def test_text_kept_before_a_limit_in_the_same_read_is_delivered() -> None:
    from fluxstream._parser import StreamParser

    parser = StreamParser(limits=StreamLimits(max_reply_chars=10))
    delivered: list[Event] = []
    try:
        delivered += parser.feed(chat_text("a" * 6, id="a") + chat_text("b" * 6, id="a"))
        delivered += parser.feed(chat_text("c", id="a"))
    except LimitExceededError:
        pass
    delivered += parser.close()
    text = "".join(e.text for e in delivered if isinstance(e, TextDelta))
    assert text == parser.reply.choices[0].text == "a" * 6


def test_a_limit_found_by_the_last_read_is_raised_by_close_and_the_reply_failed() -> None:
    """The read that delivered the events before the limit was the last one: ``close``
    raises the limit (as the next ``feed`` would) and the reply ends ``failed``."""
    from fluxstream._parser import StreamParser

    parser = StreamParser(limits=StreamLimits(max_reply_chars=10))
    delivered = parser.feed(
        chat_text("a" * 6, id="a") + chat_text("b" * 6, id="a") + chat_text("c", id="a")
    )
    with pytest.raises(LimitExceededError):
        parser.close()
    assert "".join(e.text for e in delivered if isinstance(e, TextDelta)) == "a" * 6
    reply = parser.reply
    assert reply.outcome == "failed" and reply.choices[0].text == "a" * 6
    assert "max_reply_chars" in (reply.end_reason or "")
    assert parser.close() == []  # ended: nothing more
