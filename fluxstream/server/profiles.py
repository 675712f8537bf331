"""Quirk profiles: named deviations from the reference (OpenAI) wire format.

Real endpoints that claim OpenAI compatibility differ in small ways that break naive clients.
Each profile reproduces one such deviation, and profiles combine freely, so a test can ask for,
say, Azure's leading content-filter chunk *and* CRLF line endings *and* heartbeats at once.

A profile set is chosen per server (``serve(profile="azure,crlf")``) or per request, either by
the header ``X-Fluxstream-Profile: name[,name2]`` or by a suffix on the model name
(``"model@azure"``, ``"model@azure,nospace"``). When a request names profiles, they replace the
server's default set, so one server can answer every profile without restarts.

Continuation requests (an assistant message with ``"prefix": true`` last) are always honoured
(see :mod:`.script`); ``prefix-echo`` only adds an overlap before the continuation.

This module only knows the names; what each one changes lives in :mod:`.render` (the bytes)
and :mod:`.script` (the expected content, for the few profiles that change it).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "PROFILE_DESCRIPTIONS",
    "PROFILE_NAMES",
    "ProfileError",
    "parse_profiles",
    "split_model",
]

#: Every profile name, with a one-line description (shown by the CLI and in errors).
PROFILE_DESCRIPTIONS: dict[str, str] = {
    "openai": "reference: `data: {...}\\n\\n` events and a final `data: [DONE]`",
    "azure": 'a leading content-filter chunk with empty choices, id "" and model ""',
    "no-done": "no `data: [DONE]` sentinel; the body just ends",
    "nospace": "`data:{...}` without the space after the colon",
    "crlf": "CRLF line endings",
    "heartbeats": "`: ping` comments between events",
    "multiline": "each JSON payload wrapped across several `data:` lines (between JSON tokens)",
    "repeat-role": "`role: assistant` repeated in every delta",
    "indexless-tools": "tool calls without `index`, each call whole in one chunk",
    "object-args": "tool call `arguments` sent as a JSON object, each call whole in one chunk",
    "reasoning": "`reasoning_content` deltas before the content",
    "error-midstream": 'after half the content, an `{"error": ...}` event, then the body ends',
    "error-midstream-done": "like error-midstream, followed by `data: [DONE]`",
    "prefix-echo": (
        "a continuation (last message assistant with `prefix: true`) first re-sends the last"
        " min(12, len(prefix)) code points of the prefix, an overlap the client must cut"
    ),
    "prefix-as-input": (
        "a continuation's `max_tokens` counts only what it generates after the prefix, as"
        " providers count a prefill (without it, the continuation ends where the original"
        " request's reply ends)"
    ),
    "json": "ignores `stream` and answers one application/json chat.completion",
    "ignore-schema": (
        "a model that ignores `response_format` / `text.format` and answers its plain text"
    ),
    "fenced-json": "structured output wrapped in a ```json markdown fence, as chatty models do",
    "fill-max-tokens": (
        "the answer goes on to `max_tokens` (repeating its paragraph; up to 100000 deltas)"
        " and finishes `stop`: a long stream, for tests and benchmarks (without it a cap"
        " above the answer changes nothing, as with a real model)"
    ),
    "sse-ids": (
        "Responses / Messages events also carry `id:` lines (as some gateways add), so"
        " Last-Event-ID can resume them"
    ),
    "think-tags": (
        "reasoning sent inside the text as `<think>...</think>` before the answer, the tags"
        " split across deltas (as llama.cpp without a reasoning parser sends them)"
    ),
}

#: The profile names, in a fixed order (the order used when rendering and reporting).
PROFILE_NAMES: tuple[str, ...] = tuple(PROFILE_DESCRIPTIONS)


class ProfileError(ValueError):
    """An unknown profile name was requested (the server answers 400 with this message)."""


def parse_profiles(spec: str | Iterable[str] | None) -> frozenset[str]:
    """Parse ``"azure,crlf"`` (or an iterable of names) into a validated set of names.

    Separators ``,``, ``+`` and whitespace are accepted. ``openai`` is the identity and is
    dropped, so the empty set means "reference behaviour".
    """
    if spec is None:
        return frozenset()
    items = [spec] if isinstance(spec, str) else list(spec)
    names: set[str] = set()
    for item in items:
        for raw in item.replace("+", ",").replace(" ", ",").split(","):
            name = raw.strip().lower()
            if not name:
                continue
            if name not in PROFILE_DESCRIPTIONS:
                known = ", ".join(PROFILE_NAMES)
                raise ProfileError(f"unknown fluxstream profile {name!r} (known: {known})")
            if name != "openai":
                names.add(name)
    return frozenset(names)


def split_model(model: str) -> tuple[str, str | None]:
    """Split ``"gpt-x@azure,crlf"`` into ``("gpt-x", "azure,crlf")``; no ``@`` gives ``None``."""
    base, sep, suffix = model.partition("@")
    return (base, suffix) if sep else (model, None)
