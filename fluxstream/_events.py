"""Normalized, format-neutral stream events.

Why frozen slotted dataclasses and not pydantic models: one event is created per delta on the
hot path, and a frozen ``BaseModel`` costs several times more to create. pydantic still
validates and serialises them: :data:`Event` is the union annotated with the ``type``
discriminator, so::

    adapter = pydantic.TypeAdapter(Event)
    adapter.validate_python(adapter.dump_python(event)) == event

Idempotent rendering: every text-like delta carries ``(key, choice, offset)``; ``offset`` counts
the code points already delivered on that channel (text / reasoning / refusal) of that choice,
so ``buf[offset:offset + len(text)] = text`` never shows text twice, even across a replayed
connection.

``ToolCallDelta.id`` and ``.name`` are set only on the delta where they first become known
(``None`` on every other delta), so a consumer may concatenate nothing but ``arguments``.
The one exception is a delta with ``replace=True``: the provider's final value of the
arguments (Responses ``function_call_arguments.done``) disagreed with the streamed fragments,
so the arguments from ``offset`` on are *replaced*: ``buf[offset:] = arguments``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union

from pydantic import Field

from ._reply import Outcome, StopReason, ToolCall, Usage, unified_stop

__all__ = [
    "End",
    "ErrorEvent",
    "Event",
    "Finish",
    "Handoff",
    "Outcome",
    "PathDelta",
    "PathDone",
    "PathStart",
    "ReasoningBlock",
    "ReasoningDelta",
    "RefusalDelta",
    "Reset",
    "SkippedFrame",
    "TextDelta",
    "ToolCallDelta",
    "ToolCallDone",
    "TypedEvent",
    "UsageUpdate",
]

@dataclass(frozen=True, slots=True)
class TextDelta:
    """Assistant text of one choice."""

    key: str
    choice: int
    offset: int
    text: str
    type: Literal["text"] = field(default="text", init=False)


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Reasoning / thinking text (``reasoning_content``, ``reasoning``, Mistral thinking)."""

    key: str
    choice: int
    offset: int
    text: str
    type: Literal["reasoning"] = field(default="reasoning", init=False)


@dataclass(frozen=True, slots=True)
class RefusalDelta:
    """Refusal text (``delta.refusal``)."""

    key: str
    choice: int
    offset: int
    text: str
    type: Literal["refusal"] = field(default="refusal", init=False)


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of tool call ``call`` (the provider's tool-call index) of a choice."""

    key: str
    choice: int
    call: int
    id: str | None
    name: str | None
    arguments: str
    offset: int
    #: ``arguments`` replaces everything from ``offset`` on (see the module docstring).
    replace: bool = False
    type: Literal["tool_call_delta"] = field(default="tool_call_delta", init=False)


@dataclass(frozen=True, slots=True)
class ToolCallDone:
    """A tool call is complete: its choice finished, or the stream ended cleanly."""

    key: str
    choice: int
    call: ToolCall
    type: Literal["tool_call_done"] = field(default="tool_call_done", init=False)


#: One step of a JSON path: an object's key or an array's index.
PathStep = str | int


@dataclass(frozen=True, slots=True)
class PathStart:
    """The value at ``path`` of a JSON document began (opt-in: ``json_paths=True``).

    The document is the arguments of tool call ``call``, or, with ``call`` ``None``, the
    content of a structured reply. ``path`` is a tuple of keys and indexes, ``()`` the whole
    document; ``kind`` says what began (``scalar``: a number, ``true``, ``false`` or ``null``,
    announced once it has ended). Every value that starts completes with a
    :class:`PathDone` unless the document is cut or malformed."""

    key: str
    choice: int
    call: int | None
    path: tuple[PathStep, ...]
    kind: Literal["object", "array", "string", "scalar"]
    type: Literal["path_start"] = field(default="path_start", init=False)


@dataclass(frozen=True, slots=True)
class PathDelta:
    """A piece of the string at ``path``: ``buf[offset:offset + len(text)] = text``."""

    key: str
    choice: int
    call: int | None
    path: tuple[PathStep, ...]
    offset: int
    text: str
    type: Literal["path_delta"] = field(default="path_delta", init=False)


@dataclass(frozen=True, slots=True)
class PathDone:
    """The value at ``path`` is complete: ``value`` is it, decoded (an object or array with
    everything in it; shared with the parser, so treat it as read-only)."""

    key: str
    choice: int
    call: int | None
    path: tuple[PathStep, ...]
    value: Any
    type: Literal["path_done"] = field(default="path_done", init=False)


@dataclass(frozen=True, slots=True)
class Finish:
    """A choice's finish reason arrived (or changed): ``reason`` is the raw provider string,
    ``stop`` the same in one vocabulary for every format (derived from ``reason`` by
    :func:`~fluxstream._reply.unified_stop` when the format does not give it)."""

    key: str
    choice: int
    reason: str
    stop: StopReason | None = None
    type: Literal["finish"] = field(default="finish", init=False)

    def __post_init__(self) -> None:
        if self.stop is None:
            object.__setattr__(self, "stop", unified_stop(self.reason))


@dataclass(frozen=True, slots=True)
class ReasoningBlock:
    """A provider-native reasoning item that is kept, not shown (Anthropic ``thinking`` with
    its ``signature``, ``redacted_thinking``; a Responses ``reasoning`` item): it must be sent
    back to continue a conversation. ``index`` is the provider's block / output index; a
    later block with the same index replaces the earlier one."""

    key: str
    choice: int
    index: int
    block: dict[str, Any]
    type: Literal["reasoning_block"] = field(default="reasoning_block", init=False)


@dataclass(frozen=True, slots=True)
class UsageUpdate:
    """A non-null ``usage`` object arrived; the last one wins.

    ``final`` is false for a snapshot a format sends before the reply's end (Anthropic's
    ``message_start`` with its placeholder ``output_tokens: 1``, Gemini's running
    ``usageMetadata``, a Chat Completions chunk's running totals while a choice is still
    going): its output count is not the reply's, so a stream that ends on one gets its
    output tokens estimated (:attr:`fluxstream._reply.Reply.usage_estimate`)."""

    usage: Usage
    final: bool = True
    type: Literal["usage"] = field(default="usage", init=False)


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """An error payload inside the stream (after HTTP 200)."""

    message: str
    code: str | None
    error_type: str | None
    param: str | None
    raw: object
    type: Literal["error"] = field(default="error", init=False)


@dataclass(frozen=True, slots=True)
class SkippedFrame:
    """A data frame that could not be used (invalid JSON, not an object); the stream goes on."""

    reason: str
    data: str
    type: Literal["skipped"] = field(default="skipped", init=False)


@dataclass(frozen=True, slots=True)
class Reset:
    """A new generation replaces what was shown so far (restart after a failure)."""

    key: str
    attempt: int
    reason: str
    type: Literal["reset"] = field(default="reset", init=False)


@dataclass(frozen=True, slots=True)
class Handoff:
    """The reply moves to another upstream (see :class:`fluxstream._upstream.Upstream`).

    Skippable: the text events after it go on at ``offset`` (choice 0's text delivered so
    far), so a renderer writing ``buf[offset:]`` needs nothing from it. ``reason`` says what
    happened to the one before (``"dropped: ..."``, ``"503 ..."``, ``"first token
    timeout"``); ``restarted`` is true when the reply could not be continued there (a cut
    inside a tool call's arguments): a :class:`Reset` follows and the new upstream starts
    the reply over.
    """

    key: str
    upstream: str
    api: str
    model: str | None
    reason: str
    offset: int
    restarted: bool = False
    type: Literal["handoff"] = field(default="handoff", init=False)


@dataclass(frozen=True, slots=True)
class End:
    """The stream ended; exactly one per stream, always the last event."""

    outcome: Outcome
    reason: str | None
    type: Literal["end"] = field(default="end", init=False)


#: The union of every event, discriminated by ``type`` so that ``pydantic.TypeAdapter(Event)``
#: validates a dumped event back into the right class (a plain union would pick the first class
#: whose fields fit, e.g. a ``TextDelta`` for a dumped ``ReasoningDelta``). For static typing
#: ``Annotated`` is transparent: ``Event`` is the ``Union``.
Event = Annotated[
    Union[  # noqa: UP007 - the contract spells it Union[...]; same type as X | Y
        TextDelta,
        ReasoningDelta,
        RefusalDelta,
        ToolCallDelta,
        ToolCallDone,
        Finish,
        ReasoningBlock,
        UsageUpdate,
        ErrorEvent,
        SkippedFrame,
        Reset,
        Handoff,
        End,
        PathStart,
        PathDelta,
        PathDone,
    ],
    Field(discriminator="type"),
]

#: Alias of :data:`Event` (kept for readability where the discriminator matters).
TypedEvent = Event
