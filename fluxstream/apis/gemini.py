"""Google Gemini (``POST {base_url}/models/{model}:streamGenerateContent?alt=sse``): the Gemini
Developer API (``https://generativelanguage.googleapis.com/v1beta``, or ``/v1``) and Vertex AI
(``https://{region}-aiplatform.googleapis.com/v1/projects/{p}/locations/{l}/publishers/google``),
with Google's own conventions (as google-genai sends them)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import quote

from ..structured.schema import json_schema
from .api import Api, described, object_tools, read_function, text_of

__all__ = ["GEMINI", "Gemini"]

#: The last segment of a base URL that already names the API version.
_VERSION = re.compile(r"v\d+(?:(?:alpha|beta)\d*)?")
#: How a Vertex AI base URL ends (``.../locations/{l}/publishers/google``).
_VERTEX_ROOT = "/publishers/google"

#: The ``generationConfig`` fields a caller may give at the top level of ``stream(...)``
#: (as the other APIs take their length cap there): moved into ``generationConfig``.
_CONFIG_FIELDS = frozenset({"maxOutputTokens", "temperature", "topP", "topK",
                            "candidateCount", "stopSequences", "thinkingConfig", "seed"})


class Gemini(Api):
    """Gemini: the model in the path (the body holds no ``model`` and no ``stream``: Google
    refuses fields it does not know), the key in ``x-goog-api-key`` (a Vertex access token is
    the caller's own ``Authorization`` header), the conversation in ``contents``, the length
    cap and structured output in ``generationConfig`` (``responseMimeType`` JSON with
    ``responseJsonSchema``), tools as ``functionDeclarations``; a continuation is a trailing
    ``model`` turn holding the delivered text, which the model goes on from."""

    name = "gemini"
    title = "Gemini"
    vendor = "Google"
    provider = "gcp.gemini"
    operation = "generate_content"
    path = "models/{model}:streamGenerateContent?alt=sse"
    endpoint = "gemini"
    messages_field = "contents"
    max_tokens_field = "maxOutputTokens"
    #: Given at the top level, :meth:`conversation` moves them into ``generationConfig``.
    sampling_names: ClassVar[Mapping[str, str]] = {
        "temperature": "temperature", "top_p": "topP", "stop": "stopSequences",
    }
    #: In camelCase, as google-genai sends them (the REST API also takes snake_case, which
    #: :meth:`parameter_fields` reads after them; :meth:`request_settings` reads
    #: ``generationConfig`` and ``generation_config``).
    parameter_names: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "max_tokens": ("maxOutputTokens", "max_output_tokens"), "top_p": ("topP",),
        "top_k": ("topK",), "frequency_penalty": ("frequencyPenalty",),
        "presence_penalty": ("presencePenalty",), "stop": ("stopSequences", "stop_sequences"),
        "n": ("candidateCount", "candidate_count"),
    }
    #: A ``model`` turn takes no flag (Google refuses unknown fields).
    continuation_flag: ClassVar[Mapping[str, object] | None] = {}
    base_url_variable = "GOOGLE_GEMINI_BASE_URL"
    api_key_variable = "GEMINI_API_KEY"
    default_base_url = "https://generativelanguage.googleapis.com/v1beta"
    prefill_resume: ClassVar[bool] = True

    def credential(self, key: str) -> tuple[str, str]:
        return "x-goog-api-key", key

    def root_url(self, base_url: str) -> str:
        """google-genai joins its ``base_url`` (the host, as ``GOOGLE_GEMINI_BASE_URL`` names
        it, or a gateway's path) and the API version: a base URL that ends in no version gets
        ``/v1beta``; one that ends in a version (``/v1``, ``/v1beta``, ``/v1alpha``) or is a
        Vertex publisher path (``/v1/projects/{p}/locations/{l}/publishers/google``) is
        already the root (the form this library has always taken), used as given."""
        path, mark, query = base_url.partition("?")
        path = path.rstrip("/")
        _, slash, last = path.split("://", 1)[-1].rpartition("/")  # no slash: only a host
        if (slash and _VERSION.fullmatch(last)) or path.endswith(_VERTEX_ROOT):
            return path + mark + query
        return path + "/v1beta" + mark + query

    def add_tools(self, body: dict[str, Any], tools: Sequence[Mapping[str, Any]]) -> None:
        body["tools"] = [*(body.get("tools") or []), *tools]

    def function_tools(self, functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        declarations = [described({"name": f["name"], "parametersJsonSchema": f["parameters"]}, f)
                        for f in functions]
        return [{"functionDeclarations": declarations}]

    def declared_functions(self, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The ``functionDeclarations`` of every tool, their schema in ``parameters`` (Google's
        OpenAPI subset) or ``parametersJsonSchema``; a tool that declares none (``googleSearch``)
        names no function: refused."""
        specs: list[Any] = []
        for tool in object_tools(body):
            declared = tool.get("functionDeclarations")
            specs += declared if isinstance(declared, list) else [tool]
        return [read_function(spec, "parameters", "parametersJsonSchema")
                for spec in specs if isinstance(spec, Mapping)]

    def put_system(self, fields: dict[str, Any], messages: list[Any], text: str) -> None:
        """``systemInstruction``, one text part."""
        fields["systemInstruction"] = {"parts": [{"text": text}]}

    def system_of(self, body: Mapping[str, Any]) -> str:
        """``systemInstruction``: its parts' text (or a plain string)."""
        instruction = body.get("systemInstruction")
        if isinstance(instruction, Mapping):
            return text_of(instruction.get("parts"))
        return instruction if isinstance(instruction, str) else ""

    def read_turn(self, turn: Mapping[str, Any]) -> tuple[Any, Any]:
        """A ``user`` or ``model`` turn (the assistant's), its content in ``parts``."""
        role = turn.get("role")
        return "assistant" if role == "model" else role or "user", turn.get("parts")

    def asks_for_json(self, fields: Mapping[str, Any]) -> bool:
        config = fields.get("generationConfig")
        return isinstance(config, Mapping) and (
            config.get("responseMimeType") == "application/json")

    def put_response_format(self, body: dict[str, Any], fmt: Any) -> None:
        """``generationConfig.responseMimeType`` JSON and ``responseJsonSchema`` the type's
        JSON schema; a ``dict`` is taken as the schema itself."""
        config = dict(body.get("generationConfig") or {})
        config["responseMimeType"] = "application/json"
        config["responseJsonSchema"] = dict(fmt) if isinstance(fmt, dict) else json_schema(fmt)
        body["generationConfig"] = config

    def request_settings(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """The top level with ``generationConfig`` over it (or its snake_case spelling,
        ``generation_config``, which the REST API also takes)."""
        configs = [body.get(name) for name in ("generation_config", "generationConfig")]
        found = [config for config in configs if isinstance(config, Mapping)]
        return {k: v for source in (body, *found) for k, v in source.items()} if found else body

    def with_length_cap(self, body: Mapping[str, Any], cap: int) -> dict[str, Any]:
        """In ``generationConfig`` (Google refuses a top-level ``maxOutputTokens``)."""
        config = body.get("generationConfig")
        rest = {k: v for k, v in body.items() if k != self.max_tokens_field}
        return {**rest, "generationConfig": {
            **(config if isinstance(config, Mapping) else {}), self.max_tokens_field: cap}}

    def conversation(
        self, model: str, messages: list[Any], fields: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Chat-shaped ``messages`` (``role``/``content``) as ``contents`` (``assistant``
        turns as ``model`` turns, ``system`` ones as the ``systemInstruction``; turns already
        in Gemini's shape as they are), and ``generationConfig`` fields given at the top level
        moved into it."""
        contents: list[Any] = []
        system: list[dict[str, str]] = []
        for message in messages:
            if isinstance(message, Mapping) and "parts" in message:
                contents.append(dict(message))
                continue
            role = message.get("role") if isinstance(message, Mapping) else "user"
            text = message.get("content") if isinstance(message, Mapping) else message
            part = {"text": text if isinstance(text, str) else str(text)}
            if role == "system":
                system.append(part)
            else:
                contents.append({"role": "model" if role == "assistant" else "user",
                                 "parts": [part]})
        request: dict[str, Any] = {"model": model, "contents": contents}
        if system:
            request["systemInstruction"] = {"parts": system}
        config = {k: v for k, v in fields.items() if k in _CONFIG_FIELDS}
        rest = {k: v for k, v in fields.items() if k not in _CONFIG_FIELDS}
        if config:
            request["generationConfig"] = {**dict(rest.pop("generationConfig", None) or {}),
                                           **config}
        return {**request, **rest}

    def continuation_body(
        self, body: Mapping[str, Any], text: str, flag: Mapping[str, object]
    ) -> dict[str, Any]:
        turns = [*list(body.get("contents") or []), self.partial_turn(text, flag)]
        return {**body, "contents": turns}

    def user_turn(self, text: str) -> dict[str, Any]:
        return {"role": "user", "parts": [{"text": text}]}

    def partial_turn(self, text: str, flag: Mapping[str, object]) -> dict[str, Any]:
        return {"role": "model", "parts": [{"text": text}], **flag}

    def turn_text(self, turn: Mapping[str, Any]) -> str | None:
        parts = turn.get("parts")
        if turn.get("role") != "model" or not isinstance(parts, list):
            return None
        texts = [p.get("text") for p in parts if isinstance(p, Mapping)]
        return "".join(t for t in texts if isinstance(t, str)) if texts else None

    def target(self, path: str, body: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
        """The model goes in the path; the body keeps neither ``model`` nor ``stream``."""
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise ValueError("a Gemini request needs a model (it goes in the path)")
        sent = {k: v for k, v in body.items() if k not in ("model", "stream")}
        # One path segment ("@" kept: the embedded server reads profiles after it).
        segment = quote(model.removeprefix("models/"), safe="@")
        return path.format(model=segment), sent


#: The one instance the registry holds.
GEMINI = Gemini()
