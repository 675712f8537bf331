"""A frame's usage, as every format keeps it: checked, then normalized.

What a server sends as usage is checked before anything keeps it (:func:`checked_usage`: a
field of the wrong type, or a count no token count can be, is dropped and counted, since a
reply holding it would not validate back, and a hostile ``-1000000`` would cancel another
upstream's cost in any sum), then read under the Chat Completions names whatever the
provider's own (:func:`normalized_usage`, :func:`fill_usage`), so ``reply.usage`` reads the
same for every format while keeping exactly what was sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from .._events import Event, UsageUpdate
from .._wire import CompletionTokensDetails, PromptTokensDetails, Usage

__all__ = [
    "MAX_TOKEN_COUNT",
    "USAGE_DROPPED",
    "checked_usage",
    "checked_usage_model",
    "fill_usage",
    "final_usage",
    "normalized_usage",
    "usage",
]


def usage(raw: Mapping[str, Any]) -> Usage:
    """A :class:`~fluxstream._wire.Usage` keeping the provider's own field names
    (``input_tokens``/``output_tokens``...) as extra fields: nothing is renamed or lost.
    ``raw`` must fit (see :func:`checked_usage`); if it does not, the fields that do not fit
    are left out (a ``Usage`` holding ``total_tokens: 1.5`` would not validate back: relay
    followers and resume tokens would refuse the reply)."""
    return checked_usage_model(raw)[2]


def checked_usage(raw: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """``raw`` without the fields whose values do not fit ``Usage``'s declared types
    (``"total_tokens": 1.5``, a string for a details object) or hold an integer that is no
    token count (negative, or :data:`MAX_TOKEN_COUNT` or more: a hostile server's
    ``-1000000`` would cancel another upstream's cost in any sum), and whether any was
    dropped. The provider's own extra fields are kept unless they hold such an integer. Never
    ``model_construct(**raw)``: a key named ``cls`` or ``_fields_set`` would collide."""
    clean, dropped, _ = checked_usage_model(raw)
    return clean, dropped


def checked_usage_model(raw: Mapping[str, Any]) -> tuple[dict[str, Any], bool, Usage]:
    """:func:`checked_usage` and the ``Usage`` of what is kept: validating the fields is
    how they are checked, so the model made then is the one to keep (a usage frame is
    validated once, not twice)."""
    if _usage_fits(raw):  # the usual frame: checked in one pass, copied whole
        clean = dict(raw)
        dropped = False
    else:
        clean = {k: v for k, v in raw.items() if _counts_fit(v)}
        dropped = len(clean) != len(raw)
    try:
        model = Usage.model_validate(clean)
    except ValidationError as exc:
        bad = {error["loc"][0] for error in exc.errors() if error["loc"]}
        clean = {k: v for k, v in clean.items() if k not in bad}
        try:
            model = Usage.model_validate(clean)
        except ValidationError:  # pragma: no cover - only the fields named above can fail
            return {}, True, Usage.model_validate({})
        return clean, True, model
    return clean, dropped, model


#: A skipped frame's reason when usage fields were dropped (see :func:`checked_usage`).
USAGE_DROPPED = "usage fields of the wrong type or no token count dropped"
#: Token counts at or past this are not believed (dropped, counted, never summed): 2**53 is
#: the largest integer every JSON reader holds exactly (JavaScript's numbers are doubles),
#: a million times the largest context window offered today (10**7 tokens), and a sum of a
#: thousand of them still fits OpenTelemetry's int64 attributes (OTLP cannot encode more).
MAX_TOKEN_COUNT = 2**53
_MAX_COUNT = MAX_TOKEN_COUNT


def _counts_fit(value: object, depth: int = 0) -> bool:
    """Whether every integer of a usage field (and of the objects and lists it holds, two
    levels down: details objects, Gemini's per-modality lists) is a token count."""
    if type(value) is int:
        return 0 <= value < _MAX_COUNT
    if depth < 2:
        if isinstance(value, dict):
            return all(_counts_fit(v, depth + 1) for v in value.values())
        if isinstance(value, list):
            return all(_counts_fit(v, depth + 1) for v in value)
    return True


def _usage_fits(raw: Mapping[str, Any]) -> bool:
    """Whether :func:`_counts_fit` holds for every field of ``raw``: the same answer, with
    the usual shapes (counts, details objects of counts) checked inline, since every usage
    frame is checked (held equal to it by
    ``tests/formats/test_usage_formats.py::test_the_one_pass_check_equals_the_per_field_one``)."""
    for value in raw.values():
        kind = type(value)
        if kind is int:
            if not 0 <= value < _MAX_COUNT:
                return False
        elif kind is dict:
            for inner in value.values():
                if type(inner) is int:
                    if not 0 <= inner < _MAX_COUNT:
                        return False
                elif not _counts_fit(inner, 1):
                    return False
        elif not _counts_fit(value):
            return False
    return True


def _count(value: object) -> int | None:
    """A token count: a plain non-negative ``int`` (not ``bool``, not a string), or ``None``."""
    if value.__class__ is int and 0 <= value < _MAX_COUNT:
        return value
    return None


def final_usage(events: list[Event]) -> list[Event]:
    """``events`` with every usage marked final: a whole (not streamed) body's usage is the
    reply's count, whatever event of the stream its fields stand in for."""
    return [UsageUpdate(e.usage) if type(e) is UsageUpdate and not e.final else e
            for e in events]


def _detail(raw: Mapping[str, Any], field: str, name: str) -> int | None:
    details = raw.get(field)
    return _count(details.get(name)) if isinstance(details, Mapping) else None


def _derive(result: Usage, name: str, value: object) -> None:
    """Fill ``name`` if the provider did not send it, *without* marking it as sent: the
    derived names read like Chat Completions' while ``model_dump(exclude_unset=True)`` stays
    exactly what the provider sent."""
    if value is not None and getattr(result, name, None) is None:
        result.__dict__[name] = value


def normalized_usage(
    raw: Mapping[str, Any], *, vocabulary: str, checked: Usage | None = None
) -> Usage:
    """:func:`usage`, plus the Chat Completions names filled from the provider's own, so
    ``reply.usage.prompt_tokens`` reads the same for every format.

    ``vocabulary="responses"``: ``input_tokens`` -> ``prompt_tokens``, ``output_tokens`` ->
    ``completion_tokens``, ``total_tokens`` (or their sum), ``input_tokens_details.
    cached_tokens`` and ``output_tokens_details.reasoning_tokens`` -> the ``*_details``.
    ``vocabulary="anthropic"``: Anthropic's ``input_tokens`` counts only the tokens after the
    last cache breakpoint, so ``prompt_tokens = input_tokens + cache_creation_input_tokens +
    cache_read_input_tokens`` (every input token, as OpenAI counts them), the cache reads are
    ``prompt_tokens_details.cached_tokens``, ``total_tokens`` the sum. A count that is not a
    plain non-negative integer is not normalized (the raw value is still kept).

    ``checked``: the ``Usage`` of ``raw`` as
    :meth:`~fluxstream.formats._base.FormatBase.usage_model_of` made it when ``raw`` is what
    it kept (a fresh one: filled in place), so a frame's usage is validated once, not twice.
    """
    result = usage(raw) if checked is None else checked
    prompt = _count(raw.get("input_tokens"))
    completion = _count(raw.get("output_tokens"))
    reasoning = None
    if vocabulary == "anthropic":
        cached = _count(raw.get("cache_read_input_tokens"))
        written = _count(raw.get("cache_creation_input_tokens"))
        if prompt is not None:
            prompt += (cached or 0) + (written or 0)
        total = None
    else:
        cached = _detail(raw, "input_tokens_details", "cached_tokens")
        reasoning = _detail(raw, "output_tokens_details", "reasoning_tokens")
        total = _count(raw.get("total_tokens"))
    return fill_usage(result, prompt=prompt, completion=completion, total=total,
                      cached=cached, reasoning=reasoning)


def fill_usage(result: Usage, *, prompt: int | None, completion: int | None,
               total: int | None, cached: int | None, reasoning: int | None) -> Usage:
    """``result`` with the Chat Completions names filled from a provider's own counts (each
    format reads its own field names; what is filled from them is the same for all):
    ``total_tokens`` is the sum when the provider sent none, and nothing filled is marked as
    sent."""
    if total is None and prompt is not None and completion is not None:
        total = prompt + completion
    _derive(result, "prompt_tokens", prompt)
    _derive(result, "completion_tokens", completion)
    _derive(result, "total_tokens", total)
    if cached is not None:
        _derive(result, "prompt_tokens_details", PromptTokensDetails(cached_tokens=cached))
    if reasoning is not None:
        _derive(result, "completion_tokens_details",
                CompletionTokensDetails(reasoning_tokens=reasoning))
    return result
