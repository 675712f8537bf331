"""Anthropic Messages (``POST {base_url}/v1/messages``, the base URL naming the host as
``ANTHROPIC_BASE_URL`` does), with Anthropic's own conventions (as anthropic-sdk-python sends
them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..structured.schema import anthropic_tool, schema_name
from .api import (
    Api,
    Structured,
    described,
    messages_continuation,
    object_tools,
    read_function,
    text_of,
)

__all__ = ["ANTHROPIC_MESSAGES", "ANTHROPIC_VERSION", "OVERLOADED", "AnthropicMessages"]

#: The ``anthropic-version`` header sent with Messages requests (the API's stable version).
ANTHROPIC_VERSION = "2023-06-01"
#: Anthropic's "overloaded" status: as retryable before content as a 503.
OVERLOADED = 529


class AnthropicMessages(Api):
    """Anthropic Messages: the key in ``x-api-key`` with ``anthropic-version`` (a gateway that
    wants a Bearer token gets it from the caller's own ``Authorization`` header, and then no
    ``x-api-key`` is sent); ``529 overloaded_error`` retried like a 503; ``max_tokens``
    required; structured output as a forced tool; a continuation is a plain trailing
    assistant message (prefill)."""

    name = "anthropic_messages"
    sampling_names: ClassVar[Mapping[str, str]] = {
        "temperature": "temperature", "top_p": "top_p", "stop": "stop_sequences",
    }
    parameter_names: ClassVar[Mapping[str, tuple[str, ...]]] = {"stop": ("stop_sequences",)}
    title = "Anthropic Messages"
    vendor = "Anthropic"
    provider = "anthropic"
    path = "messages"
    endpoint = "messages"
    headers: ClassVar[Mapping[str, str]] = {"anthropic-version": ANTHROPIC_VERSION}
    retry_statuses: ClassVar[frozenset[int]] = frozenset({OVERLOADED})
    #: Anthropic rejects the ``prefix: true`` flag that DeepSeek-style APIs need, so the
    #: default flag is left out.
    continuation_flag: ClassVar[Mapping[str, object] | None] = {}
    default_max_tokens: ClassVar[int | None] = 1024
    base_url_variable = "ANTHROPIC_BASE_URL"
    api_key_variable = "ANTHROPIC_API_KEY"
    default_base_url = "https://api.anthropic.com"
    prefill_resume: ClassVar[bool] = True

    def credential(self, key: str) -> tuple[str, str]:
        return "x-api-key", key

    def function_tools(self, functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [described({"name": f["name"], "input_schema": f["parameters"]}, f)
                for f in functions]

    def declared_functions(self, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [read_function(tool, "input_schema") for tool in object_tools(body)]

    def put_system(self, fields: dict[str, Any], messages: list[Any], text: str) -> None:
        """The top-level ``system`` field (Messages has no system turn)."""
        fields["system"] = text

    def system_of(self, body: Mapping[str, Any]) -> str:
        """``system``: a string, or text blocks."""
        system = body.get("system")
        return "" if system is None else text_of(system)

    def put_response_format(self, body: dict[str, Any], fmt: Any) -> None:
        """A tool whose ``input_schema`` is the type, forced by ``tool_choice`` (unless one
        is given); a ``dict`` is taken as that tool, untouched."""
        tool = anthropic_tool(fmt)
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(
                "a dict response_format for Anthropic is the tool itself: it needs a name"
            )
        body["tools"] = [*(body.get("tools") or []), tool]
        body.setdefault("tool_choice", {"type": "tool", "name": name})

    def structured(self, fmt: Any) -> Structured | None:
        """The object is the input of the forced tool, named as :func:`anthropic_tool`
        names it."""
        if fmt is None or isinstance(fmt, dict):
            return None
        return Structured(fmt, tool=schema_name(fmt))

    def continuation_body(
        self, body: Mapping[str, Any], text: str, flag: Mapping[str, object]
    ) -> dict[str, Any]:
        return messages_continuation(body, text, flag)

    def root_url(self, base_url: str) -> str:
        """Anthropic's base URLs name the host (anthropic-sdk-python posts to
        ``{base_url}/v1/messages``), this library's the API root: ``/v1`` is appended when
        missing, at the end of the path (before a gateway's query), so the host and the
        host with ``/v1`` both work."""
        path, mark, query = base_url.partition("?")
        path = path.rstrip("/")
        if not path.endswith("/v1"):
            path += "/v1"
        return path + mark + query


#: The one instance the registry holds.
ANTHROPIC_MESSAGES = AnthropicMessages()
