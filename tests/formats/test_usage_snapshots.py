"""Which usage is final, and which counts are believed, in every format (sans-IO).

A usage a format sends before the reply's end is a snapshot (``UsageUpdate.final`` false,
``reply.usage_partial``): Anthropic's ``message_start`` (its ``output_tokens: 1`` is a
placeholder), Gemini's running ``usageMetadata`` until every candidate finished, a Chat
Completions chunk's running totals while a choice is still going. Responses takes usage only
from its terminal event (``response.created`` may carry a usage: never taken). A whole body's
usage is final. A token count that is negative or absurd (2**53 or more) is dropped and
counted like a field of the wrong type, so no sum of counts (a bill) can be cancelled out.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from sse_frames import frame
from test_usage_formats import anthropic_usage, responses_usage, round_trips, sse

import fluxstream
from fluxstream import replay
from fluxstream._events import UsageUpdate
from fluxstream._parser import StreamParser
from fluxstream._usage import ModelPrice, UsageLedger
from fluxstream.formats._usage_fields import MAX_TOKEN_COUNT


def usages(parser: StreamParser, reads: list[bytes], *, close: bool = True) -> list[UsageUpdate]:
    events = [e for data in reads for e in parser.feed(data)]
    if close:
        events += parser.close()
    return [e for e in events if isinstance(e, UsageUpdate)]


def chat_chunk(content: str | None, finish: str | None, usage: Any = None, *,
               choices: bool = True) -> bytes:
    body: dict[str, Any] = {"id": "c", "model": "m", "choices": []}
    if choices:
        delta = {} if content is None else {"content": content}
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage is not None:
        body["usage"] = usage
    return frame(body)


def gemini_event(text: str, usage: dict[str, Any], finish: str | None = None) -> bytes:
    candidate: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"},
                                 "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return frame({"candidates": [candidate], "usageMetadata": usage})


ANTHROPIC_START = {"type": "message_start", "message": {
    "id": "msg_1", "model": "claude", "usage": {"input_tokens": 25, "output_tokens": 1}}}
ANTHROPIC_TEXT = [
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
      for t in ("Hel", "lo ", "the", "re")),
]


# ---------------------------------------------------------------------------- snapshots

def test_anthropic_message_start_is_a_snapshot_and_message_delta_final() -> None:
    parser = StreamParser(format="anthropic_messages")
    cut = usages(parser, sse(ANTHROPIC_START, *ANTHROPIC_TEXT))
    assert [u.final for u in cut] == [False]
    reply = parser.reply
    assert reply.usage is not None and reply.usage.completion_tokens == 1
    assert reply.usage_partial and reply.outcome is fluxstream.Outcome.TRUNCATED
    whole = StreamParser(format="anthropic_messages")
    done = usages(whole, sse(ANTHROPIC_START, *ANTHROPIC_TEXT, {
        "type": "message_delta", "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": 4}}, {"type": "message_stop"}))
    assert [u.final for u in done] == [False, True] and not whole.reply.usage_partial
    # a delta revising only the input leaves the output a placeholder: still a snapshot
    revised = StreamParser(format="anthropic_messages")
    more = usages(revised, sse(ANTHROPIC_START, *ANTHROPIC_TEXT, {
        "type": "message_delta", "delta": {"stop_reason": None},
        "usage": {"input_tokens": 30}}), close=False)
    assert [u.final for u in more] == [False, False]


def test_a_whole_anthropic_body_is_final() -> None:
    parser = StreamParser(format="anthropic_messages")
    events = parser.feed_completion({
        "type": "message", "id": "msg_1", "model": "claude", "stop_reason": "end_turn",
        "content": [{"type": "text", "text": "hi"}],
        "usage": {"input_tokens": 3, "output_tokens": 2}})
    assert [e.final for e in events if isinstance(e, UsageUpdate)] == [True]
    assert not parser.reply.usage_partial


def test_gemini_running_usage_is_a_snapshot_until_every_candidate_finished() -> None:
    running = [gemini_event("Hel", {"promptTokenCount": 7, "totalTokenCount": 7}),
               gemini_event("lo", {"promptTokenCount": 7, "candidatesTokenCount": 2,
                                   "totalTokenCount": 9})]
    cut = StreamParser(format="gemini")
    got = usages(cut, running, close=False) + [
        e for e in cut.close(cause=ConnectionError("cut")) if isinstance(e, UsageUpdate)]
    assert [u.final for u in got] == [False, False]  # the first at once, the last at the end
    assert cut.reply.usage_partial and cut.reply.usage is not None
    assert cut.reply.usage.completion_tokens == 2  # the count so far, not the reply's
    whole = StreamParser(format="gemini")
    done = usages(whole, [*running, gemini_event(" there", {
        "promptTokenCount": 7, "candidatesTokenCount": 4, "totalTokenCount": 11}, "STOP")])
    assert [u.final for u in done] == [False, True] and not whole.reply.usage_partial


def test_chat_running_totals_are_snapshots_and_the_last_usage_final() -> None:
    """vLLM's ``continuous_usage_stats``, Perplexity: usage on every chunk."""
    running = [chat_chunk("Hel", None, {"prompt_tokens": 5, "completion_tokens": 1}),
               chat_chunk("lo", None, {"prompt_tokens": 5, "completion_tokens": 2})]
    cut = StreamParser()
    assert [u.final for u in usages(cut, running)] == [False, False]
    assert cut.reply.usage_partial
    done = StreamParser()
    finished = usages(done, [*running, chat_chunk(None, "stop"),
                             chat_chunk(None, None, {"prompt_tokens": 5,
                                                     "completion_tokens": 2}, choices=False),
                             b"data: [DONE]\n\n"])
    assert [u.final for u in finished] == [False, False, True]
    assert not done.reply.usage_partial
    # llama.cpp: the usage on the finishing chunk itself
    inline = StreamParser()
    assert [u.final for u in usages(inline, [chat_chunk("hi", "stop", {"prompt_tokens": 1})])] \
        == [True]


def test_responses_takes_no_usage_before_its_terminal_event() -> None:
    created = {"type": "response.created", "sequence_number": 0, "response": {
        "id": "r", "model": "m", "status": "in_progress",
        "usage": {"input_tokens": 9, "output_tokens": 1}}}
    delta = {"type": "response.output_text.delta", "sequence_number": 1, "output_index": 0,
             "content_index": 0, "delta": "hi"}
    parser = StreamParser(format="responses")
    assert usages(parser, sse(created, delta)) == []
    assert parser.reply.usage is None  # so a cut stream is estimated, never billed 1
    assert [u.final for u in usages(StreamParser(format="responses"), sse(
        created, delta, {"type": "response.completed", "sequence_number": 2, "response": {
            "id": "r", "status": "completed", "usage": {"input_tokens": 9,
                                                        "output_tokens": 3}}}))] == [True]


def test_a_snapshot_survives_a_resume_token_as_a_snapshot() -> None:
    parser = StreamParser(content_key="k", format="anthropic_messages")
    usages(parser, sse(ANTHROPIC_START, *ANTHROPIC_TEXT), close=False)
    token = json.loads(json.dumps({"key": "k", "reply": parser.reply.model_dump(mode="json"),
                                   "offsets": parser.offsets(), "wire": parser.wire_state()}))
    again = StreamParser.from_token(token, format="anthropic_messages")
    assert again.reply.usage_partial and again.reply.usage == parser.reply.usage


def test_the_ledger_estimates_the_output_of_a_reply_that_ended_on_a_snapshot() -> None:
    parser = StreamParser(content_key="k", format="anthropic_messages")
    usages(parser, sse(ANTHROPIC_START, *ANTHROPIC_TEXT))
    price = ModelPrice(input="1", output="10")
    estimate, cost = UsageLedger({"claude": price}).settle(parser.reply, 4, None)
    assert estimate is not None and estimate.estimated
    assert (estimate.input_tokens, estimate.output_tokens) == (25, 4)  # never 1
    assert cost == price.cost(25, 4)


# ---------------------------------------------------------------------------- hostile counts

NEGATIVE = {"prompt_tokens": -1_000_000, "completion_tokens": -500_000}
ABSURD = {"prompt_tokens": 10**30, "completion_tokens": MAX_TOKEN_COUNT}
HOSTILE = [NEGATIVE, ABSURD, {"prompt_tokens_details": {"cached_tokens": -5}},
           {"total_tokens": -1}]


def chat_reply(usage: dict[str, Any]) -> fluxstream.Reply:
    return replay([chat_chunk("hi", "stop"), chat_chunk(None, None, usage, choices=False),
                   b"data: [DONE]\n\n"])


@pytest.mark.parametrize("bad", HOSTILE, ids=[str(b) for b in HOSTILE])
def test_chat_counts_that_are_no_token_count_are_dropped_and_counted(bad: dict[str, Any]) -> None:
    reply = chat_reply({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7, **bad})
    assert reply.outcome is fluxstream.Outcome.DONE and reply.text == "hi"
    usage = reply.usage
    assert usage is not None and not set(bad) & usage.model_fields_set
    assert reply.skipped_frames == 1
    for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = getattr(usage, name)
        assert value is None or 0 <= value < MAX_TOKEN_COUNT
    round_trips(reply)


def test_a_hostile_upstreams_usage_never_makes_a_negative_cost() -> None:
    reply = chat_reply(NEGATIVE)
    _, cost = UsageLedger({"m": ModelPrice(input="2.5", output="10")}).settle(reply, 1, "m")
    assert cost is not None and cost >= 0
    assert cost == ModelPrice(input="2.5", output="10").cost(0, 0)


@pytest.mark.parametrize("fmt", ["responses", "anthropic_messages", "gemini"])
@pytest.mark.parametrize("value", [-1_000_000, 10**30, MAX_TOKEN_COUNT])
def test_each_formats_own_counts_are_believed_only_in_range(fmt: str, value: int) -> None:
    if fmt == "responses":
        reply = responses_usage({"input_tokens": value, "output_tokens": 4})
        own = "input_tokens"
    elif fmt == "anthropic_messages":
        reply = anthropic_usage({"input_tokens": value, "output_tokens": 1},
                                {"output_tokens": 4})
        own = "input_tokens"
    else:
        reply = replay([gemini_event("hi", {"promptTokenCount": value,
                                            "candidatesTokenCount": 4}, "STOP")],
                       format="gemini")
        own = "promptTokenCount"
    assert reply.text == "hi" and reply.skipped_frames >= 1
    usage = reply.usage
    assert usage is not None and usage.completion_tokens == 4
    assert usage.prompt_tokens is None and own not in usage.model_fields_set
    assert getattr(usage, own, None) is None  # not kept raw either: no reader sums it
    round_trips(reply)


def test_model_prices_are_finite_and_never_negative() -> None:
    for bad in ("-0.5", -1, "NaN", "Infinity", "abc"):
        with pytest.raises(ValueError, match="ModelPrice"):
            ModelPrice(input=bad, output="1")
        with pytest.raises(ValueError, match="ModelPrice"):
            ModelPrice(input="1", output="1", cached_input=bad)
    assert ModelPrice(input=0, output="0.6").cost(-10, -10) == Decimal(0)
