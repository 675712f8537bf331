"""Google Gemini (``POST {base_url}/models/{model}:streamGenerateContent?alt=sse``): the Gemini
Developer API (``https://generativelanguage.googleapis.com/v1beta``, or ``/v1``) and Vertex AI
(``https://{region}-aiplatform.googleapis.com/v1/projects/{p}/locations/{l}/publishers/google``),
with Google's own conventions (as google-genai sends them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import quote

from ..structured.schema import json_schema
from .api import Api

__all__ = ["GEMINI", "Gemini"]

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
    #: A ``model`` turn takes no flag (Google refuses unknown fields).
    continuation_flag: ClassVar[Mapping[str, object] | None] = {}
    base_url_variable = "GOOGLE_GEMINI_BASE_URL"
    api_key_variable = "GEMINI_API_KEY"
    default_base_url = "https://generativelanguage.googleapis.com/v1beta"
    prefill_resume: ClassVar[bool] = True

    def credential(self, key: str) -> tuple[str, str]:
        return "x-goog-api-key", key

    def root_url(self, base_url: str) -> str:
        """A base URL that names only the host (as ``GOOGLE_GEMINI_BASE_URL`` does for
        google-genai) gets the ``v1beta`` version segment; one with a version (``/v1``,
        ``/v1beta``, a Vertex ``/v1/projects/...`` path) is used as given."""
        path, mark, query = base_url.partition("?")
        head = path.split("://", 1)[-1]
        if "/" in head.rstrip("/"):
            return base_url
        return path.rstrip("/") + "/v1beta" + mark + query

    def add_tools(self, body: dict[str, Any], tools: Sequence[Mapping[str, Any]]) -> None:
        body["tools"] = [*(body.get("tools") or []), *tools]

    def function_tools(self, functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        declarations = []
        for f in functions:
            declaration = {"name": f["name"], "parametersJsonSchema": f["parameters"]}
            if f.get("description"):
                declaration["description"] = f["description"]
            declarations.append(declaration)
        return [{"functionDeclarations": declarations}]

    def put_response_format(self, body: dict[str, Any], fmt: Any) -> None:
        """``generationConfig.responseMimeType`` JSON and ``responseJsonSchema`` the type's
        JSON schema; a ``dict`` is taken as the schema itself."""
        config = dict(body.get("generationConfig") or {})
        config["responseMimeType"] = "application/json"
        config["responseJsonSchema"] = dict(fmt) if isinstance(fmt, dict) else json_schema(fmt)
        body["generationConfig"] = config

    def request_settings(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        config = body.get("generationConfig")
        return {**body, **config} if isinstance(config, Mapping) else body

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
