"""The UI message stream encoder on its own (sans-IO): each event's chunks, and what it must
never do -- show text twice, send a delta for a part it did not start, let an upstream's error
text reach the page unasked, write after the end. What the AI SDK makes of the chunks is
``test_ai_sdk_node.py``'s."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest

import fluxstream
from fluxstream import (
    End,
    ErrorEvent,
    Finish,
    Outcome,
    ReasoningDelta,
    RefusalDelta,
    Reset,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    Usage,
    UsageUpdate,
)
from fluxstream.relay import Position, RelayEvent
from fluxstream.web.ai_sdk import (
    DONE,
    FINISH_REASONS,
    UIMessageStream,
    UIMessageStreamEncoder,
    chat_messages,
    masked_error,
)

K = "key"


def chunks(data: bytes) -> list[Any]:
    """The chunks of UI message stream bytes (``{"type": "[DONE]"}`` for the sentinel)."""
    found: list[Any] = []
    for event in fluxstream.SSEDecoder().feed(data):
        assert (event.event, event.id) == ("message", "")  # data only, as the AI SDK writes
        found.append({"type": "[DONE]"} if event.data == "[DONE]" else json.loads(event.data))
    return found


def run(*events: Any, encoder: UIMessageStreamEncoder | None = None) -> list[Any]:
    encoder = encoder or UIMessageStream().encoder()
    return chunks(b"".join(encoder.encode(event) for event in events) + encoder.close())


def text(offset: int, value: str, choice: int = 0) -> TextDelta:
    return TextDelta(K, choice, offset, value)


def test_a_reply_opens_streams_its_parts_in_order_and_finishes() -> None:
    usage = Usage(prompt_tokens=3, completion_tokens=5, total_tokens=8)
    assert run(
        ReasoningDelta(K, 0, 0, "think"), text(0, "Hé"), text(2, "llo 👋🏽"),
        Finish(K, 0, "length"), UsageUpdate(usage), End(Outcome.DONE, None),
    ) == [
        {"type": "start"}, {"type": "start-step"},
        {"type": "reasoning-start", "id": "reasoning-1"},
        {"type": "reasoning-delta", "id": "reasoning-1", "delta": "think"},
        {"type": "reasoning-end", "id": "reasoning-1"},
        {"type": "text-start", "id": "text-2"},
        {"type": "text-delta", "id": "text-2", "delta": "Hé"},
        {"type": "text-delta", "id": "text-2", "delta": "llo 👋🏽"},
        {"type": "text-end", "id": "text-2"},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "length", "messageMetadata": {
            "outcome": "done", "usage": {"prompt_tokens": 3, "completion_tokens": 5,
                                         "total_tokens": 8}}},
        {"type": "[DONE]"},
    ]


def test_the_message_id_and_metadata_are_the_callers_choice() -> None:
    encoder = UIMessageStream(message_id="m-1", metadata=False).encoder()
    assert run(End(Outcome.DONE, None), encoder=encoder) == [
        {"type": "start", "messageId": "m-1"}, {"type": "start-step"}, {"type": "finish-step"},
        {"type": "finish", "finishReason": "stop"}, {"type": "[DONE]"}]


def test_text_already_shown_is_never_sent_again() -> None:
    """A replay that overlaps (a relay read again from an earlier position) repeats deltas:
    only what is new reaches the page."""
    deltas = [c["delta"] for c in run(
        text(0, "Hello"), text(3, "lo world"), text(0, "Hello"), text(5, " world"),
        text(11, "!"),
    ) if c["type"] == "text-delta"]
    assert deltas == ["Hello", " world", "!"]


def test_only_the_chosen_choice_is_the_message() -> None:
    events = [text(0, "zero"), text(0, "one", choice=1), Finish(K, 1, "stop"),
              Finish(K, 0, "length"), End(Outcome.DONE, None)]
    shown = run(*events)
    assert [c["delta"] for c in shown if c["type"] == "text-delta"] == ["zero"]
    assert shown[-2]["finishReason"] == "length"
    second = run(*events, encoder=UIMessageStream(choice=1).encoder())
    assert [c["delta"] for c in second if c["type"] == "text-delta"] == ["one"]
    assert second[-2]["finishReason"] == "stop"


def test_a_refusal_is_a_text_part_of_its_own_after_the_text() -> None:
    shown = run(text(0, "I"), RefusalDelta(K, 0, 0, "can't"), End(Outcome.DONE, None))
    assert [c["type"] for c in shown[2:7]] == [
        "text-start", "text-delta", "text-end", "text-start", "text-delta"]
    assert shown[2]["id"] != shown[5]["id"] and shown[6]["delta"] == "can't"


def test_tool_arguments_stream_after_a_start_that_names_the_tool() -> None:
    """Arguments that come before the name are held: the protocol's start needs it."""
    call = ToolCall(index=0, id="c1", name="get", arguments='{"a": [1, "é"]}')
    shown = run(
        text(0, "Let me look."),
        ToolCallDelta(K, 0, 0, "c1", None, '{"a"', 0),
        ToolCallDelta(K, 0, 0, None, "get", ': [1, ', 4),
        ToolCallDelta(K, 0, 0, None, None, ': [1, "é"]}', 4),  # repeats ': [1, '
        ToolCallDone(K, 0, call), ToolCallDone(K, 0, call),  # a second done: nothing
        Finish(K, 0, "tool_calls"), End(Outcome.DONE, None),
    )
    assert shown[4:9] == [
        {"type": "text-end", "id": "text-1"},
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "get"},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"a": [1, '},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '"é"]}'},
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "get",
         "input": {"a": [1, "é"]}},
    ]
    assert shown[9] == {"type": "finish-step"} and shown[10]["finishReason"] == "tool-calls"


def test_replaced_arguments_come_whole_with_the_input() -> None:
    """A provider's final arguments that disagree with the streamed ones replace them; the
    protocol cannot take streamed text back, so nothing more is streamed and the input is the
    final value."""
    shown = run(
        ToolCallDelta(K, 0, 2, "c", "f", '{"x": 1', 0),
        ToolCallDelta(K, 0, 2, None, None, '{"x": 2}', 0, replace=True),
        ToolCallDelta(K, 0, 2, None, None, "ignored", 8),
        ToolCallDone(K, 0, ToolCall(index=2, id="c", name="f", arguments='{"x": 2}')),
    )
    assert [c["type"] for c in shown[2:]] == [
        "tool-input-start", "tool-input-delta", "tool-input-available", "[DONE]"]
    assert shown[4]["input"] == {"x": 2}


def test_arguments_that_are_not_json_are_a_tool_input_error_and_none_is_empty() -> None:
    shown = run(
        ToolCallDone(K, 0, ToolCall(index=0, id=None, name="f", arguments='{"x": NaN')),
        ToolCallDone(K, 0, ToolCall(index=1, id="b", name=None, arguments="")),
    )
    assert shown[2] == {"type": "tool-input-error", "toolCallId": "call-0", "toolName": "f",
                        "input": '{"x": NaN', "errorText": "the tool call's arguments are not JSON"}
    assert shown[3] == {"type": "tool-input-available", "toolCallId": "b",
                        "toolName": "unknown", "input": {}}


def test_errors_are_masked_unless_the_caller_shows_them() -> None:
    error = ErrorEvent("quota of org-secret exceeded", "429", None, None, {"raw": 1})
    masked = run(text(0, "a"), error, End(Outcome.FAILED, "error event"))
    assert masked[4:] == [
        {"type": "text-end", "id": "text-1"},
        {"type": "error", "errorText": "An error occurred."},  # once: the end adds none
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "error", "messageMetadata": {"outcome": "failed"}},
        {"type": "[DONE]"},
    ]
    assert masked_error(error) == "An error occurred."
    shown = run(error, encoder=UIMessageStream(error_text=lambda e: e.message).encoder())  # type: ignore[union-attr]
    assert shown[2] == {"type": "error", "errorText": "quota of org-secret exceeded"}


def test_a_failure_without_an_error_event_still_tells_the_page() -> None:
    told = UIMessageStream(error_text=lambda e: str(getattr(e, "reason", "")))
    shown = run(End(Outcome.FAILED, "connection reset"), encoder=told.encoder())
    assert [c["type"] for c in shown[2:]] == [
        "error", "finish-step", "finish", "[DONE]"]
    assert shown[2]["errorText"] == "connection reset"


def test_a_cut_reply_is_interrupted_and_a_cancelled_one_aborted() -> None:
    cut = run(text(0, "par"), End(Outcome.TRUNCATED, "connection closed"))
    assert cut[-2]["finishReason"] == "interrupted" and cut[3]["delta"] == "par"
    cancelled = run(text(0, "par"), End(Outcome.CANCELLED, "stopped"))
    assert cancelled[-3:] == [{"type": "text-end", "id": "text-1"},
                              {"type": "abort", "reason": "stopped"}, {"type": "[DONE]"}]
    assert run(End(Outcome.CANCELLED, None))[-2:] == [{"type": "abort"}, {"type": "[DONE]"}]


def test_nothing_is_written_after_the_end() -> None:
    encoder = UIMessageStream().encoder()
    encoder.encode(End(Outcome.DONE, None))
    assert encoder.encode(text(0, "late")) == b""
    assert encoder.encode(End(Outcome.FAILED, "late")) == b""
    assert encoder.close() == DONE and encoder.close() == b""
    assert encoder.open() == b""  # opened by the first event


def test_a_reset_drops_the_step_and_the_new_generation_starts_at_zero() -> None:
    shown = run(text(0, "first try"), Reset(K, 2, "restart"), text(0, "second"),
                End(Outcome.DONE, None))
    assert [c["type"] for c in shown[2:9]] == [
        "text-start", "text-delta", "text-end", "reset-step", "start-step", "text-start",
        "text-delta"]
    assert shown[8]["delta"] == "second"  # offset 0 again: shown, not taken for a repeat


def test_followed_events_encode_as_their_events_and_heartbeats_are_comments() -> None:
    encoder = UIMessageStream().encoder()
    assert encoder.heartbeat() == b": ping\n\n"
    assert chunks(encoder.heartbeat()) == []  # a comment: the AI SDK's parser skips it
    item = RelayEvent(Position(1, 0), text(0, "hi"))
    assert [c["type"] for c in chunks(encoder.event(item))] == [
        "start", "start-step", "text-start", "text-delta"]
    assert UIMessageStream.media_type == "text/event-stream"
    assert ("x-vercel-ai-ui-message-stream", "v1") in UIMessageStream.headers


def test_every_stop_reason_has_an_ai_sdk_finish_reason() -> None:
    assert set(FINISH_REASONS) == set(typing.get_args(fluxstream.StopReason))
    allowed = {"stop", "length", "content-filter", "tool-calls", "error", "interrupted", "other"}
    assert set(FINISH_REASONS.values()) <= allowed


def test_chat_messages_are_the_text_of_a_use_chat_request() -> None:
    body = {"id": "chat", "trigger": "submit-message", "messages": [
        {"id": "1", "role": "system", "parts": [{"type": "text", "text": "Be brief."}]},
        {"id": "2", "role": "user", "parts": [
            {"type": "text", "text": "Hi "}, {"type": "file", "url": "data:,x"},
            {"type": "text", "text": "there"}]},
        {"id": "3", "role": "assistant", "parts": [{"type": "reasoning", "text": "hm"}]},
    ]}
    assert chat_messages(body) == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": ""}]


@pytest.mark.parametrize("body", [
    None, [], {"messages": "hi"}, {"messages": [None]}, {"messages": [{"role": "tool"}]},
    {"messages": [{"role": "user", "parts": "hi"}]},
    {"messages": [{"role": "user", "parts": [{"type": "text", "text": 5}]}]},
    {"messages": [{"role": ["user"], "parts": []}]},
])
def test_chat_messages_refuses_what_is_not_a_use_chat_request(body: Any) -> None:
    with pytest.raises(ValueError):
        chat_messages(body)


@pytest.mark.parametrize("choice", [-1, 1.0, True, "0"])
def test_a_choice_that_is_not_an_index_is_refused(choice: Any) -> None:
    with pytest.raises(ValueError, match="choice"):
        UIMessageStream(choice=choice)


def test_error_text_must_be_a_function_and_its_answer_is_sent_as_text() -> None:
    with pytest.raises(TypeError, match="error_text"):
        UIMessageStream(error_text="An error")  # type: ignore[arg-type]
    told = UIMessageStream(error_text=lambda event: 503)  # type: ignore[arg-type,return-value]
    assert run(End(Outcome.FAILED, None), encoder=told.encoder())[2] == {
        "type": "error", "errorText": "503"}
    assert repr(UIMessageStream(message_id="m")) == "UIMessageStream(message_id='m', choice=0)"
