"""The shared foundation of the wire formats.

:class:`FormatBase` is what every format is built on: the state the parser reads, the default
of every hook of the format contract (:class:`~fluxstream.formats._contract.WireFormat`),
skipping and counting bad frames, and the memory guard each frame passes before it is decoded.
:class:`ChoiceState` is what a format keeps per choice whatever its vocabulary: offsets, tool
calls (:class:`ToolCallState`, bounded by ``max_tool_calls``) and the surrogate halves held
back. :class:`JsonEventFormat` adds what the event-typed formats (Responses, Anthropic
Messages) share: one JSON object per SSE event naming its own ``type`` (the ``event:`` line
repeats it, or is missing: some gateways and test harnesses send data-only frames), describing
a single choice.

The helpers below are shared too: the fast event makers, usage normalization, error payloads
and the folding of kept fragments.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import msgspec
import pydantic_core
from pydantic import ValidationError

from .._events import (
    ErrorEvent,
    Event,
    Finish,
    ReasoningDelta,
    RefusalDelta,
    SkippedFrame,
    TextDelta,
    ToolCallDelta,
    UsageUpdate,
)
from .._limits import DEFAULT_STREAM_LIMITS, StreamLimits
from .._reply import StopReason, unified_stop
from .._wire import CompletionTokensDetails, PromptTokensDetails, Usage
from ..errors import FrameDecodeError, LimitExceededError
from ..sse import ServerSentEvent
from ._contract import Claim
from ._surrogates import REPLACEMENT, clean_tree, fallback_loads, fix_surrogates, is_high_half

__all__ = [
    "BIG_FRAME",
    "CHOICE_SLOTS",
    "KEEPALIVES",
    "MAX_KEPT_CHARS",
    "MAX_SEQUENCE",
    "MAX_TOKEN_COUNT",
    "USAGE_DROPPED",
    "ChoiceState",
    "Detection",
    "FormatBase",
    "JsonEventFormat",
    "QUICK_DECODE_ERRORS",
    "ToolCallState",
    "approx_size",
    "checked_usage",
    "checked_usage_model",
    "compact",
    "crowded",
    "error_event",
    "excerpt",
    "final_usage",
    "finish_event",
    "fold",
    "is_error_object",
    "normalized_usage",
    "opt_str",
    "reasoning_delta",
    "quick_candidate",
    "refusal_delta",
    "text_delta",
    "too_many_objects",
    "tool_delta",
    "usage",
]

_loads = pydantic_core.from_json
_EXCERPT = 200
#: Sequence numbers (and wire indices) at or past this, or negative, are not used: one absurd
#: number would make every later event look delivered already, and a resume token could not
#: carry it (JSON numbers stay exact below it; a number of thousands of digits would not
#: even format into a ``starting_after`` query). The Responses format, the parser's resume
#: state and the re-read's check all read numbers by this one bound.
MAX_SEQUENCE = 2**53
_FOLD = 256  # argument fragments kept per call before folding them into one string
#: Every join of kept fragments goes through this global, so that tests can count the
#: characters copied and hold the fold to O(n).
_join = "".join
#: Characters of never-shown provider data (thinking signatures, redacted thinking, reasoning
#: items) kept per stream. It is not part of the reply's text, so ``max_reply_chars`` does not
#: bound it; this does (real streams keep kilobytes).
MAX_KEPT_CHARS = 32 * 1024 * 1024


# --------------------------------------------------------------------------- fast events
#
# One event is created per delta, and a frozen dataclass's generated ``__init__`` sets each
# field through ``object.__setattr__`` (~0.6 us for a ``TextDelta``: as much as decoding its
# SSE frame). The makers below build the *same* objects (same class, same fields, equal,
# hashable and frozen afterwards) at under a third of that: the fields are stored on an
# instance of a plain twin class that declares the same slots in the same order (so the same
# memory layout: CPython allows ``__class__`` assignment exactly between such classes), which
# then becomes the event class. At import, every maker is checked against the class itself;
# if the event classes ever change shape, or the interpreter refuses the assignment, the
# maker is the class (or a maker setting the slots through their descriptors), so it can
# never build a wrong event.

_E = TypeVar("_E")
_new = object.__new__


def _twin(cls: type) -> type | None:
    """A plain class with ``cls``'s slots, in the same order; ``None`` if an instance of it
    cannot become a ``cls``."""
    slots = cls.__dict__.get("__slots__")
    if not isinstance(slots, tuple) or cls.__bases__ != (object,):
        return None
    twin = type(f"_{cls.__name__}Init", (), {"__slots__": slots})
    try:
        probe: Any = _new(twin)
        probe.__class__ = cls
    except TypeError:  # pragma: no cover - another interpreter or an incompatible layout
        return None
    return twin


def _checked(make: Callable[..., _E], cls: Callable[..., _E], *args: Any) -> Callable[..., _E]:
    """``make`` if it builds what ``cls`` builds from ``args``; else ``cls`` itself."""
    try:
        fast, slow = make(*args), cls(*args)
    except Exception:  # pragma: no cover - only if the event classes change shape
        return cls
    same = (
        type(fast) is type(slow)
        and fast == slow
        and dataclasses.astuple(fast) == dataclasses.astuple(slow)  # type: ignore[call-overload]
    )
    return make if same else cls


def _channel_maker(cls: type[_E], kind: str) -> Callable[[str, int, int, str], _E]:
    twin = _twin(cls)
    if twin is None or tuple(f.name for f in dataclasses.fields(cls)) != (  # type: ignore[arg-type]
        "key", "choice", "offset", "text", "type"
    ):
        return cls  # pragma: no cover - only if the event classes change shape

    def make(key: str, choice: int, offset: int, text: str) -> _E:
        ev: Any = _new(twin)
        ev.key = key
        ev.choice = choice
        ev.offset = offset
        ev.text = text
        ev.type = kind
        ev.__class__ = cls
        return ev  # type: ignore[no-any-return]

    return _checked(make, cls, "k", 1, 2, "t")


def _tool_maker() -> Callable[[str, int, int, str | None, str | None, str, int], ToolCallDelta]:
    names = ("key", "choice", "call", "id", "name", "arguments", "offset", "replace", "type")
    twin = _twin(ToolCallDelta)
    if twin is None or tuple(f.name for f in dataclasses.fields(ToolCallDelta)) != names:
        return ToolCallDelta  # pragma: no cover - only if the event class changes shape

    def make(key: str, choice: int, call: int, id: str | None, name: str | None,
             arguments: str, offset: int) -> ToolCallDelta:
        ev: Any = _new(twin)
        ev.key = key
        ev.choice = choice
        ev.call = call
        ev.id = id
        ev.name = name
        ev.arguments = arguments
        ev.offset = offset
        ev.replace = False
        ev.type = "tool_call_delta"
        ev.__class__ = ToolCallDelta
        return ev  # type: ignore[no-any-return]

    return _checked(make, ToolCallDelta, "k", 1, 2, "i", "n", "{}", 3)


def _finish_maker() -> Callable[[str, int, str, StopReason | None], Finish]:
    names = ("key", "choice", "reason", "stop", "type")
    twin = _twin(Finish)
    if twin is None or tuple(f.name for f in dataclasses.fields(Finish)) != names:
        return Finish  # pragma: no cover - only if the event class changes shape

    def make(key: str, choice: int, reason: str, stop: StopReason | None) -> Finish:
        ev: Any = _new(twin)
        ev.key = key
        ev.choice = choice
        ev.reason = reason
        ev.stop = unified_stop(reason) if stop is None else stop  # Finish.__post_init__
        ev.type = "finish"
        ev.__class__ = Finish
        return ev  # type: ignore[no-any-return]

    return _checked(make, Finish, "k", 1, "end_turn", None)


#: ``TextDelta(key, choice, offset, text)``, built faster (see above).
text_delta = _channel_maker(TextDelta, "text")
#: ``ReasoningDelta(key, choice, offset, text)``, built faster.
reasoning_delta = _channel_maker(ReasoningDelta, "reasoning")
#: ``RefusalDelta(key, choice, offset, text)``, built faster.
refusal_delta = _channel_maker(RefusalDelta, "refusal")
#: ``ToolCallDelta(key, choice, call, id, name, arguments, offset)``, built faster.
tool_delta = _tool_maker()
#: ``Finish(key, choice, reason, stop)``, built faster.
finish_event = _finish_maker()


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

    ``checked``: the ``Usage`` of ``raw`` as :meth:`FormatBase.usage_model_of` made it when
    ``raw`` is what it kept (a fresh one: filled in place), so a frame's usage is validated
    once, not twice.
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


def fold(parts: list[str], start: int) -> int:
    """Join ``parts[start:]`` (what arrived since the last fold) into one piece, in place;
    returns the length past which to fold next. Only new fragments are copied: joining the
    whole list every ``_FOLD`` fragments was quadratic (200 000 argument deltas of 100
    characters took 3.8 s), as the assembler's fold once was."""
    parts[start:] = [_join(parts[start:])]
    return len(parts) + _FOLD


class ToolCallState:
    """What a format remembers about one tool call: identity, delivered length and, for
    formats whose final ``done`` value replaces the streamed one, the streamed fragments."""

    __slots__ = ("fold_at", "fragments", "id", "length", "name", "start_input")

    def __init__(self, kept: bool = True) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.length = 0
        #: Streamed argument fragments (``kept``); ``None`` when nothing compares them (Chat
        #: Completions, Anthropic) or after a resume (the text is not known here).
        self.fragments: list[str] | None = [] if kept else None
        #: ``fragments`` is folded when it grows past this (see :func:`fold`).
        self.fold_at = _FOLD
        #: Anthropic: the ``input`` of ``content_block_start`` (used when no fragment arrives).
        self.start_input: object = None

    def add(self, text: str) -> int:
        """Account for a streamed argument fragment; returns its offset (the length before
        it). Every ``_FOLD`` fragments the new ones are folded into one chunk, so a call with
        many tiny fragments costs a few strings, not a list entry per delta."""
        offset = self.length
        self.length = offset + len(text)
        fragments = self.fragments
        if fragments is not None:
            fragments.append(text)
            if len(fragments) > self.fold_at:
                self.fold_at = fold(fragments, self.fold_at - _FOLD)
        return offset

    def replace(self, final: str) -> None:
        """The provider's final arguments replace everything streamed."""
        self.length = len(final)
        self.fragments = [final]
        self.fold_at = 1 + _FOLD

    def settle(self, final: str) -> tuple[str, int, bool] | None:
        """The provider's final arguments (Responses' ``.done``) take the place of what was
        streamed: ``None`` when they are exactly that, else the delta that makes them so
        (``rest`` at ``offset``; ``replace``: what was delivered past ``offset`` is wrong).
        A final value that extends the fragments is one more fragment. After a resume only
        the length of what was streamed is known, not the text, so the final value replaces
        all of it (trusting it as a prefix spliced the two when they disagree)."""
        fragments = self.fragments
        if fragments is None:
            agree = 0
        else:
            streamed = _join(fragments)
            if streamed == final:
                return None
            agree = len(streamed) if final.startswith(streamed) else _common(streamed, final)
        replace = agree < self.length
        self.replace(final)
        return final[agree:], agree, replace


def _common(a: str, b: str) -> int:
    """Length of the common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


# --------------------------------------------------------------------------- one choice

class ChoiceState:
    """What a format keeps for one choice, whatever its vocabulary: the code points delivered
    per channel (``text``, ``reasoning``, ``refusal``), the tool calls by number, the call
    touched last, and the high surrogate halves held back per channel (a channel name, or a
    call's number).

    A mixin: a Chat Completions choice is one object per choice, while the event-typed
    formats describe a single choice and keep its state on the format itself (one attribute
    less on their hot path). Both declare :data:`CHOICE_SLOTS`; the mixin's own ``__slots__``
    is empty, so no instance gets a ``__dict__`` (which would slow every attribute lookup on
    the formats' hot paths), and hidden from the type checker, which would otherwise refuse
    the mixin's assignments to slots its subclasses declare.

    Why halves are held (see :mod:`._surrogates`): servers that cut text by UTF-16 unit send
    an emoji's high half at the end of one fragment and its low half at the start of the
    next; :meth:`join` holds a trailing high half back and puts it in front of the channel's
    next fragment, so the pair is delivered once, as one code point.
    """

    if not TYPE_CHECKING:
        __slots__ = ()

    text: int
    reasoning: int
    refusal: int
    calls: dict[int, ToolCallState]
    last_call: int | None
    held: dict[str | int, str] | None

    def clear_choice(self) -> None:
        """Nothing delivered yet."""
        self.text = self.reasoning = self.refusal = 0
        self.calls = {}
        self.last_call = None
        self.held = None

    def deliver(self, channel: str, key: str, choice: int, text: str, out: list[Event]) -> None:
        """``text`` (ready: joined, non-empty) on a text channel, at the channel's offset
        (branches, not ``getattr``: reasoning deltas come as often as text)."""
        size = len(text)
        if channel == "text":
            out.append(text_delta(key, choice, self.text, text))
            self.text += size
        elif channel == "reasoning":
            out.append(reasoning_delta(key, choice, self.reasoning, text))
            self.reasoning += size
        else:
            out.append(refusal_delta(key, choice, self.refusal, text))
            self.refusal += size

    def name_call(self, call: ToolCallState, cid: object, name: object) -> tuple[str | None,
                                                                              str | None]:
        """Take a call's ``id`` and ``name`` from their first non-empty string; returns
        those that are new (what a ``ToolCallDelta`` announces)."""
        new_id = cid if isinstance(cid, str) and cid and call.id is None else None
        new_name = name if isinstance(name, str) and name and call.name is None else None
        call.id = call.id or new_id
        call.name = call.name or new_name
        return new_id, new_name

    def open_call(self, number: int, limits: StreamLimits, *, kept: bool = True) -> ToolCallState:
        """A new tool call, refused past ``max_tool_calls`` before anything is kept for it
        (the assembler would refuse it too, but only after the format held it)."""
        calls = self.calls
        if len(calls) >= limits.max_tool_calls:
            raise LimitExceededError("max_tool_calls", limits.max_tool_calls, len(calls) + 1)
        call = calls[number] = ToolCallState(kept)
        self.last_call = number
        return call

    def restore_offsets(self, counts: Mapping[str, Any],
                        ids: Mapping[int, tuple[Any, Any]]) -> None:
        """Offsets and tool-call identity from a resume token (``counts`` as
        :meth:`fluxstream._assembly.ReplyAssembler.offsets` writes one choice's, ``ids`` the
        reply's ``{call: (id, name)}``): only lengths are known, not the streamed text."""
        self.text = int(counts.get("text", 0))
        self.reasoning = int(counts.get("reasoning", 0))
        self.refusal = int(counts.get("refusal", 0))
        for call_key, length in (counts.get("tool_calls") or {}).items():
            number = int(call_key)
            call = self.calls[number] = ToolCallState(kept=False)
            call.id, call.name = ids.get(number, (None, None))
            call.length = int(length)
            self.last_call = number

    # ------------------------------------------------------------------ surrogate halves

    def join(self, channel: str | int, text: str) -> str:
        """``text`` ready to deliver on ``channel``: the half held from the channel's previous
        fragment in front, a trailing high half held back, pairs joined into code points and
        any other lone half replaced. May return ``""``."""
        held = self.held
        if held:
            before = held.pop(channel, "")
            if before:
                text = before + text
        last = text[-1:]
        if is_high_half(last):
            if held is None:
                held = self.held = {}
            held[channel] = last
            text = text[:-1]
        return fix_surrogates(text)

    def flush_held(self, key: str, choice: int, out: list[Event]) -> None:
        """The choice ends: every half still held is delivered as U+FFFD (no low half will
        come; at a cut end this is not called: the rest of the payload is lost anyway)."""
        held = self.held
        if not held:
            return
        self.held = None
        for channel in held:
            if isinstance(channel, int):
                call = self.calls.get(channel)
                if call is not None:
                    out.append(tool_delta(key, choice, channel, None, None, REPLACEMENT,
                                          call.add(REPLACEMENT)))
            else:
                self.deliver(channel, key, choice, REPLACEMENT, out)

    def held_state(self) -> list[list[Any]]:
        """The held halves, for a resume token: a token taken between an emoji's two halves
        must give the resumed format the first one, or the emoji becomes U+FFFD. ``[channel,
        call number or None, UTF-16 unit]``: the half as a number, since a lone half is not
        valid in every JSON encoder."""
        return [
            ["tool", channel, ord(half)] if isinstance(channel, int) else [channel, None, ord(half)]
            for channel, half in (self.held or {}).items()
        ]

    def restore_held(self, state: object) -> bool:
        """Take over :meth:`held_state` from a token (entries that are not what it writes, or
        name a call the reply does not have, are left out); whether any half was taken."""
        taken = False
        for entry in state if isinstance(state, list) else ():
            if not (isinstance(entry, list) and len(entry) == 3):
                continue
            channel, index, unit = entry
            if type(unit) is not int or not 0xD800 <= unit <= 0xDBFF:
                continue
            key: str | int
            if channel in ("text", "reasoning", "refusal") and index is None:
                key = channel
            elif channel == "tool" and type(index) is int and index in self.calls:
                key = index
            else:
                continue
            if self.held is None:
                self.held = {}
            self.held[key] = chr(unit)
            taken = True
        return taken


#: The slots a class mixing in :class:`ChoiceState` declares.
CHOICE_SLOTS = ("calls", "held", "last_call", "reasoning", "refusal", "text")


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


class JsonEventFormat(FormatBase, ChoiceState):
    """Base of the formats whose frames are typed JSON events describing one choice
    (Responses, Anthropic Messages): decoding a frame, the offsets of choice 0 and the
    resume hooks; the vocabulary is the subclass's :meth:`dispatch`.

    ``heartbeats`` matters here: Anthropic's keep-alive is an in-band ``ping`` *event*, not
    an SSE comment, and it must count as a heartbeat like a ``: ping`` comment does.
    """

    __slots__ = (*CHOICE_SLOTS, "kept", "reconnected", "scan", "started")

    #: Event types whose strings are streamed text fragments: a payload of one of these that
    #: only ``json.loads`` can decode (lone UTF-16 surrogate halves) keeps its halves for
    #: :meth:`join`; any other such payload is cleaned whole (halves -> U+FFFD).
    delta_kinds: frozenset[str] = frozenset()

    def __init__(self, key: str, *, strict: bool = False,
                 limits: StreamLimits = DEFAULT_STREAM_LIMITS) -> None:
        super().__init__(key, strict=strict, limits=limits)
        #: Characters of never-shown data kept so far (see :data:`MAX_KEPT_CHARS`).
        self.kept = 0
        self.started = False
        #: A new connection began (resume or continuation) and no event of it was seen yet.
        self.reconnected = False
        self.clear_choice()
        #: Fragments may hold lone surrogate halves (see :mod:`._surrogates`): set by the first
        #: payload only ``json.loads`` could decode, and by :meth:`feed_chunk`.
        self.scan = False

    # ------------------------------------------------------------------ resume hooks

    def reset(self) -> None:
        super().reset()
        self.reconnected = False
        self.started = False
        self.kept = 0
        self.clear_choice()

    def restore(
        self,
        offsets: dict[str, Any],
        calls: dict[int, dict[int, tuple[Any, Any]]],
        finishes: dict[int, str | None],
    ) -> None:
        """Continue offsets and tool-call identity from a resumed reply (choice 0 only)."""
        counts = offsets.get("0")
        if not counts:
            return
        self.started = True
        self.restore_offsets(counts, calls.get(0, {}))
        self.last_call = None  # which call an unnamed fragment continues is wire state

    def shift_text(self, choice: int, by: int) -> None:
        """Un-count ``by`` code points of text (an echoed overlap that was cut)."""
        if choice == 0:
            self.text -= by

    def new_connection(self) -> None:
        """A new connection continues this reply: offsets and content stay; the format may
        accept the stream's opening events once more."""
        self.reconnected = True

    def restore_held(self, state: object) -> bool:
        taken = super().restore_held(state)
        if taken:
            self.scan = True  # the next fragment must go through join()
        return taken

    # ------------------------------------------------------------------ frames

    def feed(self, sse: ServerSentEvent, *, at_eof: bool = False) -> list[Event]:
        """One SSE event. ``at_eof``: flushed by the end of the bytes, so a payload that does
        not parse was cut by the connection and is dropped silently."""
        if self.done:
            return []
        data = sse.data
        if self.refuses_undecoded(data):
            return self.bad_frame(data, self.crowded_reason, at_eof)
        if data[:1] != "{":
            stripped = data.strip()
            if stripped == "[DONE]":
                # Never sent by these APIs, but test harnesses and proxies append it.
                self.done = True
                self.done_reason = "sentinel"
                out: list[Event] = []
                self.flush(out)
                return out
            if not stripped:
                return []  # an empty data frame: a keep-alive
        raw = False
        try:
            obj = _loads(data)
        except ValueError as exc:
            obj = fallback_loads(data)  # lone surrogate halves: json.loads keeps them
            if obj is None:
                if sse.event == "error" and not at_eof:
                    # A proxy's plain-text error ("upstream timed out"): the reply's error,
                    # as in Chat Completions and ``auto``, not a skipped frame that would
                    # make the stream look merely cut.
                    self.start()
                    return [ErrorEvent(fix_surrogates(data), None, None, None, data)]
                return self.bad_frame(data, f"invalid JSON: {exc}", at_eof)
            raw = self.scan = True
        if obj.__class__ is not dict:
            return self.bad_frame(data, "not a JSON object", False)
        event = sse.event
        if event == "error":
            return self.dispatch("error", self._cleaned(obj) if raw else obj)
        kind = obj.get("type")
        if kind.__class__ is not str:
            kind = event
        if raw and kind not in self.delta_kinds:
            obj = self._cleaned(obj)
        return self.dispatch(kind, obj)

    #: The events :meth:`feed_many` maps in line, as one typed decode (``None``: none).
    quick_decoder: ClassVar[msgspec.json.Decoder[Any] | None] = None
    #: ``event:`` names of the frames worth trying it on (``message``: a data-only frame).
    quick_events: ClassVar[frozenset[str]] = frozenset()

    def feed_many(self, sses: list[ServerSentEvent], out: list[Event]) -> None:
        """:meth:`feed` each of ``sses`` in order, appending to ``out`` (so that when one
        raises, ``out`` holds the events of those before it).

        Nearly every event of a stream is the same one or two kinds (a text fragment, an
        argument fragment): a frame named as one of :attr:`quick_events` is decoded by
        :attr:`quick_decoder` straight into a small typed struct (its other fields skipped,
        no dict built) and mapped by :meth:`quick`, the same steps :meth:`dispatch` takes for
        it, without the per-event calls of the general path. Anything the decoder refuses
        (another ``type``, a field of another type, ``NaN``, a lone surrogate escape) and
        anything :meth:`quick` declines goes through :meth:`feed`, which decides as before:
        the events, offsets, state and errors are the same either way. So does every frame
        while surrogate halves are scanned for (``scan``), once the stream is done, and a
        frame that is not a candidate (:func:`quick_candidate`: not an object, too big, or
        able to nest deeper than ``from_json`` allows).

        Held equal to the general path (no quick decoder) by
        ``tests/formats/test_json_event_feed_many.py::test_responses_fast_path_equals_the_general_path``
        and ``::test_anthropic_fast_path_equals_the_general_path`` (frames built around the
        fast path's edges) and, on every recorded stream, with ``feed`` one event at a time
        too, by ``tests/formats/test_fast_paths.py::test_fast_paths_equal_the_general_path``;
        that it is taken, by ``test_fast_paths.py::test_the_fast_paths_are_taken``."""
        decode = self.quick_decoder
        if decode is None:
            super().feed_many(sses, out)
            return
        names = self.quick_events
        loads = decode.decode
        quick = self.quick
        for sse in sses:
            if (
                self.scan
                or self.done
                or sse.event not in names
                or not quick_candidate(data := sse.data)
            ):
                out += self.feed(sse)
                continue
            try:
                obj = loads(data)
            except QUICK_DECODE_ERRORS:
                out += self.feed(sse)  # from_json and the fallback decide (skip, strict...)
                continue
            if not quick(obj, out):
                out += self.feed(sse)

    def quick(self, obj: Any, out: list[Event]) -> bool:  # pragma: no cover
        """Map a struct :attr:`quick_decoder` gave, appending to ``out``; ``False``, with
        nothing changed, when the general path must decide."""
        return False

    def feed_chunk(self, obj: Mapping[str, Any]) -> list[Event]:
        """One event another SDK already decoded (a dict with its ``type``; its strings may
        hold lone surrogate halves, as ``json.loads`` keeps them)."""
        if self.done:
            return []
        self.scan = True
        kind = obj.get("type")
        kind = kind if isinstance(kind, str) else ""
        if kind not in self.delta_kinds:
            obj = self._cleaned(obj)
        return self.dispatch(kind, obj)

    @staticmethod
    def _cleaned(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        cleaned = clean_tree(obj)
        return cleaned if isinstance(cleaned, Mapping) else obj

    def dispatch(self, kind: str, obj: Mapping[str, Any]) -> list[Event]:  # pragma: no cover
        """One typed event (``kind`` is its ``type``): the format's own vocabulary."""
        raise NotImplementedError

    def feed_completion(self, obj: Mapping[str, Any]) -> list[Event]:  # pragma: no cover
        """A whole non-streaming body (the format's own shape)."""
        raise NotImplementedError

    def keep(self, size: int) -> bool:
        """Account for ``size`` characters of never-shown data; ``False`` (keep nothing) once
        :data:`MAX_KEPT_CHARS` would be passed."""
        if self.kept + size > MAX_KEPT_CHARS:
            return False
        self.kept += size
        return True

    # ------------------------------------------------------------------ channels

    def start(self) -> None:
        """Choice 0 exists from now on (even if no content ever arrives)."""
        if not self.started:
            self.started = True
            self.new_choices.append(0)

    def flush(self, out: list[Event]) -> None:
        """The choice ends: a half still held is delivered as U+FFFD."""
        if self.held:
            self.start()
            self.flush_held(self.key, 0, out)

    def add_to(self, channel: str, text: str, out: list[Event]) -> None:
        """``text`` on the named channel (``"text"``, ``"reasoning"``, ``"refusal"``),
        joined with held halves first when scanning."""
        if self.scan:
            text = self.join(channel, text)
            if not text:
                return
        if not self.started:
            self.start()
        self.deliver(channel, self.key, 0, text, out)

    def add_tool_text(self, index: int, text: str, out: list[Event]) -> None:
        """An argument fragment of an open call, joined with held halves first when
        scanning."""
        call = self.calls.get(index)
        if call is None or not text:
            return
        if self.scan:
            text = self.join(index, text)
            if not text:
                return
        out.append(tool_delta(self.key, 0, index, None, None, text, call.add(text)))
