"""What the OpenTelemetry GenAI conventions call a request's parameters, a reply's response
and a failure, read from a request body, a :class:`~fluxstream._reply.Reply` and its
:class:`~fluxstream._core.progress.StreamStats`, sans-IO and without OpenTelemetry (the
attribute names are the ``opentelemetry-semantic-conventions`` package's; a test checks
them there). :mod:`fluxstream.otel` puts them on spans and metrics.

Each API names its parameters its own way and keeps them in its own place (Gemini's in
``generationConfig``): both are asked of the request's :class:`~fluxstream.apis.Api`
(:meth:`~fluxstream.apis.Api.request_settings`, where failover's translation reads them
too, and :meth:`~fluxstream.apis.Api.parameter_fields`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import apis
from .._events import Outcome

if TYPE_CHECKING:  # pragma: no cover
    from .._reply import Reply
    from ..apis import Api
    from .progress import StreamStats

__all__ = [
    "error_type", "input_messages", "output_messages", "read_request",
    "response_attributes", "tokens_of",
]

#: The conventions' numeric request parameters, by the names
#: :meth:`~fluxstream.apis.Api.parameter_fields` is asked for.
REQUEST_NUMBERS = {
    "max_tokens": "gen_ai.request.max_tokens", "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p", "top_k": "gen_ai.request.top_k",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty", "seed": "gen_ai.request.seed",
}
#: OTLP carries integer attributes as int64: a larger count cannot be encoded (the exporter
#: would fail the whole batch), so none is set. The formats drop counts long before this
#: (:data:`fluxstream.formats._usage_fields.MAX_TOKEN_COUNT`); a reply built elsewhere (by
#: hand, read back from a relay or a resume token) may still hold one.
INT64_MAX = 2**63 - 1
#: The structured-output types that mean JSON (Chat Completions' ``response_format.type``,
#: Responses' ``text.format.type``, Anthropic's ``output_format.type``).
JSON_FORMATS = frozenset({"json_object", "json_schema"})
#: Every field :func:`output_type` reads (in the body, or where the API keeps its settings).
OUTPUT_FIELDS = frozenset({
    "response_format", "output_format", "text", "responseMimeType", "response_mime_type",
})


#: How a field's value becomes its attribute's (:func:`_reading`): a number, stop
#: sequences, a choice count.
_NUMBER, _STOP, _CHOICES = 0, 1, 2
STOP_ATTRIBUTE = "gen_ai.request.stop_sequences"
CHOICES_ATTRIBUTE = "gen_ai.request.choice.count"


class _Fields(NamedTuple):
    """Where one API's request may hold each parameter (:func:`_reading`), by field: a
    request names two or three of the fields an API knows, so it is read by the fields it
    holds, not by every parameter the conventions know."""

    #: Each field's readings: (attribute, its rank among the attribute's fields, kind).
    readings: dict[str, tuple[tuple[str, int, int], ...]]
    names: frozenset[str]


def _count(value: int | None) -> int | None:
    """A token count an attribute can carry: an ``int`` from 0 to :data:`INT64_MAX`."""
    return value if type(value) is int and 0 <= value <= INT64_MAX else None


@lru_cache(maxsize=16)
def _reading(api: str | None) -> tuple[Api, _Fields] | None:
    """The registered API named ``api`` and the fields that may hold each parameter, as it
    names them (worked out once per API, not per stream); ``None`` for a name no API has."""
    if api is None or api not in apis.names():
        return None
    known = apis.get(api)
    readings: dict[str, list[tuple[str, int, int]]] = {}
    wanted = [(attribute, known.parameter_fields(parameter), _NUMBER)
              for parameter, attribute in REQUEST_NUMBERS.items()]
    wanted.append((STOP_ATTRIBUTE, known.parameter_fields("stop"), _STOP))
    wanted.append((CHOICES_ATTRIBUTE, known.parameter_fields("n"), _CHOICES))
    for attribute, names, kind in wanted:
        for rank, name in enumerate(names):
            readings.setdefault(name, []).append((attribute, rank, kind))
    fields = _Fields({name: tuple(each) for name, each in readings.items()},
                     frozenset(readings))
    return known, fields


def _stop_sequences(value: object) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and value and all(isinstance(s, str) for s in value):
        return list(value)
    return None


def read_request(body: Mapping[str, Any], api: str | None, out: dict[str, Any]) -> None:
    """The conventions' request parameters found in a request body (never its content), as
    the request's API (``api``: its registered name) names them, where it keeps them, into
    ``out`` (a span's attributes, begun with the ones every stream of its series shares: one
    dict a stream). A request of no registered API (``None``, an unknown name) has none read.
    Of the fields that may hold one parameter, the first (in the API's order) with a usable
    value wins."""
    reading = _reading(api)
    if reading is None:
        settings = body
    else:
        known, fields = reading
        settings = known.request_settings(body)
        present = fields.names.intersection(settings)
        if present:
            _read_parameters(settings, present, fields.readings, out)
    # Most requests ask for no format: the fields are looked for before they are read.
    if not (OUTPUT_FIELDS.isdisjoint(body)
            and (settings is body or OUTPUT_FIELDS.isdisjoint(settings))):
        output = output_type(body, settings)
        if output is not None:
            out["gen_ai.output.type"] = output


def _read_parameters(
    settings: Mapping[str, Any], present: frozenset[str],
    readings: dict[str, tuple[tuple[str, int, int], ...]], out: dict[str, Any],
) -> None:
    """The parameters the ``present`` fields of ``settings`` hold, into ``out``."""
    taken: dict[str, int] = {}  # attribute: the rank of the field it was read from
    choices = False
    for name in present:
        value = settings[name]
        for attribute, rank, kind in readings[name]:
            if taken.get(attribute, rank + 1) < rank:
                continue  # an earlier field of the API's holds it
            read: Any
            if kind == _NUMBER:
                read = value if isinstance(value, (int, float)) \
                    and not isinstance(value, bool) else None
            elif kind == _STOP:
                read = _stop_sequences(value)
            else:
                read = value if isinstance(value, int) and not isinstance(value, bool) \
                    else None
                choices = True
            if read is not None:
                taken[attribute] = rank
                out[attribute] = read
    if choices and out.get(CHOICES_ATTRIBUTE) == 1:  # recorded only when not 1, the default
        del out[CHOICES_ATTRIBUTE]


def output_type(body: Mapping[str, Any], settings: Mapping[str, Any]) -> str | None:
    """``gen_ai.output.type`` of a request that asks for a format: ``json`` or ``text``
    (``settings``: where the request's API keeps its parameters, Gemini's
    ``responseMimeType``)."""
    for fmt in (body.get("response_format"), body.get("output_format")):
        if isinstance(fmt, Mapping):
            return "json" if fmt.get("type") in JSON_FORMATS else "text"
    text = body.get("text")
    if isinstance(text, Mapping) and isinstance(text.get("format"), Mapping):
        return "json" if text["format"].get("type") in JSON_FORMATS else "text"
    mime = settings.get("responseMimeType", settings.get("response_mime_type"))
    if isinstance(mime, str):
        return "json" if mime == "application/json" else "text"
    return None


def response_attributes(
    reply: Reply, stats: StreamStats, tokens: tuple[int | None, int | None, bool],
    outcome: str, max_value: int, max_reason: int,
) -> dict[str, Any]:
    """The conventions' response attributes and fluxstream's own, at the end (``tokens``:
    :func:`tokens_of` the reply, worked out once by the caller for the metrics too;
    ``outcome``: ``fluxstream.outcome``). What the server chose is cut: its model, id and
    finish reasons to ``max_value`` characters, the end reason (which may quote its error
    message) to ``max_reason``."""
    inputs, outputs, estimated = tokens
    # What every stream has, in one display; then what only some have.
    out: dict[str, Any] = {
        "fluxstream.outcome": outcome,
        "fluxstream.usage.estimated": estimated, "fluxstream.attempts": stats.attempts,
        "fluxstream.resumes": stats.resumes, "fluxstream.skipped_frames": stats.skipped_frames,
        "fluxstream.content_events": stats.content_events,
    }
    if reply.model:
        out["gen_ai.response.model"] = reply.model[:max_value]
    if reply.id:
        out["gen_ai.response.id"] = reply.id[:max_value]
    choices = reply.choices
    if len(choices) == 1:  # the usual reply: no list built to be filtered
        reason = choices[0].finish_reason
        if reason is not None:
            out["gen_ai.response.finish_reasons"] = [reason[:max_value]]
    else:
        reasons = [c.finish_reason[:max_value] for c in choices if c.finish_reason is not None]
        if reasons:
            out["gen_ai.response.finish_reasons"] = reasons
    if inputs is not None:
        out["gen_ai.usage.input_tokens"] = inputs
    if outputs is not None:
        out["gen_ai.usage.output_tokens"] = outputs
    usage = reply.usage
    details = usage.prompt_tokens_details if usage is not None else None
    if details is not None:
        cached = details.cached_tokens
        if type(cached) is int and 0 <= cached <= INT64_MAX:  # _count, inline: every stream
            out["gen_ai.usage.cache_read.input_tokens"] = cached
    if reply.cost is not None:
        out["fluxstream.cost"] = float(reply.cost)
    first = stats.time_to_first_token
    if first is not None:
        out["fluxstream.time_to_first_token"] = first
        out["gen_ai.response.time_to_first_chunk"] = first
    if reply.end_reason:
        out["fluxstream.end_reason"] = reply.end_reason[:max_reason]
    return out


def tokens_of(reply: Reply) -> tuple[int | None, int | None, bool]:
    """Input and output tokens, and whether any of them is fluxstream's estimate: a reply
    that moved between upstreams counts every upstream's (:attr:`Reply.total_usage`); else
    the estimate when the server sent no final count (none, or only a snapshot such as
    Anthropic's ``message_start`` placeholder), else its usage. Never a count an int64
    attribute cannot hold."""
    total = reply.total_usage if reply.segments else None
    if total is not None:
        return _count(total.prompt_tokens), _count(total.completion_tokens), total.estimated
    estimate = reply.usage_estimate
    if estimate is not None:
        return _count(estimate.input_tokens), _count(estimate.output_tokens), True
    usage = reply.usage
    if usage is not None:  # the usual case, _count inline (once per stream, every stream)
        inputs, outputs = usage.prompt_tokens, usage.completion_tokens
        return (
            inputs if type(inputs) is int and 0 <= inputs <= INT64_MAX else None,
            outputs if type(outputs) is int and 0 <= outputs <= INT64_MAX else None,
            False,
        )
    return None, None, False


def error_type(reply: Reply, stats: StreamStats) -> str | None:
    """``error.type`` for a stream that failed or was cut short (``None``: it ended well, or
    its caller cancelled it): the typed error's class, else the in-stream error's own type."""
    if reply.outcome is Outcome.FAILED:
        if stats.error_type is not None:
            return stats.error_type
        error = reply.error
        if error is not None and (error.type or error.code):
            return error.type or error.code
        return "_OTHER"
    if reply.outcome is Outcome.TRUNCATED:
        return stats.error_type or "truncated"
    return None


def _text_parts(content: object) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    return list(content) if isinstance(content, list) else []


def _gemini_parts(turn: Mapping[str, Any]) -> list[Any]:
    parts = turn.get("parts")
    out: list[Any] = []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, Mapping) and isinstance(part.get("text"), str):
            out.append({"type": "text", "content": part["text"]})
        else:
            out.append(part)
    return out


def input_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request's messages in the conventions' shape (opt-in content): Chat Completions'
    and Messages' ``messages``, Responses' ``input``, Gemini's ``contents``."""
    out: list[dict[str, Any]] = []
    contents = body.get("contents")
    if isinstance(contents, list):  # Gemini: "model" turns are the assistant's
        for turn in contents:
            if isinstance(turn, Mapping):
                role = str(turn.get("role", "user"))
                out.append({"role": "assistant" if role == "model" else role,
                            "parts": _gemini_parts(turn)})
        system = body.get("systemInstruction", body.get("system_instruction"))
        if isinstance(system, Mapping):
            out.insert(0, {"role": "system", "parts": _gemini_parts(system)})
        return out
    raw = body.get("messages")
    if raw is None:
        given = body.get("input")
        raw = [{"role": "user", "content": given}] if isinstance(given, str) else given
    for message in raw if isinstance(raw, list) else []:
        if isinstance(message, Mapping):
            out.append({"role": str(message.get("role", "user")),
                        "parts": _text_parts(message.get("content"))})
    system_text = body.get("system")
    if isinstance(system_text, str):
        out.insert(0, {"role": "system", "parts": _text_parts(system_text)})
    return out


def output_messages(reply: Reply) -> list[dict[str, Any]]:
    """The reply's choices in the conventions' output message shape (opt-in content)."""
    out: list[dict[str, Any]] = []
    for choice in reply.choices:
        parts: list[dict[str, Any]] = []
        if choice.reasoning:
            parts.append({"type": "reasoning", "content": choice.reasoning})
        if choice.text:
            parts.append({"type": "text", "content": choice.text})
        for call in choice.tool_calls:
            parts.append({
                "type": "tool_call", "id": call.id, "name": call.name,
                "arguments": call.arguments,
            })
        out.append({
            "role": "assistant", "parts": parts, "finish_reason": choice.finish_reason or "",
        })
    return out
