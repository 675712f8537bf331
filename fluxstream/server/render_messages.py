"""A :class:`~.script.Script` as an Anthropic Messages stream (or one message object).

``message_start`` (the message with empty content and the input usage), one ``ping`` (as
Anthropic sends), then content blocks one after the other — a ``thinking`` block
(``thinking_delta`` deltas and a ``signature_delta``) when the script reasons, a ``text`` block
(``text_delta``) or one ``tool_use`` block per call (``input_json_delta`` with
``partial_json``) — each opened by ``content_block_start`` and closed by
``content_block_stop``; then ``message_delta`` (``stop_reason``: ``end_turn``, ``tool_use`` or
``max_tokens``, and the output usage) and ``message_stop``.

Profiles that apply: ``error-midstream`` (after half the text an ``event: error`` with
``overloaded_error``, then the body ends), ``reasoning``, ``heartbeats`` (``ping`` events
between the others: :func:`ping`), ``sse-ids``, ``prefix-echo`` (through the script) and the
framing profiles of :func:`~.render.frame`. A continuation (a trailing assistant message, the
prefill) streams only what follows the prefill, in a new message with the original's id and
usage (see :mod:`.script`); a prefill that ends in whitespace is refused with 400, as
Anthropic does (:func:`answer_messages`, the dialect's route in :mod:`.dialect_table`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .answers import Answer, Call, EventStream, Payload, Refusal, continuation_headers
from .dialects import from_messages
from .render import WireEvent, frame
from .script import ChoiceScript, Script, build_script, continuation_prefix, dumps, error_cut

__all__ = [
    "OVERLOADED",
    "STOP_REASONS",
    "answer_messages",
    "message_id",
    "message_object",
    "messages_events",
    "messages_script",
    "ping",
    "tool_use_id",
]

#: Chat finish reasons as Anthropic stop reasons.
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
#: The mid-stream error of the ``error-midstream`` profiles (Anthropic's busy signal).
OVERLOADED: dict[str, Any] = {
    "type": "error",
    "error": {"type": "overloaded_error", "message": "Overloaded"},
}


def message_id(script: Script) -> str:
    return "msg_" + script.id.removeprefix("chatcmpl-")


def tool_use_id(call_id: str) -> str:
    """``toolu_...`` for the script's ``call_...`` id."""
    return "toolu_" + call_id.removeprefix("call_")


def _signature(script: Script) -> str:
    return "sig_" + script.id.removeprefix("chatcmpl-")[:32]


def _cut(names: frozenset[str]) -> bool:
    return bool(names & {"error-midstream", "error-midstream-done"})


def _texts(choice: ChoiceScript, cut: bool) -> tuple[str, ...]:
    return choice.text_deltas[: error_cut(choice)] if cut else choice.text_deltas


def _usage(script: Script) -> dict[str, int]:
    return {
        "input_tokens": script.usage["prompt_tokens"],
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": script.usage["completion_tokens"],
    }


def _blocks(script: Script) -> list[dict[str, Any]]:
    choice = script.choices[0]
    blocks: list[dict[str, Any]] = []
    if script.reasoning and choice.reasoning_deltas:
        blocks.append(
            {"type": "thinking", "thinking": choice.reasoning, "signature": _signature(script)}
        )
    if choice.tool_calls:
        if choice.text_deltas:  # a scripted reply's words before its calls
            blocks.append({"type": "text", "text": choice.text})
        for call in choice.tool_calls:
            blocks.append({"type": "tool_use", "id": tool_use_id(call.id), "name": call.name,
                           "input": _input(call.arguments, call.args)})
    else:
        blocks.append({"type": "text", "text": choice.text})
    return blocks


def _input(arguments: str, args: dict[str, Any]) -> Any:
    """The tool input as a value: the whole object, or ``{}`` when ``max_tokens`` cut the
    arguments (what was streamed is not JSON then)."""
    return args if dumps(args) == arguments else {}


def message_object(script: Script, names: frozenset[str]) -> dict[str, Any]:
    """The non-streaming ``message`` with the same content as the stream."""
    return {
        "id": message_id(script),
        "type": "message",
        "role": "assistant",
        "model": script.model,
        "content": _blocks(script),
        "stop_reason": STOP_REASONS.get(script.choices[0].finish_reason, "end_turn"),
        "stop_sequence": None,
        "usage": _usage(script),
    }


def ping(names: frozenset[str]) -> bytes:
    """A ``ping`` event: Anthropic's in-band heartbeat."""
    return frame(WireEvent(None, dumps({"type": "ping"}), "ping"), names)


def messages_events(script: Script, names: frozenset[str]) -> list[WireEvent]:
    """Every event of the streamed message, in order (see the module docstring)."""
    choice = script.choices[0]
    cut = _cut(names)
    payloads: list[dict[str, Any]] = []
    add = payloads.append
    start_usage = {**_usage(script), "output_tokens": 1}
    add({"type": "message_start", "message": {
        "id": message_id(script), "type": "message", "role": "assistant", "model": script.model,
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage}})
    add({"type": "ping"})
    index = 0
    if script.reasoning and choice.reasoning_deltas:
        add({"type": "content_block_start", "index": index,
             "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
        for delta in choice.reasoning_deltas:
            add({"type": "content_block_delta", "index": index,
                 "delta": {"type": "thinking_delta", "thinking": delta}})
        add({"type": "content_block_delta", "index": index,
             "delta": {"type": "signature_delta", "signature": _signature(script)}})
        add({"type": "content_block_stop", "index": index})
        index += 1
    if choice.tool_calls and choice.text_deltas and not cut:  # a scripted reply's words
        add({"type": "content_block_start", "index": index,
             "content_block": {"type": "text", "text": ""}})
        for delta in choice.text_deltas:
            add({"type": "content_block_delta", "index": index,
                 "delta": {"type": "text_delta", "text": delta}})
        add({"type": "content_block_stop", "index": index})
        index += 1
    if not choice.tool_calls or cut:
        add({"type": "content_block_start", "index": index,
             "content_block": {"type": "text", "text": ""}})
        for delta in _texts(choice, cut):
            add({"type": "content_block_delta", "index": index,
                 "delta": {"type": "text_delta", "text": delta}})
        if cut:
            add(OVERLOADED)
            return _events(payloads, names)
        add({"type": "content_block_stop", "index": index})
    else:
        fragments: dict[int, list[str]] = {}
        for call_index, fragment in choice.tool_fragments:
            fragments.setdefault(call_index, []).append(fragment)
        for call in choice.tool_calls:
            add({"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": tool_use_id(call.id), "name": call.name,
                "input": {}}})
            for fragment in fragments.get(call.index, []):
                add({"type": "content_block_delta", "index": index,
                     "delta": {"type": "input_json_delta", "partial_json": fragment}})
            add({"type": "content_block_stop", "index": index})
            index += 1
    stop = STOP_REASONS.get(choice.finish_reason, "end_turn")
    add({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
         "usage": {"output_tokens": script.usage["completion_tokens"]}})
    add({"type": "message_stop"})
    return _events(payloads, names)


def _events(payloads: list[dict[str, Any]], names: frozenset[str]) -> list[WireEvent]:
    ids = "sse-ids" in names
    return [
        WireEvent(number if ids else None, dumps(payload), str(payload["type"]))
        for number, payload in enumerate(payloads, start=1)
    ]


def messages_script(body: Mapping[str, Any], names: frozenset[str]) -> Script:
    """The script of a Messages request: that of the chat request it amounts to (a trailing
    assistant message is the prefill the reply continues)."""
    return build_script(from_messages(body), names)


def answer_messages(call: Call) -> Answer:
    """``POST /v1/messages``: the chat script of the translated request, as Anthropic events
    (or one ``message``)."""
    body = call.body
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("messages"), list)
        or not isinstance(body.get("max_tokens"), int)
    ):
        message = "The request body must be a JSON object with 'messages' and 'max_tokens'."
        return Refusal(400, message)
    names = call.names
    canonical = from_messages(body)
    prefill = continuation_prefix(canonical)
    if prefill is not None and prefill != prefill.rstrip():
        # Anthropic's own rule (and a trap for clients that resume by prefill).
        return Refusal(400, "messages: final assistant content cannot end with trailing whitespace")
    script = build_script(canonical, names, scripted=call.scripted)
    extra = continuation_headers(prefill, script)
    if not call.streamed():
        return Payload.json(message_object(script, names), extra)
    return EventStream(script, messages_events(script, names), names, extra, keepalive=ping(names))
