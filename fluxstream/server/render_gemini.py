"""Gemini's ``streamGenerateContent``: the request read as the chat request it amounts to, and a
:class:`~.script.Script` rendered as Gemini events (or one ``GenerateContentResponse``).

Paths (:func:`gemini_route`): ``/{v1beta|v1}/models/{model}:streamGenerateContent`` (with
``?alt=sse``) and ``:generateContent``, and Vertex's
``/v1/projects/{p}/locations/{l}/publishers/google/models/{model}:...``; the model is in the
path, not the body.

The request (:func:`from_gemini`): ``contents`` (``user`` and ``model`` turns of ``text``
parts; a trailing ``model`` turn is the partial reply a continuation sends back, which the
reply continues), ``systemInstruction``, ``generationConfig`` (``maxOutputTokens``,
``candidateCount``, ``thinkingConfig`` -> reasoning, ``responseMimeType`` JSON with
``responseJsonSchema`` / ``responseSchema`` -> structured output), ``tools[].
functionDeclarations`` (``parameters`` or ``parametersJsonSchema``) and ``toolConfig.
functionCallingConfig`` (``ANY`` with one allowed name forces it, ``ANY`` -> required,
``NONE``).

The stream (:func:`gemini_events`): one ``data:`` event per delta, each a whole
``GenerateContentResponse`` with every candidate that has something to say (``index`` left out
for 0, as proto3 JSON does), ``thought: true`` parts for reasoning, each function call whole in
one part (``args`` an object, ``id`` as Gemini 3 sends it), the last event of a candidate with
its ``finishReason`` (``STOP``, ``MAX_TOKENS``; ``STOP`` after function calls too), a growing
``usageMetadata`` on every event, ``modelVersion`` and ``responseId``; no ``[DONE]``: the body
just ends. ``error-midstream`` (and ``error-midstream-done``: Gemini has no end marker to send
after it): after half the text an ``{"error": ...}`` event, and the body ends. Framing profiles
apply through :func:`~.render.frame`. Without ``?alt=sse`` the same responses come as one JSON
array, as Gemini sends them; ``:generateContent`` (and the ``json`` profile) answers one
response.

Keys (:func:`google_key`): ``x-goog-api-key`` or ``?key=`` (the Developer API's), or a bearer
token (Vertex's); errors in Google's shape (:data:`GEMINI_ERRORS`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

from .answers import Answer, Call, EventStream, Payload, Refusal, continuation_headers
from .error_shapes import ErrorShape
from .profiles import parse_profiles, split_model
from .render import WireEvent
from .script import ChoiceScript, Script, build_script, continuation_prefix, dumps, error_cut

__all__ = [
    "GEMINI_ERROR",
    "GEMINI_ERRORS",
    "GEMINI_ROUTE",
    "STATUS_NAMES",
    "answer_gemini",
    "from_gemini",
    "gemini_error_json",
    "gemini_events",
    "gemini_response",
    "gemini_route",
    "gemini_script",
    "google_key",
    "response_id",
]

#: Gemini's paths (group 1: the model, group 2: the method).
GEMINI_ROUTE = re.compile(
    r"/(?:v1beta|v1|v1alpha)/(?:projects/[^/]+/locations/[^/]+/publishers/google/)?"
    r"models/([^/:]+):(streamGenerateContent|generateContent)"
)
#: Chat finish reasons as Gemini's.
FINISH_REASONS = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS"}
#: HTTP statuses as the ``status`` names of Google's error bodies.
STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                404: "NOT_FOUND", 409: "ABORTED", 413: "INVALID_ARGUMENT",
                429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL",
                501: "NOT_IMPLEMENTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
#: The mid-stream error of the ``error-midstream`` profiles (Gemini's busy signal).
GEMINI_ERROR: dict[str, Any] = {
    "error": {"code": 503, "message": "The model is overloaded. Please try again later.",
              "status": "UNAVAILABLE"}
}


def gemini_route(path: str) -> tuple[str, bool] | None:
    """``(model, streamed)`` for a Gemini path, ``None`` for any other path."""
    found = GEMINI_ROUTE.fullmatch(path)
    if found is None:
        return None
    return found.group(1), found.group(2) == "streamGenerateContent"


def gemini_error_json(status: int, message: str) -> bytes:
    """An error body in Google's shape: ``{"error": {"code", "message", "status"}}``."""
    name = STATUS_NAMES.get(status)
    if name is None:
        try:
            name = HTTPStatus(status).name
        except ValueError:
            name = "UNKNOWN"
    return dumps({"error": {"code": status, "message": message, "status": name}}).encode()


class _GoogleErrors:
    """Google's error shape (:data:`GEMINI_ERRORS`)."""

    def body(self, status: int, message: str, code: str | None = None) -> bytes:
        return gemini_error_json(status, message)

    def fault_body(self, status: int, phrase: str) -> bytes:
        return gemini_error_json(status, f"fluxstream fault: status {status}"
                                 + (f" {phrase}" if phrase else ""))


#: How Gemini words its errors (a :class:`~.error_shapes.ErrorShape`).
GEMINI_ERRORS: ErrorShape = _GoogleErrors()


def google_key(call: Call, key: str) -> Refusal | None:
    """Google's rule: ``x-goog-api-key: KEY`` or ``?key=KEY`` (the Developer API), or
    ``Authorization: Bearer KEY`` (Vertex's access token). No key is a 403, a wrong one a 400,
    as Google answers them."""
    given = call.header("x-goog-api-key") or parse_qs(call.query).get("key", [None])[-1]
    if given == key or call.header("authorization") == f"Bearer {key}":
        return None
    if given is None and call.header("authorization") is None:
        return Refusal(403, "Method doesn't allow unregistered callers (callers without "
                            "established identity). Please use API Key or other form of API "
                            "consumer identity to call this API.")
    return Refusal(400, "API key not valid. Please pass a valid API key.")


# --------------------------------------------------------------------------- the request


def _parts_text(content: object) -> str:
    parts = content.get("parts") if isinstance(content, Mapping) else None
    if not isinstance(parts, list):
        return ""
    return "".join(p["text"] for p in parts
                   if isinstance(p, Mapping) and isinstance(p.get("text"), str)
                   and p.get("thought") is not True)


def _tools(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for tool in body.get("tools") or ():
        declarations = tool.get("functionDeclarations") if isinstance(tool, Mapping) else None
        for declaration in declarations if isinstance(declarations, list) else ():
            if isinstance(declaration, Mapping) and isinstance(declaration.get("name"), str):
                schema = declaration.get("parametersJsonSchema", declaration.get("parameters"))
                tools.append({"type": "function", "function": {
                    "name": declaration["name"], "parameters": schema}})
    return tools


def from_gemini(body: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The chat request a Gemini ``body`` for ``model`` amounts to (see the module docstring)."""
    messages: list[dict[str, Any]] = []
    system = body.get("systemInstruction")
    if system is not None:
        messages.append({"role": "system", "content": _parts_text(system)})
    for content in body.get("contents") or ():
        if isinstance(content, Mapping):
            role = "assistant" if content.get("role") == "model" else "user"
            messages.append({"role": role, "content": _parts_text(content)})
    if len(messages) > 1 and messages[-1]["role"] == "assistant":
        messages[-1]["prefix"] = True  # the partial reply a continuation sends back
    out: dict[str, Any] = {"model": model, "messages": messages}
    config = body.get("generationConfig")
    config = config if isinstance(config, Mapping) else {}
    limit = config.get("maxOutputTokens")
    if isinstance(limit, int) and not isinstance(limit, bool):
        out["max_tokens"] = limit
    count = config.get("candidateCount")
    if isinstance(count, int) and not isinstance(count, bool):
        out["n"] = count
    thinking = config.get("thinkingConfig")
    if isinstance(thinking, Mapping) and (
        thinking.get("includeThoughts") is True or thinking.get("thinkingLevel")
    ):
        out["reasoning_effort"] = "medium"
    schema = config.get("responseJsonSchema", config.get("responseSchema"))
    if config.get("responseMimeType") == "application/json":
        out["response_format"] = (
            {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
            if isinstance(schema, Mapping) else {"type": "json_object"}
        )
    tools = _tools(body)
    if tools:
        out["tools"] = tools
    tool_config = body.get("toolConfig")
    calling = tool_config.get("functionCallingConfig") if isinstance(
        tool_config, Mapping) else None
    if isinstance(calling, Mapping):
        mode, allowed = calling.get("mode"), calling.get("allowedFunctionNames")
        if mode == "NONE":
            out["tool_choice"] = "none"
        elif mode == "ANY" and isinstance(allowed, list) and len(allowed) == 1:
            out["tool_choice"] = {"type": "function", "function": {"name": allowed[0]}}
        elif mode == "ANY":
            out["tool_choice"] = "required"
    return out


# --------------------------------------------------------------------------- the reply


def response_id(script: Script) -> str:
    """The same digest as the chat id of the same request."""
    return script.id.removeprefix("chatcmpl-")


def _usage(script: Script, final: bool) -> dict[str, Any]:
    u = script.usage
    prompt = u["prompt_tokens"]
    if not final:
        return {"promptTokenCount": prompt, "totalTokenCount": prompt}
    thoughts = u["completion_tokens_details"]["reasoning_tokens"]
    out: dict[str, Any] = {"promptTokenCount": prompt,
                           "candidatesTokenCount": u["completion_tokens"] - thoughts,
                           "totalTokenCount": u["total_tokens"]}
    if thoughts:
        out["thoughtsTokenCount"] = thoughts
    return out


def _call_part(call: Any) -> dict[str, Any]:
    return {"functionCall": {"name": call.name, "args": call.args, "id": call.id}}


def _candidate(choice: ChoiceScript, parts: list[dict[str, Any]],
               finish: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
    if finish is not None:
        out["finishReason"] = finish
    if choice.index:
        out["index"] = choice.index
    return out


def _steps(script: Script, choice: ChoiceScript, cut: bool) -> list[dict[str, Any]]:
    """The candidate objects of one choice in streaming order, its finish on the last."""
    parts: list[list[dict[str, Any]]] = []
    if script.reasoning:
        parts += [[{"text": r, "thought": True}] for r in choice.reasoning_deltas]
    texts = choice.text_deltas[: error_cut(choice)] if cut else choice.text_deltas
    parts += [[{"text": t}] for t in texts]
    if choice.tool_calls and not cut:
        parts.append([_call_part(call) for call in choice.tool_calls])
    if not parts:
        parts.append([{"text": ""}])
    finish = None if cut else FINISH_REASONS.get(choice.finish_reason, "STOP")
    return [_candidate(choice, p, finish if i == len(parts) - 1 else None)
            for i, p in enumerate(parts)]


def gemini_events(script: Script, names: frozenset[str]) -> list[WireEvent]:
    """Every event of the stream, in order (see the module docstring). ``sse-ids``: each also
    gets an ``id:`` line (as a gateway may add), so ``Last-Event-ID`` can resume it."""
    cut = bool(names & {"error-midstream", "error-midstream-done"})
    per_choice = [_steps(script, choice, cut) for choice in script.choices]
    rounds = max(len(steps) for steps in per_choice)
    payloads: list[str] = []
    for position in range(rounds):
        candidates = [steps[position] for steps in per_choice if position < len(steps)]
        final = position == rounds - 1 and not cut
        payloads.append(dumps({"candidates": candidates, "usageMetadata": _usage(script, final),
                               "modelVersion": script.model,
                               "responseId": response_id(script)}))
    if cut:
        payloads.append(dumps(GEMINI_ERROR))
    ids = "sse-ids" in names
    return [WireEvent(number if ids else None, data)
            for number, data in enumerate(payloads, start=1)]


def gemini_response(script: Script, names: frozenset[str]) -> dict[str, Any]:
    """The non-streaming ``GenerateContentResponse`` with the same content as the stream."""
    candidates = []
    for choice in script.choices:
        parts: list[dict[str, Any]] = []
        if script.reasoning and choice.reasoning_deltas:
            parts.append({"text": choice.reasoning, "thought": True})
        if choice.tool_calls:
            parts += [_call_part(call) for call in choice.tool_calls]
        else:
            parts.append({"text": choice.text})
        candidates.append(_candidate(choice, parts,
                                     FINISH_REASONS.get(choice.finish_reason, "STOP")))
    return {"candidates": candidates, "usageMetadata": _usage(script, True),
            "modelVersion": script.model, "responseId": response_id(script)}


# --------------------------------------------------------------------------- the route


def gemini_script(body: Mapping[str, Any], names: frozenset[str],
                  model: str | None = None) -> Script:
    """The script of a Gemini request: that of the chat request it amounts to. The model is
    in the path (``model``); a body's ``model`` (as tests write one) stands in for it."""
    given = body.get("model")
    name = model if model is not None else given if isinstance(given, str) else "gemini"
    return build_script(from_gemini(body, name), names)


def answer_gemini(call: Call) -> Answer:
    """``POST .../models/{model}:streamGenerateContent`` (or ``:generateContent``): the chat
    script of the translated request, as Gemini events (see the module docstring)."""
    body = call.body
    if not isinstance(body, dict) or not isinstance(body.get("contents"), list):
        return Refusal(400, "Invalid JSON payload: 'contents' must be a list.")
    assert call.match is not None  # the route's match: model and method
    model, streamed = call.match.group(1), call.match.group(2) == "streamGenerateContent"
    base, suffix = split_model(model)
    names = call.names | parse_profiles(suffix)
    canonical = from_gemini(body, base)
    script = build_script(canonical, names, scripted=call.scripted)
    extra = continuation_headers(continuation_prefix(canonical), script)
    if not streamed or "json" in names:
        return Payload.json(gemini_response(script, names), extra)
    events = gemini_events(script, names)
    if parse_qs(call.query).get("alt", [""])[-1] != "sse":
        return Payload.json([json.loads(e.data) for e in events], extra)
    return EventStream(script, events, names, extra)
