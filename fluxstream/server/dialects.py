"""Responses and Messages requests read as the Chat Completions request they amount to.

The server has one notion of "what the model says" (:mod:`.script`, computed from a chat
request); the other APIs only ask the same thing in other words. So a Responses or
Anthropic Messages body is translated here into the canonical chat request (a Gemini body
in :mod:`.render_gemini`, beside its events), the script is built from that, and a format
renderer (:mod:`.render_responses`, :mod:`.render_messages`) frames it. Pure functions: the
same body always gives the same canonical request, hence the same reply, the same ids and
the same usage.

What is translated (anything else is ignored, as a model ignores unknown knobs):

* Responses: ``input`` (a string, or items with ``role`` and ``content``), ``instructions``
  (a system message), ``max_output_tokens``, ``reasoning.effort``, function ``tools`` (flat
  ``{"type": "function", "name", "parameters"}``), ``tool_choice`` (``{"type": "function",
  "name": N}`` forces one), ``parallel_tool_calls``, ``text.format`` (a ``json_schema`` format
  becomes ``response_format``).
* Messages: ``system``, ``messages`` (a trailing ``assistant`` message is the prefill the
  reply continues, Anthropic's own continuation), ``max_tokens``, ``thinking`` (enabled ->
  reasoning), ``tools`` (``input_schema``), ``tool_choice`` (``{"type": "tool", "name": N}``
  forces one, ``any`` -> required, ``none``; ``disable_parallel_tool_use``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["from_messages", "from_responses"]


def _text(content: Any) -> Any:
    """Content parts of either API, as the chat message content the script reads."""
    if isinstance(content, list):
        return [
            {"type": "text", "text": part["text"]}
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        ]
    return content if isinstance(content, str) else ""


def _chat_request(
    body: Mapping[str, Any], messages: list[dict[str, Any]], limit: Any
) -> dict[str, Any]:
    """The chat request's model, messages and ``max_tokens`` (when ``limit`` is an int)."""
    out: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if isinstance(limit, int) and not isinstance(limit, bool):
        out["max_tokens"] = limit
    return out


def _add_tools(
    out: dict[str, Any],
    body: Mapping[str, Any],
    schema_key: str,
    is_function: Callable[[Mapping[str, Any]], bool],
) -> None:
    """The body's function tools (the ones ``is_function`` accepts) as chat ``tools``, their
    parameters' schema read from ``schema_key``."""
    tools = body.get("tools")
    if isinstance(tools, list):
        out["tools"] = [
            {"type": "function", "function": {"name": t.get("name"),
                                              "parameters": t.get(schema_key)}}
            for t in tools
            if isinstance(t, Mapping) and is_function(t)
        ]


def from_responses(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat request a Responses ``body`` amounts to."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        messages.append({"role": "system", "content": instructions})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list):
        for item in given:
            if isinstance(item, Mapping) and isinstance(item.get("role"), str):
                messages.append({"role": item["role"], "content": _text(item.get("content"))})
    out = _chat_request(body, messages, body.get("max_output_tokens"))
    reasoning = body.get("reasoning")
    if isinstance(reasoning, Mapping) and isinstance(reasoning.get("effort"), str):
        out["reasoning_effort"] = reasoning["effort"]
    _add_tools(out, body, "parameters", lambda t: t.get("type") == "function")
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    elif isinstance(choice, str):
        out["tool_choice"] = choice
    if body.get("parallel_tool_calls") is False:
        out["parallel_tool_calls"] = False
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, Mapping) else None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        out["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": fmt.get("name"), "schema": fmt.get("schema"),
                            "strict": fmt.get("strict")},
        }
    elif isinstance(fmt, Mapping) and fmt.get("type") == "json_object":
        out["response_format"] = {"type": "json_object"}
    return out


def from_messages(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat request an Anthropic Messages ``body`` amounts to."""
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, (str, list)):
        messages.append({"role": "system", "content": _text(system)})
    given = body.get("messages")
    for item in given if isinstance(given, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("role"), str):
            messages.append({"role": item["role"], "content": _text(item.get("content"))})
    if len(messages) > 1 and messages[-1]["role"] == "assistant":
        messages[-1]["prefix"] = True  # Anthropic's prefill: the reply continues it
    out = _chat_request(body, messages, body.get("max_tokens"))
    thinking = body.get("thinking")
    if isinstance(thinking, Mapping) and thinking.get("type") in ("enabled", "adaptive"):
        out["reasoning_effort"] = "medium"
    _add_tools(out, body, "input_schema",
               lambda t: isinstance(t.get("name"), str) and t.get("type") in (None, "custom"))
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping):
        kind = choice.get("type")
        if kind == "tool":
            out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        elif kind == "any":
            out["tool_choice"] = "required"
        elif kind == "none":
            out["tool_choice"] = "none"
        if choice.get("disable_parallel_tool_use") is True:
            out["parallel_tool_calls"] = False
    return out
