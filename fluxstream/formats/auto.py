"""``format="auto"``: recognise the wire format from the first event that names one, then
step aside.

The three formats are told apart by what each event announces plainly:

* Anthropic Messages: ``type`` (or the ``event:`` line) is one of ``message_start``,
  ``content_block_*``, ``message_delta`` or ``message_stop``;
* OpenAI Responses: ``type`` (or the ``event:`` line) starts with ``response.``;
* Chat Completions: a ``choices`` list, ``object`` ``chat.completion[.chunk]``, or no ``type``
  key at all (the only untyped format).

Keep-alives name no format: ``ping`` and ``keepalive`` (as ``event:`` or ``type``; Anthropic
sends ``ping``, but a proxy may send it before any stream), an empty ``{}``; they count as
heartbeats and the decision waits. Errors name none either (every format can open with one:
``event: error``, ``{"type": "error"}``, ``{"error": ...}``, ``{"object": "error"}``): each is
recorded as the reply's error, so the stream ends ``failed`` as under the named formats, and
the decision waits. A payload whose ``type`` is not a string, or names nothing known, is
skipped and counted (the named formats skip it too). ``[DONE]`` first means Chat
Completions; a first payload only ``json.loads`` decodes (a lone UTF-16 surrogate half)
decides like any other; a big frame full of tiny objects is refused before it is decoded
(:func:`~fluxstream.formats._base.too_many_objects`). :func:`identify` says which format one
event belongs to, for tools that tell a user a stream is of another format. Once decided,
every call goes straight to the chosen format; the parser reads the chosen format's state
through the properties below. Resumed from a token (:meth:`StreamParser.from_token`), the
token's wire state names the format that wrote it, which is chosen at once, and its
``sequence`` / ``response_id`` / state are handed over, so a resumed ``auto`` stream goes on
exactly as a named one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import pydantic_core

from ..errors import FrameDecodeError
from ..events import ErrorEvent, Event, SkippedFrame
from ..limits import DEFAULT_STREAM_LIMITS, StreamLimits
from ..sse import ServerSentEvent
from ._base import KEEPALIVES, JsonEventFormat, crowded, error_event, named_format
from ._surrogates import fallback_loads
from .anthropic_messages import AnthropicMessagesFormat
from .chat_completions import ChatCompletionsFormat
from .responses import ResponsesFormat

__all__ = ["AutoFormat", "WireFormat", "detect", "identify"]

_CHAT_OBJECTS = ("chat.completion.chunk", "chat.completion")


class WireFormat(Protocol):
    """The interface :class:`~fluxstream.parser.StreamParser` drives (every format has it)."""

    id: str | None
    model: str | None

    @property
    def done(self) -> bool: ...
    @property
    def done_reason(self) -> str | None: ...
    @property
    def cut(self) -> bool: ...
    @property
    def skipped(self) -> int: ...
    @property
    def heartbeats(self) -> int: ...
    @property
    def new_choices(self) -> list[int]: ...


    def feed(self, sse: ServerSentEvent, *, at_eof: bool = False) -> list[Event]: ...
    def feed_chunk(self, obj: Mapping[str, Any]) -> list[Event]: ...
    def feed_completion(self, obj: Mapping[str, Any]) -> list[Event]: ...
    def reset(self) -> None: ...
    def restore(self, offsets: dict[str, Any], calls: dict[int, dict[int, tuple[Any, Any]]],
                finishes: dict[int, str | None]) -> None: ...
    def shift_text(self, choice: int, by: int) -> None: ...


def detect(event: str, obj: Mapping[str, Any] | None) -> str | None:
    """The format name an event (its ``event:`` name and decoded payload) belongs to, or
    ``None`` when it names none: keep-alives, errors, a ``type`` that is not a string or
    names nothing known (see the module docstring)."""
    kind = obj.get("type") if obj is not None else None
    name = named_format(kind) or named_format(event)
    if name is not None or obj is None:
        return name
    if "choices" in obj or obj.get("object") in _CHAT_OBJECTS:
        return "chat_completions"
    if (
        "type" not in obj
        and obj
        and event not in KEEPALIVES
        and event != "error"
        and "error" not in obj
        and obj.get("object") != "error"
    ):
        return "chat_completions"
    return None


def identify(sse: ServerSentEvent) -> str | None:
    """The format one SSE event belongs to (``"chat_completions"``, ``"responses"``,
    ``"anthropic_messages"``), or ``None`` when it names none: keep-alives, errors, comments
    of the data kind (empty data), payloads that are not JSON objects or not of a known
    shape, and big frames full of tiny objects (refused undecoded, as the formats refuse
    them). ``[DONE]`` is Chat Completions' sentinel.

    For tools that read a recorded stream in a named format and want to say when its frames
    are of another (those frames are counted in ``reply.skipped_frames``)."""
    data = sse.data
    stripped = data.strip()
    if not stripped:
        return None
    if stripped == "[DONE]":
        return "chat_completions"
    if crowded(data):
        return None
    try:
        obj = pydantic_core.from_json(data)
    except ValueError:
        obj = fallback_loads(data)
    return detect(sse.event, obj if isinstance(obj, dict) else None)


def detect_body(obj: Mapping[str, Any]) -> str:
    """The format of a whole non-streaming body."""
    if "choices" in obj or obj.get("object") in ("chat.completion", "error"):
        return "chat_completions"
    if obj.get("object") == "response" or "output" in obj:
        return "responses"
    if obj.get("type") in ("message", "error") or "stop_reason" in obj:
        return "anthropic_messages"
    return "chat_completions"


_CLASSES: dict[str, type[ChatCompletionsFormat] | type[JsonEventFormat]] = {
    "chat_completions": ChatCompletionsFormat,
    "responses": ResponsesFormat,
    "anthropic_messages": AnthropicMessagesFormat,
}


class AutoFormat:
    """Sans-IO: a format that becomes Chat Completions, Responses or Anthropic Messages on the
    first event that says which (see the module docstring). :attr:`name` is the decision."""

    __slots__ = ("_cut", "_errored", "_heartbeats", "_id", "_model", "_new", "_restore",
                 "_skipped", "_wire_state", "inner", "key", "limits", "name", "response_id",
                 "sequence", "strict")

    def __init__(self, key: str, *, strict: bool = False) -> None:
        self.key = key
        self.strict = strict
        #: Set by the parser; handed to the chosen format when it caps its own state.
        self.limits: StreamLimits = DEFAULT_STREAM_LIMITS
        self.name: str | None = None
        self.inner: WireFormat | None = None
        self._skipped = 0
        self._heartbeats = 0
        #: An error arrived before the choice (handed on: Responses keeps the first one).
        self._errored = False
        self._cut = False
        self._id: str | None = None
        self._model: str | None = None
        self._new: list[int] = []
        self._restore: tuple[Any, Any, Any] | None = None
        # What StreamParser.from_token gives the wire format (it reads and writes these on the
        # format ``auto`` chose, and on this object before a choice): kept until the choice,
        # then handed over, so a resumed ``auto`` stream goes on exactly as a named one.
        #: Responses ``starting_after`` (``-1``: none).
        self.sequence = -1
        self.response_id: str | None = None
        self._wire_state: Any = None

    def _choose(self, name: str) -> WireFormat:
        inner: WireFormat = _CLASSES[name](self.key, strict=self.strict)
        if hasattr(inner, "limits"):
            capped: Any = inner
            capped.limits = self.limits
        inner.id, inner.model = self._id, self._model
        inner.new_choices.extend(self._new)
        if self._restore is not None:
            inner.restore(*self._restore)
        wire: Any = inner
        if self.sequence >= 0 and hasattr(wire, "sequence"):
            wire.sequence = self.sequence
        if self.response_id is not None and hasattr(wire, "response_id"):
            wire.response_id = self.response_id
        if self._wire_state is not None and hasattr(wire, "restore_state"):
            wire.restore_state(self._wire_state)
        if self._errored and hasattr(wire, "errored_before"):
            wire.errored_before()
        self.name, self.inner = name, inner
        return inner

    # ------------------------------------------------------------------ feeding

    def feed(self, sse: ServerSentEvent, *, at_eof: bool = False) -> list[Event]:
        inner = self.inner
        if inner is not None:
            return inner.feed(sse, at_eof=at_eof)
        data = sse.data
        event = sse.event
        name = detect(event, None)
        if name is None:
            stripped = data.strip()
            if stripped == "[DONE]":
                return self._choose("chat_completions").feed(sse, at_eof=at_eof)
            if not stripped:
                return []
            if crowded(data):
                return self._bad(data, "more JSON objects than an event of its size holds",
                                 at_eof)
            try:
                obj = pydantic_core.from_json(data)
            except ValueError as exc:
                # Lone UTF-16 surrogate halves (an emoji cut by a Node server in the very
                # first chunk): json.loads decodes them and the chosen format joins them.
                obj = fallback_loads(data)
                if not isinstance(obj, dict):
                    if event == "error" and not at_eof:  # every format: an error, as text
                        return self._error(ErrorEvent(data, None, None, None, data))
                    return self._bad(data, f"invalid JSON: {exc}", at_eof)
            if not isinstance(obj, dict):
                return self._bad(data, "not a JSON object", False)
            name = detect(event, obj)
            if name is None:
                return self._undecided(event, obj)
        return self._choose(name).feed(sse, at_eof=at_eof)

    def feed_chunk(self, obj: Mapping[str, Any]) -> list[Event]:
        inner = self.inner
        if inner is not None:
            return inner.feed_chunk(obj)
        name = detect("", obj)
        if name is None:
            return self._undecided("", obj)
        return self._choose(name).feed_chunk(obj)

    def feed_completion(self, obj: Mapping[str, Any]) -> list[Event]:
        inner = self.inner or self._choose(detect_body(obj))
        return inner.feed_completion(obj)

    def _undecided(self, event: str, obj: Mapping[str, Any]) -> list[Event]:
        """A payload that names no format: a keep-alive, an error, or a frame to skip."""
        kind = obj.get("type")
        if not obj and event in ("", "message"):
            return []  # ``data: {}``: a proxy's keep-alive (Chat Completions ignores it too)
        if event in KEEPALIVES or (kind.__class__ is str and kind in KEEPALIVES):
            self._heartbeats += 1
            return []
        if event == "error" or kind == "error" or "error" in obj or obj.get("object") == "error":
            return self._error(error_event(obj, obj))
        self._skipped += 1
        return [SkippedFrame(f"unknown event type {kind!r}", str(obj)[:200])]

    def _error(self, error: ErrorEvent) -> list[Event]:
        """An error before the format is known: the reply's error (the stream ends
        ``failed``), and the decision waits. No choice is started for it: the format chosen
        later starts its own, as it would have."""
        self._errored = True
        return [error]

    def _bad(self, data: str, reason: str, at_eof: bool) -> list[Event]:
        if at_eof:
            self._cut = True
            return []
        if self.strict:
            raise FrameDecodeError(reason, data)
        self._skipped += 1
        return [SkippedFrame(reason, data[:200])]

    # ------------------------------------------------------------------ resume hooks

    def reset(self) -> None:
        if self.inner is not None:
            self.inner.reset()
        self._cut = False
        self._new = []

    def restore(self, offsets: dict[str, Any], calls: dict[int, dict[int, tuple[Any, Any]]],
                finishes: dict[int, str | None]) -> None:
        if self.inner is not None:
            self.inner.restore(offsets, calls, finishes)
        else:
            self._restore = (offsets, calls, finishes)

    def shift_text(self, choice: int, by: int) -> None:
        if self.inner is not None:
            self.inner.shift_text(choice, by)

    def resume_state(self) -> Any:
        """Before a choice: the wire state a token gave (handed on by a token of a token)."""
        return self._wire_state if isinstance(self._wire_state, Mapping) else {}

    def restore_state(self, state: Any) -> None:
        """A token's wire state. It names the format that wrote it (Anthropic's has the open
        ``blocks``, Responses' the streamed ``parts``), which is chosen at once: a resumed
        stream's first event may be one that decides nothing or the wrong thing (a ``ping``,
        a ``{}``). Otherwise (Chat Completions writes none) the first event decides."""
        if self.inner is not None:
            hook = getattr(self.inner, "restore_state", None)
            if hook is not None:
                hook(state)
            return
        self._wire_state = state
        if isinstance(state, Mapping):
            if isinstance(state.get("blocks"), Mapping):
                self._choose("anthropic_messages")
            elif isinstance(state.get("parts"), list) or self.sequence >= 0:
                self._choose("responses")

    def new_connection(self) -> None:
        """Passed on to the chosen format (Anthropic restates ``message_start``)."""
        hook = getattr(self.inner, "new_connection", None)
        if hook is not None:
            hook()

    # ------------------------------------------------------------------ state the parser reads

    @property
    def id(self) -> str | None:
        return self.inner.id if self.inner is not None else self._id

    @id.setter
    def id(self, value: str | None) -> None:
        if self.inner is not None:
            self.inner.id = value
        self._id = value

    @property
    def model(self) -> str | None:
        return self.inner.model if self.inner is not None else self._model

    @model.setter
    def model(self, value: str | None) -> None:
        if self.inner is not None:
            self.inner.model = value
        self._model = value

    @property
    def done(self) -> bool:
        return self.inner is not None and self.inner.done

    @property
    def done_reason(self) -> str | None:
        return self.inner.done_reason if self.inner is not None else None

    @property
    def cut(self) -> bool:
        return self._cut or (self.inner is not None and self.inner.cut)

    @property
    def skipped(self) -> int:
        return self._skipped + (self.inner.skipped if self.inner is not None else 0)

    @property
    def heartbeats(self) -> int:
        return self._heartbeats + (self.inner.heartbeats if self.inner is not None else 0)

    @property
    def new_choices(self) -> list[int]:
        return self.inner.new_choices if self.inner is not None else self._new
