"""Turn a :class:`~.script.Script` into wire payloads and SSE frames under a profile set.

Imports go one way: this module renders what :mod:`.script` decided (content, including where
an ``error-midstream`` profile cuts it and the error it sends); the script never asks how it is
rendered, so :func:`~.script.expected_reply` stays a function of the script alone.

Two steps, both pure: :func:`stream_events` gives the ordered list of SSE events (``seq`` and
``data`` string) that make up the stream, and :func:`frame` turns one of them into bytes with
the profile's framing (space after ``data:``, line endings, multi-line wrapping). The server
adds only timing and faults on top, so resuming with ``Last-Event-ID`` replays exactly the same
events after the given ``seq``.

It is also the Chat Completions dialect's module: :func:`answer_chat` (``POST
/v1/chat/completions``) and :func:`answer_models` (``GET /v1/models``, OpenAI's listing) are
its routes in :mod:`.dialect_table`. The framing helpers live here, next to the format they
were made for, and the other renderers import them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .answers import Answer, Call, EventStream, Payload, Refusal, WireEvent, continuation_headers
from .script import (
    CREATED,
    ERROR_PAYLOAD,
    ChoiceScript,
    Script,
    build_script,
    continuation_prefix,
    dumps,
    error_cut,
)

__all__ = [
    "DONE",
    "MODELS",
    "RETRY_MS",
    "WireEvent",
    "answer_chat",
    "answer_models",
    "chat_script",
    "completion",
    "frame",
    "frame_comment",
    "oversize_data",
    "split_json",
    "stream_events",
]

DONE = "[DONE]"
#: Reconnection delay announced with ``retry:`` on the first event: short, so resume tests are fast.
RETRY_MS = 50
#: Model ids listed by ``GET /v1/models`` (any model name is accepted by chat completions).
MODELS: tuple[str, ...] = ("fluxstream-echo", "fluxstream-reasoner")


def _delta(role: bool, body: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", **body} if role else body


def _choice_chunks(
    choice: ChoiceScript, names: frozenset[str], reasoning: bool, cut: bool
) -> list[dict[str, Any]]:
    """The ``choices[i]`` objects of one choice, in streaming order (one per chunk)."""
    rr = "repeat-role" in names
    tools = bool(choice.tool_calls)
    first: dict[str, Any] = {"role": "assistant", "content": None if tools else ""}
    if not tools:
        first["refusal"] = None
    deltas: list[dict[str, Any]] = [first]
    if reasoning:
        deltas += [_delta(rr, {"reasoning_content": r}) for r in choice.reasoning_deltas]
    texts = choice.text_deltas[: error_cut(choice)] if cut else choice.text_deltas
    deltas += [_delta(rr, {"content": t}) for t in texts]
    if tools and not cut:
        if "object-args" in names or "indexless-tools" in names:
            for call in choice.tool_calls:
                whole: dict[str, Any] = {} if "indexless-tools" in names else {"index": call.index}
                args: Any = call.args if "object-args" in names else call.arguments
                whole.update(
                    id=call.id, type="function", function={"name": call.name, "arguments": args}
                )
                deltas.append(_delta(rr, {"tool_calls": [whole]}))
        else:
            for call in choice.tool_calls:
                head = {
                    "index": call.index,
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }
                deltas.append(_delta(rr, {"tool_calls": [head]}))
            for index, fragment in choice.tool_fragments:
                part = {"index": index, "function": {"arguments": fragment}}
                deltas.append(_delta(rr, {"tool_calls": [part]}))
    out: list[dict[str, Any]] = [
        {"index": choice.index, "delta": d, "logprobs": None, "finish_reason": None} for d in deltas
    ]
    if not cut:
        out.append(
            {
                "index": choice.index,
                "delta": _delta(rr, {}),
                "logprobs": None,
                "finish_reason": choice.finish_reason,
            }
        )
    return out


def _interleaved(per_choice: list[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    for position in range(max((len(p) for p in per_choice), default=0)):
        for items in per_choice:
            if position < len(items):
                yield items[position]


def stream_events(script: Script, names: frozenset[str], include_usage: bool) -> list[WireEvent]:
    """Every SSE event of the streamed answer, numbered from 1."""
    cut = bool(names & {"error-midstream", "error-midstream-done"})
    head: dict[str, Any] = {
        "id": script.id,
        "object": "chat.completion.chunk",
        "created": script.created,
        "model": script.model,
        "system_fingerprint": "fp_fluxstream",
    }
    payloads: list[str] = []
    if "azure" in names:
        payloads.append(
            dumps(
                {
                    "choices": [],
                    "created": 0,
                    "id": "",
                    "model": "",
                    "object": "",
                    "prompt_filter_results": [
                        {
                            "prompt_index": 0,
                            "content_filter_results": {
                                "hate": {"filtered": False, "severity": "safe"},
                                "self_harm": {"filtered": False, "severity": "safe"},
                                "sexual": {"filtered": False, "severity": "safe"},
                                "violence": {"filtered": False, "severity": "safe"},
                            },
                        }
                    ],
                }
            )
        )
    per_choice = [_choice_chunks(c, names, script.reasoning, cut) for c in script.choices]
    for choice_obj in _interleaved(per_choice):
        chunk: dict[str, Any] = {**head, "choices": [choice_obj]}
        if include_usage:
            chunk["usage"] = None
        payloads.append(dumps(chunk))
    if cut:
        payloads.append(dumps(ERROR_PAYLOAD))
    elif include_usage:
        payloads.append(dumps({**head, "choices": [], "usage": script.usage}))
    if "no-done" not in names and (not cut or "error-midstream-done" in names):
        payloads.append(DONE)
    return [WireEvent(seq, data) for seq, data in enumerate(payloads, start=1)]


def completion(script: Script, names: frozenset[str]) -> dict[str, Any]:
    """The non-streaming ``chat.completion`` object with the same content as the stream."""
    choices = []
    for choice in script.choices:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": choice.text if not choice.tool_calls else None,
            "refusal": None,
        }
        if script.reasoning:
            message["reasoning_content"] = choice.reasoning
        if choice.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": call.args if "object-args" in names else call.arguments,
                    },
                }
                for call in choice.tool_calls
            ]
        choices.append(
            {
                "index": choice.index,
                "message": message,
                "logprobs": None,
                "finish_reason": choice.finish_reason,
            }
        )
    return {
        "id": script.id,
        "object": "chat.completion",
        "created": script.created,
        "model": script.model,
        "system_fingerprint": "fp_fluxstream",
        "choices": choices,
        "usage": script.usage,
    }


def split_json(text: str, every: int = 4) -> list[str]:
    """Split compact JSON after every ``every``-th ``,``/``:``/``{``/``[`` outside strings.

    JSON allows a newline between any two tokens, so the pieces joined with ``\\n`` (as an SSE
    decoder joins ``data:`` lines) are still valid JSON with the same value.
    """
    pieces: list[str] = []
    start = 0
    count = 0
    in_string = False
    escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in ",:{[":
            count += 1
            if count % every == 0 and i + 1 < len(text):
                pieces.append(text[start : i + 1])
                start = i + 1
    pieces.append(text[start:])
    return pieces


def frame(
    event: WireEvent, names: frozenset[str], *, retry: int | None = None, wrap: bool = True
) -> bytes:
    """The bytes of one event: ``event:`` and ``id:`` when set, optional ``retry:``, ``data:``
    line(s), blank line."""
    sep = ":" if "nospace" in names else ": "
    eol = "\r\n" if "crlf" in names else "\n"
    lines: list[str] = []
    if event.event is not None:
        lines.append(f"event{sep}{event.event}")
    if event.seq is not None:
        lines.append(f"id{sep}{event.seq}")
    if retry is not None:
        lines.append(f"retry{sep}{retry}")
    multiline = wrap and "multiline" in names and event.data != DONE
    for part in split_json(event.data) if multiline else [event.data]:
        lines.append(f"data{sep}{part}")
    return (eol.join(lines) + eol + eol).encode("utf-8")


def frame_comment(names: frozenset[str], text: str = "ping") -> bytes:
    """A comment (heartbeat) followed by a blank line, as many proxies send them."""
    eol = "\r\n" if "crlf" in names else "\n"
    return f": {text}{eol}{eol}".encode()


def oversize_data(script: Script, size: int) -> str:
    """A valid chunk with empty ``choices`` whose JSON text is exactly ``size`` bytes long.

    Clients ignore it (no choices), so it tests the event-size limit without changing the
    content. If ``size`` is smaller than the skeleton, the skeleton alone is returned.
    """
    prefix = (
        dumps(
            {
                "id": script.id,
                "object": "chat.completion.chunk",
                "created": script.created,
                "model": script.model,
                "choices": [],
            }
        )[:-1]
        + ',"padding":"'
    )
    suffix = '"}'
    skeleton = len(prefix.encode()) + len(suffix)
    return prefix + "x" * max(0, size - skeleton) + suffix


def chat_script(body: Mapping[str, Any], names: frozenset[str]) -> Script:
    """The script of a Chat Completions request: the body is already the canonical request."""
    return build_script(body, names)


def answer_chat(call: Call) -> Answer:
    """``POST /v1/chat/completions``: the script as ``chat.completion.chunk`` events, or one
    ``chat.completion`` (``stream`` not true, or the ``json`` profile)."""
    body = call.body
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return Refusal(400, "The request body must be a JSON object with a 'messages' array.")
    script = build_script(body, call.names, scripted=call.scripted)
    extra = continuation_headers(continuation_prefix(body), script)
    if not call.streamed():
        return Payload.json(completion(script, call.names), extra)
    stream_options = body.get("stream_options")
    include_usage = isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))
    events = stream_events(script, call.names, include_usage)
    return EventStream(script, events, call.names, extra, retry=RETRY_MS)


def answer_models(call: Call) -> Answer:
    """``GET /v1/models``: :data:`MODELS`, in OpenAI's list shape."""
    return Payload.json({
        "object": "list",
        "data": [
            {"id": m, "object": "model", "created": CREATED, "owned_by": "fluxstream"}
            for m in MODELS
        ],
    })
