"""A :class:`~.script.Script` as an OpenAI Responses API stream (or one response object).

Named events (``event: response.output_text.delta``), each JSON payload carrying its ``type``
and a ``sequence_number`` from 0, no ``[DONE]``: ``response.created``, ``response.in_progress``,
then one output item after the other — a ``reasoning`` item (summary text deltas) when the
script reasons, the ``message`` item (``output_text`` deltas) or one ``function_call`` item per
call (``function_call_arguments`` deltas, then ``.done``) — and ``response.completed`` (or
``response.incomplete`` with ``max_output_tokens`` when ``max_output_tokens`` cut the answer),
whose ``response`` holds the whole output and the usage.

Profiles that apply: ``error-midstream`` (after half the text an ``error`` event, then the body
ends; ``error-midstream-done`` adds ``response.failed``), ``reasoning``, ``sse-ids`` (each event
also gets ``id: <sequence_number>``, so ``Last-Event-ID`` can resume it), and the framing
profiles of :func:`~.render.frame` (``crlf``, ``nospace``, ``multiline``). Pure: the server
adds timing and faults; a ``background`` response's events are kept in the server's
:class:`~.answers.Memory` so that ``GET /v1/responses/{id}?stream=true&starting_after=N``
replays exactly the events after ``N``.

The dialect's routes (see :mod:`.dialect_table`) are :func:`answer_responses` and
:func:`answer_stored_response`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from .answers import Answer, Call, EventStream, Payload, Refusal
from .dialects import from_responses
from .render import WireEvent
from .script import ERROR_PAYLOAD, ChoiceScript, Script, build_script, dumps, error_cut

__all__ = [
    "StoredResponse",
    "answer_responses",
    "answer_stored_response",
    "response_id",
    "response_object",
    "responses_events",
    "responses_script",
]


def response_id(script: Script) -> str:
    """``resp_...``: the same digest as the chat id of the same request."""
    return "resp_" + script.id.removeprefix("chatcmpl-")


def _cut(names: frozenset[str]) -> bool:
    return bool(names & {"error-midstream", "error-midstream-done"})


def _usage(script: Script) -> dict[str, Any]:
    u = script.usage
    return {
        "input_tokens": u["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": u["completion_tokens"],
        "output_tokens_details": {
            "reasoning_tokens": u["completion_tokens_details"]["reasoning_tokens"]
        },
        "total_tokens": u["total_tokens"],
    }


def _ids(script: Script) -> tuple[str, str]:
    digest = script.id.removeprefix("chatcmpl-")[:16]
    return f"rs_{digest}", f"msg_{digest}"


def _texts(choice: ChoiceScript, cut: bool) -> tuple[str, ...]:
    return choice.text_deltas[: error_cut(choice)] if cut else choice.text_deltas


def _output(script: Script, cut: bool) -> list[dict[str, Any]]:
    """The finished output items (what ``response.completed`` and the JSON answer hold)."""
    choice = script.choices[0]
    rs_id, msg_id = _ids(script)
    out: list[dict[str, Any]] = []
    if script.reasoning and choice.reasoning_deltas:
        summary = [{"type": "summary_text", "text": choice.reasoning}]
        out.append({"id": rs_id, "type": "reasoning", "summary": summary})
    if choice.tool_calls and not cut:
        if choice.text_deltas:  # a scripted reply's words before its calls
            out.append(_message_item(msg_id, choice.text, done=True))
        for call in choice.tool_calls:
            out.append(_call_item(script, call.index, call.id, call.name, call.arguments, True))
    elif not choice.tool_calls:
        text = "".join(_texts(choice, cut))
        out.append(_message_item(msg_id, text, done=True))
    return out


def _whole_message(add: Callable[[dict[str, Any]], None], msg_id: str, index: int,
                   texts: tuple[str, ...]) -> int:
    """The events of a whole message item at ``index``; the next output index."""
    where = {"item_id": msg_id, "output_index": index, "content_index": 0}
    text = "".join(texts)
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    add({"type": "response.output_item.added", "output_index": index,
         "item": _message_item(msg_id, "", done=False)})
    add({"type": "response.content_part.added", **where, "part": {**part, "text": ""}})
    for delta in texts:
        add({"type": "response.output_text.delta", **where, "delta": delta, "logprobs": []})
    add({"type": "response.output_text.done", **where, "text": text, "logprobs": []})
    add({"type": "response.content_part.done", **where, "part": part})
    add({"type": "response.output_item.done", "output_index": index,
         "item": _message_item(msg_id, text, done=True)})
    return index + 1


def _message_item(msg_id: str, text: str, *, done: bool) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {
        "id": msg_id,
        "type": "message",
        "status": "completed" if done else "in_progress",
        "role": "assistant",
        "content": content if done else [],
    }


def _call_item(
    script: Script, index: int, call_id: str, name: str, arguments: str, done: bool
) -> dict[str, Any]:
    digest = script.id.removeprefix("chatcmpl-")[:12]
    return {
        "id": f"fc_{digest}_{index}",
        "type": "function_call",
        "status": "completed" if done else "in_progress",
        "arguments": arguments if done else "",
        "call_id": call_id,
        "name": name,
    }


def response_object(
    script: Script,
    names: frozenset[str],
    *,
    status: str | None = None,
    background: bool = False,
    streamed: bool = False,
) -> dict[str, Any]:
    """The ``response`` object: finished (the JSON answer, ``response.completed``) or, with
    ``status="in_progress"``, the empty one of ``response.created``."""
    choice = script.choices[0]
    cut = streamed and _cut(names)
    length = choice.finish_reason == "length"
    final = status is None
    if final:
        status = "failed" if cut else ("incomplete" if length else "completed")
    body: dict[str, Any] = {
        "id": response_id(script),
        "object": "response",
        "created_at": script.created,
        "status": status,
        "background": background,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if final and length else None,
        "instructions": None,
        "max_output_tokens": None,
        "model": script.model,
        "output": _output(script, cut) if final else [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": _usage(script) if final else None,
        "user": None,
        "metadata": {},
    }
    if final and cut:
        error = ERROR_PAYLOAD["error"]
        body["error"] = {"code": error["code"], "message": error["message"]}
        body["usage"] = None
    return body


def responses_events(
    script: Script, names: frozenset[str], *, background: bool = False
) -> list[WireEvent]:
    """Every event of the streamed response, in order (see the module docstring)."""
    choice = script.choices[0]
    cut = _cut(names)
    rs_id, msg_id = _ids(script)
    payloads: list[dict[str, Any]] = []
    add = payloads.append
    empty = response_object(script, names, status="in_progress", background=background)
    add({"type": "response.created", "response": empty})
    add({"type": "response.in_progress", "response": empty})
    index = 0
    if script.reasoning and choice.reasoning_deltas:
        where = {"item_id": rs_id, "output_index": index, "summary_index": 0}
        add({"type": "response.output_item.added", "output_index": index,
             "item": {"id": rs_id, "type": "reasoning", "summary": []}})
        add({"type": "response.reasoning_summary_part.added", **where,
             "part": {"type": "summary_text", "text": ""}})
        for delta in choice.reasoning_deltas:
            add({"type": "response.reasoning_summary_text.delta", **where, "delta": delta})
        add({"type": "response.reasoning_summary_text.done", **where, "text": choice.reasoning})
        add({"type": "response.reasoning_summary_part.done", **where,
             "part": {"type": "summary_text", "text": choice.reasoning}})
        summary = [{"type": "summary_text", "text": choice.reasoning}]
        add({"type": "response.output_item.done", "output_index": index,
             "item": {"id": rs_id, "type": "reasoning", "summary": summary}})
        index += 1
    if not choice.tool_calls or cut:
        where = {"item_id": msg_id, "output_index": index, "content_index": 0}
        texts = _texts(choice, cut)
        add({"type": "response.output_item.added", "output_index": index,
             "item": _message_item(msg_id, "", done=False)})
        add({"type": "response.content_part.added", **where,
             "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}})
        for delta in texts:
            add({"type": "response.output_text.delta", **where, "delta": delta, "logprobs": []})
        if cut:
            error = ERROR_PAYLOAD["error"]
            add({"type": "error", "code": error["code"], "message": error["message"],
                 "param": None})
            if "error-midstream-done" in names:
                add({"type": "response.failed",
                     "response": response_object(script, names, streamed=True)})
            return _events(payloads, names)
        text = "".join(texts)
        add({"type": "response.output_text.done", **where, "text": text, "logprobs": []})
        add({"type": "response.content_part.done", **where,
             "part": {"type": "output_text", "text": text, "annotations": [], "logprobs": []}})
        add({"type": "response.output_item.done", "output_index": index,
             "item": _message_item(msg_id, text, done=True)})
    else:
        if choice.text_deltas:  # a scripted reply's words before its calls
            index = _whole_message(add, msg_id, index, choice.text_deltas)
        fragments: dict[int, list[str]] = {}
        for call_index, fragment in choice.tool_fragments:
            fragments.setdefault(call_index, []).append(fragment)
        for call in choice.tool_calls:
            item = _call_item(script, index, call.id, call.name, call.arguments, False)
            add({"type": "response.output_item.added", "output_index": index, "item": item})
            where = {"item_id": item["id"], "output_index": index}
            for fragment in fragments.get(call.index, []):
                add({"type": "response.function_call_arguments.delta", **where,
                     "delta": fragment})
            add({"type": "response.function_call_arguments.done", **where,
                 "arguments": call.arguments})
            add({"type": "response.output_item.done", "output_index": index,
                 "item": _call_item(script, index, call.id, call.name, call.arguments, True)})
            index += 1
    final = response_object(script, names, background=background)
    add({"type": f"response.{final['status']}", "response": final})
    return _events(payloads, names)


def _events(payloads: list[dict[str, Any]], names: frozenset[str]) -> list[WireEvent]:
    ids = "sse-ids" in names
    out = []
    for number, payload in enumerate(payloads):
        payload["sequence_number"] = number
        out.append(WireEvent(number if ids else None, dumps(payload), payload["type"]))
    return out



@dataclass(frozen=True)
class StoredResponse:
    """A background response, kept for ``GET /v1/responses/{id}``."""

    events: list[WireEvent]
    final: dict[str, Any]
    names: frozenset[str]


def responses_script(body: Mapping[str, Any], names: frozenset[str]) -> Script:
    """The script of a Responses request: that of the chat request it amounts to."""
    return build_script(from_responses(body), names)


def answer_responses(call: Call) -> Answer:
    """``POST /v1/responses``: the chat script of the translated request, rendered as
    Responses events; a ``background`` response is kept for ``GET`` resumes."""
    body = call.body
    if not isinstance(body, dict) or not isinstance(body.get("input"), (str, list)):
        message = "The request body must be a JSON object with an 'input' string or array."
        return Refusal(400, message)
    names = call.names
    script = build_script(from_responses(body), names, scripted=call.scripted)
    background = body.get("background") is True
    events = responses_events(script, names, background=background)
    final = response_object(script, names, background=background)
    if background:
        call.memory.put(response_id(script), StoredResponse(events, final, names))
    if not call.streamed():
        return Payload.json(final)
    return EventStream(script, events, names)


def answer_stored_response(call: Call) -> Answer:
    """``GET /v1/responses/{id}`` of a background response: the object, or with
    ``stream=true`` its events after ``starting_after`` (OpenAI's resume)."""
    rid = call.match.group(1) if call.match is not None else ""
    stored = call.memory.get(rid)
    if not isinstance(stored, StoredResponse):
        return Refusal(404, f"No response found with id '{rid}'.", code="not_found")
    params = parse_qs(call.query)
    if params.get("stream", ["false"])[-1].lower() != "true":
        return Payload.json(stored.final)
    after_text = params.get("starting_after", ["-1"])[-1]
    try:
        after = int(after_text)
    except ValueError:
        return Refusal(400, f"Invalid 'starting_after': {after_text!r} is not an integer.")
    rest = [e for e in stored.events if json.loads(e.data)["sequence_number"] > after]
    skeleton = build_script({"messages": []})  # only for an oversize fault's padding event
    return EventStream(skeleton, rest, stored.names)
