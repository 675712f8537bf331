"""``format="auto"``: recognise the wire format from the first event that names one, then
step aside.

Auto knows no format's shape: it asks every format registered in
:data:`~fluxstream.formats.FORMATS` how sure it is that the event is its own
(:meth:`~fluxstream.formats._base.FormatBase.claims`, a :class:`~._contract.Claim`) and takes
the surest (the first registered on a tie). An event's own ``type`` outranks its ``event:``
line, which outranks the untyped shape of Chat Completions (the only format whose events have
no ``type``). A whole body is decided the same way (``claims_body``), and a stream's sentinel
(``[DONE]``) by the format that declares it (``sentinel``). A new format is recognised as soon
as it is registered.

What no format claims decides nothing: keep-alives (``ping`` and ``keepalive``, as ``event:``
or ``type``; Anthropic sends ``ping``, but a proxy may send it before any stream) and an empty
``{}`` count as heartbeats and the decision waits. Errors name no format either (every format
can open with one: ``event: error``, ``{"type": "error"}``, ``{"error": ...}``, ``{"object":
"error"}``): each is recorded as the reply's error, so the stream ends ``failed`` as under the
named formats, and the decision waits. Any other payload no format claims (a ``type`` that is
not a string, or names nothing known) is skipped and counted (the named formats skip it too);
a whole body that is no format's reply object nor an error (a catch-all route's echo) ends
the reply ``failed``, as under a named format (``reads_body``). A first payload only ``json.loads``
decodes (a lone UTF-16 surrogate half) decides like any other; a big frame full of tiny objects
is refused before it is decoded (:func:`~fluxstream.formats._base.crowded`).
:func:`identify` says which format one event belongs to, for tools that tell a user a stream is
of another format.

Once decided, every call goes straight to the chosen format. Resumed from a token
(:meth:`StreamParser.from_token`), the token's wire state names the format that wrote it
(``claims_state``), which is chosen at once, and its position and state are handed over, so a
resumed ``auto`` stream goes on exactly as a named one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import pydantic_core

from .._events import ErrorEvent, Event
from .._limits import DEFAULT_STREAM_LIMITS, StreamLimits
from ..sse import ServerSentEvent
from ._base import KEEPALIVES, Detection, FormatBase, crowded, error_event, is_error_object
from ._contract import FORMATS, Claim, WireFormat
from ._surrogates import fallback_loads

__all__ = ["AutoFormat", "WireFormat", "detect", "detect_body", "identify"]


def _surest(claims: Iterable[tuple[str, Claim]]) -> str | None:
    """The name with the strongest claim (the first on a tie); ``None`` if none claims."""
    best, chosen = Claim.NO, None
    for name, claim in claims:
        if claim > best:
            best, chosen = claim, name
    return chosen


def detect(event: str, obj: Mapping[str, Any] | None) -> str | None:
    """The format name an event (its ``event:`` name and decoded payload; ``None``: not
    decoded yet) belongs to, or ``None`` when no registered format claims it: keep-alives,
    errors, a ``type`` that is not a string or names nothing known."""
    return _surest((name, cls.claims(event, obj)) for name, cls in FORMATS.items())


def detect_body(obj: Mapping[str, Any]) -> str | None:
    """The format of a whole non-streaming body (``None``: no registered format claims it)."""
    return _surest((name, cls.claims_body(obj)) for name, cls in FORMATS.items())


def _by_sentinel(data: str) -> str | None:
    """The format whose stream ends with this data line (``[DONE]``: Chat Completions)."""
    return next((name for name, cls in FORMATS.items() if cls.sentinel == data), None)


def identify(sse: ServerSentEvent) -> str | None:
    """The format one SSE event belongs to (``"chat_completions"``, ``"responses"``,
    ``"anthropic_messages"``), or ``None`` when it names none: keep-alives, errors, comments
    of the data kind (empty data), payloads that are not JSON objects or not of a known
    shape, and big frames full of tiny objects (refused undecoded, as the formats refuse
    them). A format's sentinel (``[DONE]``) names it.

    For tools that read a recorded stream in a named format and want to say when its frames
    are of another (those frames are counted in ``reply.skipped_frames``)."""
    data = sse.data
    stripped = data.strip()
    if not stripped:
        return None
    by_sentinel = _by_sentinel(stripped)
    if by_sentinel is not None:
        return by_sentinel
    if crowded(data):
        return None
    try:
        obj = pydantic_core.from_json(data)
    except ValueError:
        obj = fallback_loads(data)
    return detect(sse.event, obj if isinstance(obj, dict) else None)


class _Undecided(FormatBase):
    """Auto's own state before a format is chosen: keep-alives, skipped frames and a cut end
    counted (with :class:`FormatBase`'s rules), the reply's id and model if a token gave
    them, and whether an error came first."""

    __slots__ = ("errored",)

    def __init__(self, key: str, *, strict: bool, limits: StreamLimits) -> None:
        super().__init__(key, strict=strict, limits=limits)
        #: An error arrived before the choice (handed on: Responses keeps the first one).
        self.errored = False



class AutoFormat(Detection):
    """Sans-IO: a format that becomes one of the registered formats on the first event that
    says which (see the module docstring). :attr:`name` is the decision, :attr:`inner` the
    chosen format."""

    #: It may become a format whose stream carries a re-read position.
    rereads: ClassVar[bool] = True

    # Registered so that ``format="auto"`` is a name; it claims nothing itself (Detection).
    __slots__ = ("_before", "_position", "_restore", "_wire_state", "inner", "key", "limits",
                 "name", "strict")

    @classmethod
    def reads_body(cls, body: Mapping[str, Any]) -> bool:
        """A whole body that the format it names reads (see :func:`detect_body`)."""
        name = detect_body(body)
        return name is not None and FORMATS[name].reads_body(body)

    def __init__(self, key: str, *, strict: bool = False,
                 limits: StreamLimits = DEFAULT_STREAM_LIMITS) -> None:
        # Handed to the chosen format (``limits``: it caps its own state by them).
        self.key, self.strict, self.limits = key, strict, limits
        self.name: str | None = None
        self.inner: WireFormat | None = None
        self._before = _Undecided(key, strict=strict, limits=limits)
        # What StreamParser.from_token gives the wire format, kept until the choice and then
        # handed over, so a resumed ``auto`` stream goes on exactly as a named one.
        self._restore: tuple[Any, Any, Any] | None = None
        self._position: tuple[int | None, str | None] = (None, None)
        self._wire_state: Any = None

    def _choose(self, name: str) -> WireFormat:
        inner = FORMATS[name](self.key, strict=self.strict, limits=self.limits)
        before = self._before
        inner.id, inner.model = before.id, before.model
        inner.new_choices.extend(before.new_choices)
        if self._restore is not None:
            inner.restore(*self._restore)
        inner.restore_position(*self._position)
        if self._wire_state is not None:
            inner.restore_state(self._wire_state)
        if before.errored:
            inner.errored_before()
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
            if not stripped:
                return []
            name = _by_sentinel(stripped)
        if name is None:
            before = self._before
            if before.refuses_undecoded(data):
                return before.bad_frame(data, before.crowded_reason, at_eof)
            try:
                obj = pydantic_core.from_json(data)
            except ValueError as exc:
                # Lone UTF-16 surrogate halves (an emoji cut by a Node server in the very
                # first chunk): json.loads decodes them and the chosen format joins them.
                obj = fallback_loads(data)
                if not isinstance(obj, dict):
                    if event == "error" and not at_eof:  # every format: an error, as text
                        return self._error(ErrorEvent(data, None, None, None, data))
                    return before.bad_frame(data, f"invalid JSON: {exc}", at_eof)
            if not isinstance(obj, dict):
                return before.bad_frame(data, "not a JSON object", False)
            name = detect(event, obj)
            if name is None:
                return self._undecided(event, obj)
        return self._choose(name).feed(sse, at_eof=at_eof)

    def feed_many(self, sses: list[ServerSentEvent], out: list[Event]) -> None:
        """One by one until a format is chosen, then the rest in one call to it."""
        for position, sse in enumerate(sses):
            inner = self.inner
            if inner is not None:
                inner.feed_many(sses[position:], out)
                return
            out += self.feed(sse)

    def feed_chunk(self, obj: Mapping[str, Any]) -> list[Event]:
        inner = self.inner
        if inner is not None:
            return inner.feed_chunk(obj)
        name = detect("", obj)
        if name is None:
            return self._undecided("", obj)
        return self._choose(name).feed_chunk(obj)

    def feed_completion(self, obj: Mapping[str, Any]) -> list[Event]:
        inner = self.inner
        if inner is None:
            name = detect_body(obj)
            if name is None or not FORMATS[name].reads_body(obj):
                return self._before.no_reply(obj)  # no format's reply: it ends failed
            inner = self._choose(name)
        return inner.feed_completion(obj)

    def _undecided(self, event: str, obj: Mapping[str, Any]) -> list[Event]:
        """A payload that names no format: a keep-alive, an error, or a frame to skip."""
        kind = obj.get("type")
        if not obj and event in ("", "message"):
            return []  # ``data: {}``: a proxy's keep-alive (Chat Completions ignores it too)
        if event in KEEPALIVES or (kind.__class__ is str and kind in KEEPALIVES):
            self._before.heartbeats += 1
            return []
        if event == "error" or is_error_object(obj):
            return self._error(error_event(obj, obj))
        return self._before.skip(f"unknown event type {kind!r}", obj)

    def _error(self, error: ErrorEvent) -> list[Event]:
        """An error before the format is known: the reply's error (the stream ends
        ``failed``), and the decision waits. No choice is started for it: the format chosen
        later starts its own, as it would have."""
        self._before.errored = True
        return [error]

    # ------------------------------------------------------------------ connections

    def reset(self) -> None:
        if self.inner is not None:
            self.inner.reset()
        self._before.reset()

    def new_connection(self) -> None:
        if self.inner is not None:
            self.inner.new_connection()

    def feed_lines(self, lines: list[str]) -> list[Event]:
        return self.inner.feed_lines(lines) if self.inner is not None else []

    def body_ended(self, clean: bool) -> list[Event]:
        return self.inner.body_ended(clean) if self.inner is not None else []

    def continued(self) -> None:
        if self.inner is not None:
            self.inner.continued()

    def errored_before(self) -> None:
        self._before.errored = True

    # ------------------------------------------------------------------ resume tokens

    def restore(self, offsets: dict[str, Any], calls: dict[int, dict[int, tuple[Any, Any]]],
                finishes: dict[int, str | None]) -> None:
        if self.inner is not None:
            self.inner.restore(offsets, calls, finishes)
        else:
            self._restore = (offsets, calls, finishes)

    def shift_text(self, choice: int, by: int) -> None:
        if self.inner is not None:
            self.inner.shift_text(choice, by)

    def resume_sequence(self) -> int | None:
        return self.inner.resume_sequence() if self.inner is not None else self._position[0]

    def restore_position(self, sequence: int | None, response_id: str | None) -> None:
        if self.inner is not None:
            self.inner.restore_position(sequence, response_id)
        else:
            self._position = (sequence, response_id)

    def resume_state(self) -> dict[str, Any] | None:
        """Before a choice: the wire state a token gave (handed on by a token of a token)."""
        if self.inner is not None:
            return self.inner.resume_state()
        return dict(self._wire_state) if isinstance(self._wire_state, Mapping) else {}

    def restore_state(self, state: Any) -> None:
        """A token's wire state. The format that wrote it claims it (Anthropic's has the open
        ``blocks``, Responses' the streamed ``parts``) and is chosen at once: a resumed
        stream's first event may be one that decides nothing or the wrong thing (a ``ping``,
        a ``{}``). Otherwise (Chat Completions writes none) the first event decides."""
        if self.inner is not None:
            self.inner.restore_state(state)
            return
        self._wire_state = state
        if isinstance(state, Mapping):
            sequence = self._position[0]
            name = _surest((name, cls.claims_state(state, sequence))
                           for name, cls in FORMATS.items())
            if name is not None:
                self._choose(name)

    # ------------------------------------------------------------------ state the parser reads

    @property
    def _current(self) -> WireFormat | FormatBase:
        return self._before if self.inner is None else self.inner

    @property
    def id(self) -> str | None:
        return self._current.id

    @id.setter
    def id(self, value: str | None) -> None:
        self._before.id = self._current.id = value

    @property
    def model(self) -> str | None:
        return self._current.model

    @model.setter
    def model(self, value: str | None) -> None:
        self._before.model = self._current.model = value

    @property
    def response_id(self) -> str | None:
        return self.inner.response_id if self.inner is not None else self._position[1]

    @property
    def done(self) -> bool:
        return self._current.done

    @property
    def done_reason(self) -> str | None:
        return self._current.done_reason

    @property
    def cut(self) -> bool:
        return self._before.cut or (self.inner is not None and self.inner.cut)

    @property
    def skipped(self) -> int:
        return self._before.skipped + (self.inner.skipped if self.inner is not None else 0)

    @property
    def heartbeats(self) -> int:
        return self._before.heartbeats + (self.inner.heartbeats if self.inner is not None else 0)

    @property
    def new_choices(self) -> list[int]:
        return self._current.new_choices
