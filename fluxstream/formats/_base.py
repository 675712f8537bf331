"""The shared foundation of the wire formats.

:class:`FormatBase` is what every format is built on: the state the parser reads, the default
of every hook of the format contract (:class:`~fluxstream.formats._contract.WireFormat`),
skipping and counting bad frames, and the memory guard each frame passes before it is decoded.
The helpers below are shared too: the bounds every format reads numbers and kept data by, the
vocabularies that name no format, error payloads and a skipped frame's excerpt.

What else every format shares has a module of its own: the fast event makers
(:mod:`._event_makers`), a frame's usage checked and normalized (:mod:`._usage_fields`), what
a format keeps per choice (:mod:`._choice_state`), and the base of the event-typed formats
(:mod:`._json_event`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec

from .._events import ErrorEvent, Event, SkippedFrame
from .._limits import DEFAULT_STREAM_LIMITS, StreamLimits
from .._wire import Usage
from ..errors import FrameDecodeError
from ..sse import ServerSentEvent
from ._contract import Claim
from ._surrogates import fix_surrogates
from ._usage_fields import USAGE_DROPPED, checked_usage_model

__all__ = [
    "BIG_FRAME",
    "KEEPALIVES",
    "MAX_KEPT_CHARS",
    "MAX_SEQUENCE",
    "Detection",
    "FormatBase",
    "QUICK_DECODE_ERRORS",
    "approx_size",
    "compact",
    "crowded",
    "error_event",
    "excerpt",
    "is_error_object",
    "opt_str",
    "quick_candidate",
    "too_many_objects",
]

_EXCERPT = 200
#: Sequence numbers (and wire indices) at or past this, or negative, are not used: one absurd
#: number would make every later event look delivered already, and a resume token could not
#: carry it (JSON numbers stay exact below it; a number of thousands of digits would not
#: even format into a ``starting_after`` query). The Responses format, the parser's resume
#: state and the re-read's check all read numbers by this one bound.
MAX_SEQUENCE = 2**53
#: Characters of never-shown provider data (thinking signatures, redacted thinking, reasoning
#: items) kept per stream. It is not part of the reply's text, so ``max_reply_chars`` does not
#: bound it; this does (real streams keep kilobytes).
MAX_KEPT_CHARS = 32 * 1024 * 1024


def compact(value: object) -> str:
    """Compact JSON, as a provider would stream it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def approx_size(value: object) -> int:
    """Characters of ``value`` as compact JSON (its ``repr`` when it is not JSON)."""
    try:
        return len(compact(value))
    except (TypeError, ValueError):
        return len(repr(value))


# --------------------------------------------------------------------------- vocabularies

#: In-band keep-alives (an ``event:`` name or a payload's ``type``): Anthropic's ``ping``, the
#: ``keepalive`` some Responses servers send. They name no format.
KEEPALIVES = frozenset({"ping", "keepalive"})


def is_error_object(obj: Mapping[str, Any]) -> bool:
    """An error object of any API: ``{"error": ...}`` (OpenAI's, Gemini's, a proxy's),
    ``{"object": "error"}`` (OpenAI-style servers) or ``{"type": "error"}`` (Anthropic's).
    Every format can open with one, so none names a format."""
    return "error" in obj or obj.get("type") == "error" or obj.get("object") == "error"


# --------------------------------------------------------------------------- memory guard

#: Frames above this many characters are checked before they are decoded.
BIG_FRAME = 64 * 1024
#: Characters per JSON object or array (outside strings) below which a big frame of an
#: event-typed format is refused. Decoding costs ~70 bytes per empty container and ~200 per
#: small object, so a frame of ``{}`` costs ~24 times its size; at this density at most ~12.
#: The densest real events, per-token logprobs with their alternatives in a terminal event,
#: have over 20 characters per container.
MIN_CHARS_PER_OBJECT = 16
#: A JSON string (escapes included), from its opening quote to its closing one, if any. The
#: closing quote is optional so that a string that never ends is found by one linear scan:
#: required, a failed match was tried again from every later quote (a string of escaped
#: quotes that never ends cost quadratic time).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(")?')


def too_many_objects(data: str, most: int) -> bool:
    """More than ``most`` JSON objects and arrays in ``data``, counted before decoding it.

    The brackets are counted at C speed; only when there are too many are those inside
    strings taken off, string by string (an argument string may spell thousands of objects
    and still decode to one string), stopping as soon as the rest fit. No copy of ``data``
    is made and at most one string per 64 characters is looked at: the guard must not cost
    what it guards against (a frame of millions of short strings between its objects). A
    string that never ends makes the frame invalid JSON: it is refused there (decoding it
    would build every object before it first)."""
    excess = data.count("{") + data.count("[") - most
    if excess <= 0:
        return False
    budget = max(4096, len(data) // 64)
    count = data.count
    for match in _STRING.finditer(data):
        if match.group(1) is None:
            return True
        start, end = match.span()
        excess -= count("{", start, end) + count("[", start, end)
        if excess <= 0:
            return False
        budget -= 1
        if not budget:
            return True
    return True


def crowded(data: str) -> bool:
    """A frame of an event-typed format to refuse undecoded: over :data:`BIG_FRAME`
    characters with fewer than :data:`MIN_CHARS_PER_OBJECT` characters per object or array
    outside its strings. Every reader of such frames (the formats, ``auto``, the resume
    checks) asks this one question, so that none decodes what the others refuse."""
    return len(data) > BIG_FRAME and too_many_objects(data, len(data) // MIN_CHARS_PER_OBJECT)


#: ``from_json`` (the general path's decoder) stops at this depth; msgspec goes to ~1,000.
_MAX_DEPTH = 200
#: A frame of at most this many characters cannot nest deeper than :data:`_MAX_DEPTH`.
_SHALLOW = 2 * _MAX_DEPTH + 1
#: What a typed msgspec decode raises on anything it does not take (a ``ValueError``).
QUICK_DECODE_ERRORS = (msgspec.DecodeError,)


def quick_candidate(data: str) -> bool:
    """A frame a typed msgspec decode may take in place of the general path's ``from_json``:
    an object, not big enough for the memory guard, and unable to nest deeper than
    ``from_json`` allows (msgspec would decode what ``from_json`` refuses; more than
    :data:`_MAX_DEPTH` brackets in a longer frame sends it to the general path, which decides).
    Whatever msgspec decodes of such a frame, ``from_json`` decodes to the same values
    (``tests/formats/test_fast_paths.py``, ``tests/formats/test_json_event_feed_many.py``,
    ``tests/formats/test_gemini_quick.py``)."""
    return (
        data[:1] == "{"
        and len(data) <= BIG_FRAME
        and (len(data) <= _SHALLOW or data.count("{") + data.count("[") <= _MAX_DEPTH)
    )


def opt_str(value: object) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)




def error_event(payload: object, raw: object) -> ErrorEvent:
    """An :class:`ErrorEvent` from an error payload: ``{"message": ...}`` at the top level or
    under ``"error"`` (OpenAI documents the flat shape and sends the nested one; Anthropic
    nests it), or a bare string."""
    if isinstance(payload, Mapping):
        inner = payload.get("error")
        if isinstance(inner, Mapping):
            payload = inner
        elif isinstance(inner, str) and inner and not payload.get("message"):
            return ErrorEvent(inner, None, None, None, raw)
        message = payload.get("message")
        if not isinstance(message, str) or not message:
            message = compact(dict(payload)) if message is None else str(message)
        kind = payload.get("type")
        return ErrorEvent(
            message,
            opt_str(payload.get("code")),
            None if kind == "error" else opt_str(kind),
            opt_str(payload.get("param")),
            raw,
        )
    return ErrorEvent(str(payload) or "error event", None, None, None, raw)



# --------------------------------------------------------------------------- every format


def excerpt(frame: object) -> str:
    """A skipped frame as :class:`~fluxstream._events.SkippedFrame` shows it: its first
    characters (compact JSON for a decoded frame), never holding a lone surrogate."""
    if not isinstance(frame, str):
        try:
            frame = compact(frame)
        except (TypeError, ValueError, RecursionError):
            frame = object.__repr__(frame)
    return fix_surrogates(frame[:_EXCERPT])


class Detection:
    """A registered class's detection rules (see
    :class:`~fluxstream.formats._contract.FormatClass`): by default it claims nothing."""

    __slots__ = ()

    #: The data line that ends the format's streams, if it has one (it names the format).
    sentinel: ClassVar[str | None] = None
    #: Whether the stream carries a re-read position (a sequence number, a response id):
    #: a resume token holding one names a format that does.
    rereads: ClassVar[bool] = False

    @classmethod
    def claims(cls, event: str, payload: Mapping[str, Any] | None) -> Claim:
        """How sure the format is that an SSE event is its own (see :class:`Claim`)."""
        return Claim.NO

    @classmethod
    def claims_body(cls, body: Mapping[str, Any]) -> Claim:
        """How sure the format is that a whole non-streaming body is its own."""
        return Claim.NO

    #: What a whole body of this format is, for the error that says a body is not one.
    reply_shape: ClassVar[str] = "a reply object of a known format"

    @classmethod
    def reads_body(cls, body: Mapping[str, Any]) -> bool:
        """Whether a whole non-streaming body is one this format reads: its own reply object
        (a claim of :attr:`Claim.LIKELY` or surer: ``choices``, ``output``, a ``message``,
        ``candidates``), or an error object (:func:`is_error_object`). Anything else is no
        reply, whatever its status says: a catch-all route's echo of the request (a base URL
        missing its API prefix), a health check's ``{"status": "ok"}``. Read as a reply it
        was a successful empty one."""
        return cls.claims_body(body) >= Claim.LIKELY or is_error_object(body)

    @classmethod
    def claims_state(cls, state: Mapping[str, Any], sequence: int | None) -> Claim:
        """How sure the format is that it wrote a resume token's wire state."""
        return Claim.NO


class FormatBase(Detection):
    """What every format shares: the state the parser reads, the defaults of the hooks a
    format without the feature needs (:class:`~fluxstream.formats._contract.WireFormat`
    lists them all), skipping and counting, and the memory guard every frame passes before
    it is decoded.

    :param key: the content key stamped on every keyed event.
    :param strict: raise :class:`~fluxstream.errors.FrameDecodeError` on a data frame that is
        not a JSON object, instead of skipping and counting it.
    :param limits: caps on server-controlled input (:class:`~fluxstream._limits.StreamLimits`):
        a tool call past ``max_tool_calls`` (or a choice past ``max_choices``) raises
        :class:`~fluxstream.errors.LimitExceededError` before the format keeps anything of it.
    """

    __slots__ = ("cut", "done", "done_reason", "heartbeats", "id", "key", "limits", "model",
                 "new_choices", "skipped", "strict")

    #: Only formats with a ``starting_after`` re-read have one (see ``WireFormat``).
    response_id: str | None = None
    #: Why a big frame was refused undecoded (see :meth:`refuses_undecoded`).
    crowded_reason: ClassVar[str] = "more JSON objects than an event of its size holds"

    def __init__(self, key: str, *, strict: bool = False,
                 limits: StreamLimits = DEFAULT_STREAM_LIMITS) -> None:
        self.key = key
        self.strict = strict
        self.limits = limits
        self.id: str | None = None
        self.model: str | None = None
        self.done = False
        self.done_reason: str | None = None
        self.cut = False
        self.skipped = 0
        self.heartbeats = 0
        self.new_choices: list[int] = []

    # ------------------------------------------------------------------ feeding

    def feed(self, sse: ServerSentEvent, *, at_eof: bool = False) -> list[Event]:
        raise NotImplementedError  # pragma: no cover - every format has its own

    def feed_many(self, sses: list[ServerSentEvent], out: list[Event]) -> None:
        """:meth:`feed` each of ``sses`` in order, appending to ``out`` (so that when one
        raises, ``out`` holds the events of those before it)."""
        feed = self.feed
        for sse in sses:
            events = feed(sse)
            if events:
                out += events

    def feed_lines(self, lines: list[str]) -> list[Event]:
        """Lines outside any SSE field are ignored, as the spec says (but see Gemini's)."""
        return []

    def body_ended(self, clean: bool) -> list[Event]:
        """Nothing to decide for a format whose streams end with a marker of their own."""
        return []

    def refuses_undecoded(self, data: str) -> bool:
        """A frame to refuse before it is decoded: decoding costs ~250 bytes per JSON
        object or array, so a frame over :data:`BIG_FRAME` characters with more of them
        than :meth:`most_objects` allows is refused (see :func:`too_many_objects`)."""
        size = len(data)
        return size > BIG_FRAME and too_many_objects(data, self.most_objects(size))

    def most_objects(self, size: int) -> int:
        """JSON objects and arrays a frame of ``size`` characters may hold: by density
        (:data:`MIN_CHARS_PER_OBJECT`), for formats whose state does not grow with them."""
        return size // MIN_CHARS_PER_OBJECT

    def bad_frame(self, data: str, reason: str, at_eof: bool) -> list[Event]:
        """A frame that is not a usable JSON object: dropped silently when the end of the
        bytes cut it (``cut``), raised in strict mode, else skipped and counted."""
        if at_eof:
            self.cut = True
            return []
        if self.strict:
            raise FrameDecodeError(reason, data)
        return self.skip(reason, data)

    def no_reply(self, body: Mapping[str, Any]) -> list[Event]:
        """A whole body that is not one this format reads (see :meth:`reads_body`): the
        reply ends with an error that says so and shows the body's start. Marks the format
        done (nothing more is coming)."""
        self.done = True
        self.done_reason = "completion"
        message = f"the body is not a reply ({self.reply_shape}): {excerpt(body)}"
        return [ErrorEvent(message, None, None, None, body)]

    def skip(self, reason: str, frame: object) -> list[Event]:
        """Skip and count a frame (or part of one) that cannot be used; never raised, even
        in strict mode, which is about frames that are not JSON objects."""
        self.skipped += 1
        return [SkippedFrame(reason, excerpt(frame))]

    def usage_of(self, raw: object, obj: object, out: list[Event]) -> dict[str, Any] | None:
        """A frame's ``usage`` ready to keep: ``None`` when there is none, and what does not
        fit dropped and counted (usage that is not an object, fields of the wrong type: a
        reply holding them would not validate back, so relay followers and resume tokens
        would refuse it)."""
        checked = self.usage_model_of(raw, obj, out)
        return None if checked is None else checked[0]

    def usage_model_of(
        self, raw: object, obj: object, out: list[Event]
    ) -> tuple[dict[str, Any], Usage] | None:
        """:meth:`usage_of` and its ``Usage``, validated once."""
        if raw is None:
            return None
        if raw.__class__ is not dict and not isinstance(raw, Mapping):  # dict: no ABC check
            out += self.skip("usage is not an object", obj)
            return None
        if not raw:
            return None
        clean, dropped, model = checked_usage_model(raw)
        if dropped:
            out += self.skip(USAGE_DROPPED, obj)
        return clean, model

    # ------------------------------------------------------------------ connections

    def reset(self) -> None:
        """A restarted generation begins at offset 0 again."""
        self.done = False
        self.done_reason = None
        self.cut = False
        self.new_choices = []

    def new_connection(self) -> None:
        """Nothing to do for a format whose stream does not restate its framing."""

    def continued(self) -> None:
        """Nothing to do for a format whose continuation is not a new response."""

    def errored_before(self) -> None:
        """Nothing to do for a format that does not dedupe errors."""

    # ------------------------------------------------------------------ resume tokens

    def resume_sequence(self) -> int | None:
        return None

    def resume_state(self) -> dict[str, Any] | None:
        return None

    def restore_state(self, state: Any) -> None:
        """Nothing to take over for a format that writes no state."""

    def restore_position(self, sequence: int | None, response_id: str | None) -> None:
        """Nothing to take over for a format without a ``starting_after`` re-read."""


