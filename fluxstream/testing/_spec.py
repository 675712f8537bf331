"""What a test states about its upstream, checked field by field before anything is served.

A test states a reply (text, reasoning, tool calls, usage, choices, an error) and a schedule
of faults as plain keywords or a marker's dicts. Each is checked here, when the fixture is
set up or the method called, and a bad one is a :class:`ScriptError` that names the field
(``reply field 'tool_calls[0].arguments'``, ``fault 'drop' field 'after_events'``): a typo
must fail the test that made it, never quietly test nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..server.faults import FaultError, build_faults, parse_fault_spec
from ..server.scripted import ScriptedChoice, ScriptedReply, ScriptedToolCall

__all__ = [
    "FAULT_KINDS",
    "REPLY_FIELDS",
    "ScheduledFault",
    "ScriptError",
    "fault_from",
    "reply_from",
    "split_text",
]

#: The fields a reply takes (``times``: how many requests it answers; ``None``: all after).
REPLY_FIELDS = (
    "text", "reasoning", "tool_calls", "usage", "choices", "finish_reason", "error", "times",
)
_CHOICE_FIELDS = ("text", "reasoning", "tool_calls", "finish_reason")
_USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")


class ScriptError(ValueError):
    """A scripted reply or fault is malformed; the message names the field."""


def split_text(text: str) -> tuple[str, ...]:
    """``text`` as the deltas a model streams: one word each, with the space before it."""
    return tuple(re.findall(r"\s*\S+|\s+", text))


def _deltas(field: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return split_text(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ScriptError(
        f"reply field {field!r} must be a string or a list of strings, "
        f"not {type(value).__name__}"
    )


def _tool_calls(field: str, value: Any) -> tuple[ScriptedToolCall, ...]:
    if not isinstance(value, (list, tuple)):
        raise ScriptError(f"reply field {field!r} must be a list, not {type(value).__name__}")
    calls = []
    for i, call in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(call, Mapping):
            raise ScriptError(f"reply field {where!r} must be a dict with 'name' and 'arguments'")
        unknown = set(call) - {"name", "arguments"}
        if unknown:
            raise ScriptError(f"reply field '{where}.{sorted(unknown)[0]}' is unknown "
                              "(known: name, arguments)")
        name, arguments = call.get("name"), call.get("arguments", {})
        if not isinstance(name, str) or not name:
            raise ScriptError(f"reply field '{where}.name' must be a non-empty string")
        if not isinstance(arguments, Mapping):
            raise ScriptError(f"reply field '{where}.arguments' must be a JSON object (a dict), "
                              f"not {type(arguments).__name__}")
        calls.append(ScriptedToolCall(name, dict(arguments)))
    return tuple(calls)


def _choice(prefix: str, spec: Mapping[str, Any]) -> ScriptedChoice:
    finish = spec.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise ScriptError(f"reply field '{prefix}finish_reason' must be a string")
    return ScriptedChoice(
        text=_deltas(f"{prefix}text", spec.get("text", ())),
        reasoning=_deltas(f"{prefix}reasoning", spec.get("reasoning", ())),
        tool_calls=_tool_calls(f"{prefix}tool_calls", spec.get("tool_calls", ())),
        finish_reason=finish,
    )


def _unknown(where: str, given: Mapping[str, Any], known: Sequence[str]) -> None:
    for key in given:
        if key not in known:
            raise ScriptError(f"{where} field {key!r} is unknown (known: {', '.join(known)})")


def times_from(where: str, value: Any, default: int | None) -> int | None:
    """How many requests a reply or fault applies to (``None``: every one from then on)."""
    if value is None:
        return default
    if value.__class__ is not int or value < 1:
        raise ScriptError(f"{where} field 'times' must be a positive int or None, not {value!r}")
    return int(value)


def reply_from(spec: Mapping[str, Any]) -> tuple[ScriptedReply, int | None]:
    """A checked reply and how many requests it answers (``None``: all from then on)."""
    if not isinstance(spec, Mapping):
        raise ScriptError(f"a reply must be a dict of fields, not {type(spec).__name__}")
    _unknown("reply", spec, REPLY_FIELDS)
    times = times_from("reply", spec.get("times"), None)
    if "choices" in spec:
        mixed = [k for k in _CHOICE_FIELDS if k in spec]
        if mixed:
            raise ScriptError(f"reply field {mixed[0]!r} cannot be given with 'choices' "
                              "(give it in each choice)")
        given = spec["choices"]
        if not isinstance(given, (list, tuple)) or not given:
            raise ScriptError("reply field 'choices' must be a non-empty list")
        choices = []
        for i, one in enumerate(given):
            if isinstance(one, str):
                one = {"text": one}
            if not isinstance(one, Mapping):
                raise ScriptError(f"reply field 'choices[{i}]' must be a string or a dict")
            _unknown(f"reply choices[{i}]", one, _CHOICE_FIELDS)
            choices.append(_choice(f"choices[{i}].", one))
    else:
        choices = [_choice("", spec)]
    usage = spec.get("usage")
    if usage is not None:
        if not isinstance(usage, Mapping):
            raise ScriptError("reply field 'usage' must be a dict of token counts")
        _unknown("reply usage", usage, _USAGE_FIELDS)
        for key, count in usage.items():
            if count.__class__ is not int or count < 0:
                raise ScriptError(f"reply field 'usage.{key}' must be an int >= 0, not {count!r}")
    error = spec.get("error", False)
    if not isinstance(error, bool):
        raise ScriptError(f"reply field 'error' must be True or False, not {error!r}")
    reply = ScriptedReply(tuple(choices), dict(usage) if usage else None, error)
    return reply, times


@dataclass(frozen=True)
class ScheduledFault:
    """One fault of the schedule: the server's fault keys, profiles, for how many requests."""

    kind: str
    spec: Mapping[str, str]
    profiles: frozenset[str]
    times: int | None


@dataclass(frozen=True)
class _Field:
    """One field of a fault kind: its server key, its type, whether it is required."""

    key: str | None
    kind: Callable[[Any], bool]
    what: str
    required: bool = False


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    return value.__class__ is int


_SECONDS = "a number of seconds"
#: Every fault kind, its fields and the server fault key each one sets
#: (:mod:`fluxstream.server.faults`).
FAULT_KINDS: dict[str, dict[str, _Field]] = {
    "drop": {
        "after_events": _Field("drop-after-events", _count, "an int"),
        "after_bytes": _Field("drop-after", _count, "an int"),
        "reset": _Field("drop-reset", lambda v: isinstance(v, bool), "True or False"),
    },
    "stall": {
        "seconds": _Field("stall", _number, _SECONDS, required=True),
        "after_events": _Field("stall-after-events", _count, "an int"),
        "heartbeat": _Field("stall-heartbeat", _number, _SECONDS),
    },
    "slow_first_token": {"seconds": _Field("stall", _number, _SECONDS, required=True)},
    "fail": {
        "status": _Field("status", lambda v: _count(v) and 400 <= v <= 599,
                         "an HTTP error status (an int, 400-599)", required=True),
        "retry_after": _Field("retry-after", lambda v: _number(v) or isinstance(v, str),
                              "seconds or an HTTP date"),
        "body": _Field("status-body", lambda v: v in ("json", "html"), "'json' or 'html'"),
    },
    "error_event": {},
    "close_after_reply": {"seconds": _Field("close-after", _number, _SECONDS)},
    "malformed_chunk": {
        "after_bytes": _Field("bad-chunk-after", _count, "an int", required=True),
    },
    "raw": {"spec": _Field(None, lambda v: isinstance(v, (str, Mapping)),
                           "a fault spec ('key=value,...' or a dict)", required=True)},
}
#: Server keys a kind sets besides its fields.
_IMPLIED: dict[str, dict[str, str]] = {
    "slow_first_token": {"stall-after-events": "0"},
    "close_after_reply": {"close-after": "0"},
}


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def fault_from(kind: str, fields: Mapping[str, Any]) -> ScheduledFault:
    """A checked fault of ``kind`` with ``fields`` (and ``times``: default 1 request)."""
    if kind not in FAULT_KINDS:
        raise ScriptError(f"unknown fault {kind!r} (known: {', '.join(FAULT_KINDS)})")
    table = FAULT_KINDS[kind]
    where = f"fault {kind!r}"
    _unknown(where, fields, (*table, "times"))
    times = times_from(where, fields.get("times"), 1)
    spec: dict[str, str] = dict(_IMPLIED.get(kind, {}))
    for name, field in table.items():
        value = fields.get(name)
        if value is None:
            if field.required:
                raise ScriptError(f"{where} field {name!r} is required ({field.what})")
            continue
        if not field.kind(value):
            raise ScriptError(f"{where} field {name!r} must be {field.what}, not {value!r}")
        if field.key is None:  # raw: the server's own keys
            try:
                spec.update(parse_fault_spec(value))
            except FaultError as exc:
                raise ScriptError(f"{where} field 'spec': {exc}") from None
        else:
            spec[field.key] = _text(value)
    if kind == "drop" and ("drop-after" in spec) == ("drop-after-events" in spec):
        raise ScriptError(f"{where} needs one of the fields 'after_events' and 'after_bytes'")
    try:
        build_faults(spec)
    except FaultError as exc:
        raise ScriptError(f"{where}: {_named(table, str(exc))}") from None
    profiles = frozenset({"error-midstream"}) if kind == "error_event" else frozenset()
    return ScheduledFault(kind, spec, profiles, times)


def _named(table: Mapping[str, _Field], message: str) -> str:
    """The server's message about one of its keys, told in the kit's field names."""
    for name, field in table.items():
        if field.key is not None and f"fault {field.key!r}" in message:
            return message.replace(f"fault {field.key!r}", f"field {name!r}")
    return message


def faults_from(given: Any) -> list[ScheduledFault]:
    """A marker's ``faults=``: a list of dicts, each with its ``kind`` and fields."""
    if isinstance(given, Mapping):
        given = [given]
    if not isinstance(given, (list, tuple)):
        raise ScriptError("'faults' must be a list of dicts, each with a 'kind'")
    out = []
    for i, one in enumerate(given):
        if not isinstance(one, Mapping) or not isinstance(one.get("kind"), str):
            raise ScriptError(f"faults[{i}] must be a dict with a 'kind' "
                              f"(one of: {', '.join(FAULT_KINDS)})")
        fields = {k: v for k, v in one.items() if k != "kind"}
        try:
            out.append(fault_from(one["kind"], fields))
        except ScriptError as exc:
            raise ScriptError(f"faults[{i}]: {exc}") from None
    return out
