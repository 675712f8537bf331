"""OpenAI's Responses API (``POST {base_url}/responses``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..structured.schema import text_format
from .api import Api, described, object_tools, quoted, read_function

__all__ = ["RESPONSES", "Responses"]


class Responses(Api):
    """The Responses API: the conversation is ``input``, structured output is
    ``text.format``, and a ``background`` response is stored, so a drop is re-read with
    ``GET responses/{id}?stream=true&starting_after=N``."""

    name = "responses"
    title = "Responses"
    vendor = "OpenAI"
    provider = "openai"
    path = "responses"
    endpoint = "responses"
    messages_field = "input"
    max_tokens_field = "max_output_tokens"
    #: No stop sequences in the Responses API.
    sampling_names: ClassVar[Mapping[str, str]] = {"temperature": "temperature", "top_p": "top_p"}
    parameter_names: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "max_tokens": ("max_output_tokens",),
    }
    #: A continuation appends the partial answer to ``input`` as an assistant message marked
    #: ``"status": "in_progress"`` (the Responses API's "unfinished" marker, which servers
    #: that continue a partial message honour).
    continuation_flag: ClassVar[Mapping[str, object] | None] = {"status": "in_progress"}
    #: OpenAI answers a trailing assistant item as a finished turn (see
    #: :meth:`continuation_body`): another upstream's cut reply is continued by instruction.
    assistant_prefill: ClassVar[bool] = False

    def function_tools(self, functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [described({"type": "function", "name": f["name"], "parameters": f["parameters"]},
                          f) for f in functions]

    def declared_functions(self, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Each ``{"type": "function", "name": ...}`` tool (a built-in tool, such as
        ``web_search``, names no function: refused)."""
        return [read_function(tool, "parameters") for tool in object_tools(body)]

    def put_system(self, fields: dict[str, Any], messages: list[Any], text: str) -> None:
        """``instructions``."""
        fields["instructions"] = text

    def system_of(self, body: Mapping[str, Any]) -> str:
        """``instructions`` (a ``system`` or ``developer`` item of ``input`` is a turn)."""
        instructions = body.get("instructions")
        return instructions if isinstance(instructions, str) else ""

    def asks_for_json(self, fields: Mapping[str, Any]) -> bool:
        text = fields.get("text")
        fmt = text.get("format") if isinstance(text, Mapping) else None
        return isinstance(fmt, Mapping) and fmt.get("type") in ("json_schema", "json_object")

    def put_response_format(self, body: dict[str, Any], fmt: Any) -> None:
        body["text"] = {**(body.get("text") or {}), "format": text_format(fmt)}

    def continuation_body(
        self, body: Mapping[str, Any], text: str, flag: Mapping[str, object]
    ) -> dict[str, Any]:
        """The turn is appended to ``input`` (a string input becomes the user message it
        stands for). OpenAI's own API has no assistant prefill: it answers a trailing
        assistant item as a finished turn, so continuation is not safe there (re-reading the
        stored response is OpenAI's resume); vLLM continues it."""
        turn = {"role": "assistant", "content": text, **flag}
        given = body.get("input")
        if isinstance(given, str):
            items: list[Any] = [{"role": "user", "content": given}]
        elif isinstance(given, list):
            items = list(given)
        else:
            items = []
        return {**body, "input": [*items, turn]}

    def replayable(self, body: Mapping[str, Any]) -> bool:
        """Only a ``background`` response is stored by the server to be re-read."""
        return body.get("background") is True

    def replay_path(self, response_id: str, sequence: int) -> str:
        """``responses/{id}?stream=true&starting_after=N``. The id comes from the server, so
        it is quoted whole (it cannot add a path or query)."""
        return f"{self.path}/{quoted(response_id)}?stream=true&starting_after={int(sequence)}"


#: The one instance the registry holds.
RESPONSES = Responses()
