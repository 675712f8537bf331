"""A request of one API asked of another: what failover to an upstream of another API sends.

Only what means the same in every API is carried: the conversation as text turns, the system
prompt, the length cap, function tools, and the sampling settings every API shares (each
API's :attr:`~fluxstream.apis.Api.sampling_names`: temperature, top-p, stop sequences where the
target has them — the Responses API has none, so they are not sent there). Anything else of
the source body (a provider's own options, images, cached prompt blocks) has no meaning
elsewhere and is left out; a turn whose content is not text is refused
(:class:`ApiFeatureError`), since sending it without its content would ask another question.
Reasoning is never carried: one provider's thinking is neither readable nor valid input to
another (Anthropic signs it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .api import Api, ApiFeatureError

__all__ = ["convert_body"]

def convert_body(body: Mapping[str, Any], source: Api, target: Api) -> dict[str, Any]:
    """``body`` (a request of ``source``) as a request of ``target``, without ``stream``."""
    if source is target:
        return {k: v for k, v in body.items() if k != "stream"}
    system, turns = _turns(body, source)
    messages: list[dict[str, Any]] = []
    settings = source.request_settings(body)
    fields: dict[str, Any] = target.sampling({
        shared: settings[own] for shared, own in source.sampling_names.items() if own in settings
    })
    if target.name == "anthropic_messages":
        if system:
            fields["system"] = system
    elif target.name == "responses":
        if system:
            fields["instructions"] = system
    elif system:
        messages.append({"role": "system", "content": system})
    messages += turns
    limit = source.length_cap(body)
    if limit is not None:
        fields[target.max_tokens_field] = limit
    tools = _functions(body, source)
    if tools:
        target.add_tools(fields, target.function_tools(tools))
    model = body.get("model")
    return target.conversation(model if isinstance(model, str) else "", messages, fields)


def _text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
            else:
                kind = (part.get("type") or next(iter(part), "empty")
                        if isinstance(part, Mapping) else type(part).__name__)
                raise ApiFeatureError(f"a {kind!r} part cannot be sent to another API")
        return "".join(parts)
    raise ApiFeatureError(f"message content of type {type(content).__name__} is not text")


def _turns(body: Mapping[str, Any], source: Api) -> tuple[str, list[dict[str, Any]]]:
    """The system prompt and the user/assistant turns of ``body``, as text."""
    system_parts: list[str] = []
    if source.name == "anthropic_messages" and body.get("system") is not None:
        system_parts.append(_text(body["system"]))
    if source.name == "responses" and isinstance(body.get("instructions"), str):
        system_parts.append(body["instructions"])
    instruction = body.get("systemInstruction")  # Gemini's: {"parts": [{"text": ...}]}
    if isinstance(instruction, Mapping):
        system_parts.append(_text(instruction.get("parts")))
    elif isinstance(instruction, str):
        system_parts.append(instruction)
    given = body.get(source.messages_field)
    if isinstance(given, str):  # a Responses input given as one string
        given = [{"role": "user", "content": given}]
    turns: list[dict[str, Any]] = []
    for item in given if isinstance(given, list) else []:
        if not isinstance(item, Mapping):
            raise ApiFeatureError("a conversation item that is not a message")
        role = item.get("role")
        if "parts" in item:  # a Gemini turn: ``user`` or ``model``, its text in ``parts``
            role = "assistant" if role == "model" else role or "user"
        content = item.get("parts") if "parts" in item else item.get("content")
        if role in ("system", "developer"):
            system_parts.append(_text(content))
        elif role in ("user", "assistant"):
            turns.append({"role": role, "content": _text(content)})
        else:
            raise ApiFeatureError(f"a {role!r} turn cannot be sent to another API")
    return "\n\n".join(p for p in system_parts if p), turns


def _functions(body: Mapping[str, Any], source: Api) -> list[dict[str, Any]]:
    """``body``'s tools as function declarations (name, parameters, description)."""
    out: list[dict[str, Any]] = []
    tools: list[Any] = []
    for tool in body.get("tools") or []:  # Gemini groups them: {"functionDeclarations": [...]}
        declared = tool.get("functionDeclarations") if isinstance(tool, Mapping) else None
        tools += declared if isinstance(declared, list) else [tool]
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        inner = tool.get("function")
        spec: Mapping[str, Any] = inner if isinstance(inner, Mapping) else tool
        name = spec.get("name")
        params = next((spec[k] for k in ("parameters", "input_schema", "parametersJsonSchema")
                       if k in spec), None)
        if not isinstance(name, str):
            raise ApiFeatureError("a tool that is not a named function cannot be translated")
        entry: dict[str, Any] = {"name": name, "parameters": params or {"type": "object"}}
        if isinstance(spec.get("description"), str):
            entry["description"] = spec["description"]
        out.append(entry)
    return out
