"""Chat Completions (``POST {base_url}/chat/completions``): OpenAI's API and every server that
speaks it (vLLM, llama.cpp, DeepSeek, Azure...)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..structured.schema import response_format
from .api import Api, messages_continuation, object_tools, read_function

__all__ = ["CHAT_COMPLETIONS", "ChatCompletions"]

#: OpenAI's newer name of the length cap (``max_tokens`` is still taken, and by most servers).
_NEW_CAP = "max_completion_tokens"


class ChatCompletions(Api):
    """Chat Completions: structured output as ``response_format``; a continuation is a
    trailing assistant message with the policy's ``prefix`` flag (DeepSeek-style prefill)."""

    name = "chat_completions"
    title = "Chat Completions"
    vendor = "OpenAI"
    provider = "openai"
    path = "chat/completions"
    endpoint = "chat"
    #: The embedded server (and the servers it stands for) numbers chat events.
    event_ids: ClassVar[bool] = True
    parameter_names: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "max_tokens": ("max_tokens", "max_completion_tokens"),
    }

    def function_tools(self, functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [{"type": "function", "function": dict(f)} for f in functions]

    def declared_functions(self, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Each ``{"type": "function", "function": {...}}`` tool's function (a tool without
        ``function`` is read as the declaration itself)."""
        out = []
        for tool in object_tools(body):
            inner = tool.get("function")
            out.append(read_function(inner if isinstance(inner, Mapping) else tool, "parameters"))
        return out

    def put_system(self, fields: dict[str, Any], messages: list[Any], text: str) -> None:
        """A ``system`` message, first."""
        messages.insert(0, {"role": "system", "content": text})

    def system_of(self, body: Mapping[str, Any]) -> str:
        """Nothing outside the turns: the system prompt is a ``system`` (or ``developer``)
        message."""
        return ""

    def ask_usage(self, body: dict[str, Any]) -> None:
        with_usage(body)

    def put_response_format(self, body: dict[str, Any], fmt: Any) -> None:
        body["response_format"] = response_format(fmt)

    def length_cap(self, body: Mapping[str, Any]) -> int | None:
        """``max_completion_tokens`` (OpenAI's name now), else ``max_tokens``."""
        cap = body.get(_NEW_CAP)  # the two names written out: every stream asks this
        if type(cap) is int and cap > 0:
            return cap
        cap = body.get(self.max_tokens_field)
        return cap if type(cap) is int and cap > 0 else None

    def with_length_cap(self, body: Mapping[str, Any], cap: int) -> dict[str, Any]:
        """In every cap field ``body`` has (``max_tokens`` when it has none)."""
        names = [n for n in (_NEW_CAP, self.max_tokens_field) if n in body]
        return {**body, **dict.fromkeys(names or [self.max_tokens_field], cap)}

    def prompt_arguments(
        self, model: str, messages: list[Any], fields: Mapping[str, Any], *, include_usage: bool
    ) -> dict[str, Any]:
        return {**self.conversation(model, messages, fields), "include_usage": include_usage}

    def streaming_body(
        self, model: str, messages: list[Any], fields: Mapping[str, Any], *, include_usage: bool
    ) -> dict[str, Any]:
        body = super().streaming_body(model, messages, fields, include_usage=include_usage)
        if body["stream"] is True and include_usage:
            with_usage(body)
        return body

    def stored_body_arguments(self, body: Mapping[str, Any]) -> dict[str, Any]:
        # The stored body holds its own stream_options, if it had any: none are added.
        return {**super().stored_body_arguments(body), "include_usage": False}

    def continuation_body(
        self, body: Mapping[str, Any], text: str, flag: Mapping[str, object]
    ) -> dict[str, Any]:
        return messages_continuation(body, text, flag)


def with_usage(body: dict[str, Any]) -> None:
    """Ask for the usage chunk (``stream_options.include_usage``), keeping other options."""
    options = dict(body.get("stream_options") or {})
    options.setdefault("include_usage", True)
    body["stream_options"] = options


#: The one instance the registry holds.
CHAT_COMPLETIONS = ChatCompletions()
