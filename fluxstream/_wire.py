"""Pydantic models of the Chat Completions *wire* shapes: the chunk a provider streams.

Why these exist, and why the hot path does not use them
-------------------------------------------------------
They document and validate the shapes (and give users typed access to a chunk they decoded
themselves), but :mod:`fluxstream.formats.chat_completions` reads the decoded JSON as plain
dicts: measured in ``benchmarks/bench_assembly.py``, ``json.loads`` plus dict access is several
times faster than ``TypeAdapter(ChatCompletionChunk).validate_json`` per chunk, and the format
only needs a handful of keys.

Every model is lenient on purpose (providers disagree about nearly everything):

* unknown fields are kept (``extra="allow"``): ``prompt_filter_results``, ``x_groq``,
  ``obfuscation``, ``citations``, ``extra_content`` ... survive a round trip;
* every field may be absent or ``null``; lists default to empty;
* ``delta.content`` is a string *or* a list of typed parts (Mistral magistral).

:class:`Usage` is the one wire model that also appears in the assembled
:class:`~fluxstream._reply.Reply` and in :class:`~fluxstream._events.UsageUpdate`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

__all__ = [
    "ChatCompletionChunk",
    "ChunkChoice",
    "ChunkDelta",
    "CompletionTokensDetails",
    "ContentPart",
    "DeltaFunction",
    "DeltaToolCall",
    "PromptTokensDetails",
    "Usage",
]


def _none_to_empty(value: object) -> object:
    return [] if value is None else value


#: A list that may arrive as ``null`` (treated as empty).
_NullableList = BeforeValidator(_none_to_empty)


class _Lenient(BaseModel):
    """Base: keep unknown fields, accept anything a provider may reasonably send."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class PromptTokensDetails(_Lenient):
    cached_tokens: int | None = None
    audio_tokens: int | None = None


class CompletionTokensDetails(_Lenient):
    reasoning_tokens: int | None = None
    audio_tokens: int | None = None
    accepted_prediction_tokens: int | None = None
    rejected_prediction_tokens: int | None = None


class Usage(_Lenient):
    """Token accounting. Provider-specific counters (``prompt_cache_hit_tokens``, ...) are kept
    as extra fields; ``model_dump(exclude_none=True)`` gives back what the provider sent."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None


class ContentPart(_Lenient):
    """One typed part of a list-valued ``delta.content``.

    ``{"type": "text", "text": ...}`` is text; ``{"type": "thinking", "thinking": [parts]}`` is
    reasoning (Mistral). Other part types are kept but contribute nothing.
    """

    type: str | None = None
    text: str | None = None
    thinking: list[ContentPart] | str | None = None


class DeltaFunction(_Lenient):
    name: str | None = None
    # A string fragment normally; some servers send the whole arguments as a JSON object.
    arguments: str | dict[str, Any] | list[Any] | None = None


class DeltaToolCall(_Lenient):
    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: DeltaFunction | None = None


class ChunkDelta(_Lenient):
    role: str | None = None
    content: str | list[ContentPart] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    tool_calls: Annotated[list[DeltaToolCall], _NullableList] = Field(default_factory=list)


class ChunkChoice(_Lenient):
    index: int | None = None
    delta: ChunkDelta | None = None
    finish_reason: str | None = None
    logprobs: Any = None


class ChatCompletionChunk(_Lenient):
    """One ``data:`` payload of a Chat Completions stream."""

    id: str | None = None
    object: str | None = None
    created: int | None = None
    model: str | None = None
    system_fingerprint: str | None = None
    service_tier: str | None = None
    choices: Annotated[list[ChunkChoice], _NullableList] = Field(default_factory=list)
    usage: Usage | None = None
    # In-band error (OpenAI/OpenRouter ``{"error": {...}}``, or a bare string).
    error: dict[str, Any] | str | None = None
