"""What a reply log stores, and how: entries, follow positions, JSON, per-frame coalescing.

A relayed reply is a sequence of numbered *entries* (1, 2, ...). Each entry holds the
normalized events of one frame (coalesced, so a fast model costs a handful of writes per
second); the last one is *terminal*: its only event is the :class:`~fluxstream._events.End`, and
it carries the reply's metadata and the latest resume token.

A *follow position* ``"N-I"`` names event ``I`` (0-based) of entry ``N``; following ``after``
a position yields exactly the events after it, so a follower that reconnects with the last
position it saw never sees a piece of text twice and never misses one. ``"0-0"`` (or no
position) means "from the start". Positions are also the ``id:`` of the relay's SSE output, so
a browser's ``Last-Event-ID`` is one.

Coalescing here joins the events of one entry: consecutive deltas of one channel whose
offsets are contiguous become one event, still an ``Event`` with its key and offset. It is
not :mod:`fluxstream._core.coalesce`, which paces picked items (strings, objects) in time for
``text(coalesce=)`` and hands them on without their events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec
from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_json

from .._events import (
    Event,
    Outcome,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
)
from ..errors import RelayPositionError

__all__ = [
    "START",
    "Entry",
    "Position",
    "RelayEvent",
    "coalesce",
    "decode_entries",
    "decode_entry",
    "encode_entry",
    "end_record",
    "entry_json",
    "parse_position",
    "plain_entry",
    "relayed",
    "sse_event",
]

_EVENTS: TypeAdapter[list[Event]] = TypeAdapter(list[Event])
_TO_JSON = _EVENTS.serializer.to_json
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


class _Stored(BaseModel):
    """The JSON of one entry (see :func:`encode_entry`). Decoded in one pass from JSON text
    (pydantic-core parses and validates together): a third of the CPU of ``json.loads``
    followed by validation, and a follower decodes every entry it reads."""

    e: list[Event]
    end: dict[str, Any] | None = None
_POSITION = re.compile(r"(\d{1,15})-(\d{1,9})")
_MAX_POSITION_TEXT = 40


@dataclass(frozen=True, order=True)
class Position:
    """Event ``index`` of entry ``entry``; ``(0, 0)`` is before everything."""

    entry: int
    index: int

    def __str__(self) -> str:
        return f"{self.entry}-{self.index}"


#: Follow from the start.
START = Position(0, 0)


class _Memo:
    """A slot for what is derived from a frozen value once and kept (:func:`relayed`,
    :func:`sse_event`): not a dataclass field, so equality, ``repr`` and the fields a
    caller sees stay those of the value."""

    __slots__ = ("_memo",)


@dataclass(frozen=True, slots=True)
class RelayEvent(_Memo):
    """One followed event and its follow position (``str(position)`` is its SSE ``id``)."""

    position: Position
    event: Event

    @property
    def id(self) -> str:
        return str(self.position)


@dataclass(frozen=True, slots=True)
class Entry(_Memo):
    """One stored entry: a frame's events, or (``end`` set) the terminal entry."""

    number: int
    events: tuple[Event, ...]
    #: Terminal entries only: ``{"outcome", "reason", "reply", "token"}``.
    end: dict[str, Any] | None = None
    #: Set by a producer now and then: the resume token of the stream at that point.
    token: dict[str, Any] | None = field(default=None, compare=False)


def relayed(entry: Entry) -> tuple[RelayEvent, ...]:
    """``entry``'s events with their follow positions, made once per entry and shared by
    every follower that reads it (the entries a process read are shared: the Redis
    tailer's, the memory log's): a follower yields them as they are, so N followers of a
    reply cost one ``RelayEvent`` per event, not N."""
    made: tuple[RelayEvent, ...] | None = getattr(entry, "_memo", None)
    if made is None:
        number = entry.number
        events = entry.events
        if len(events) == 1:  # most entries: one frame's deltas, coalesced
            position: Position = _new(Position)  # _position and _relay_event, inline
            fields = position.__dict__
            fields["entry"] = number
            fields["index"] = 0
            item: RelayEvent = _new(RelayEvent)
            _set_position(item, position)
            _set_event(item, events[0])
            made = (item,)
        else:
            made = tuple([
                _relay_event(_position(number, index), event)
                for index, event in enumerate(events)
            ])
        # A cache on a frozen instance: equality and hashing ignore the field.
        _set_memo(entry, made)
    return made


# Built field by field, as their ``__init__`` would (a frozen dataclass's sets each field
# through ``object.__setattr__`` in a Python frame): the values a process relays once per
# entry and event, at half the cost. tests/relay hold them equal to the constructors'.
_new = object.__new__
_set_number, _set_events, _set_end, _set_token = (
    vars(Entry)[name].__set__ for name in ("number", "events", "end", "token")
)
_set_position, _set_event = (vars(RelayEvent)[name].__set__ for name in ("position", "event"))
_set_memo = vars(_Memo)["_memo"].__set__


def _position(entry: int, index: int) -> Position:
    """``Position(entry, index)``."""
    position: Position = _new(Position)
    fields = position.__dict__
    fields["entry"] = entry
    fields["index"] = index
    return position


def _relay_event(position: Position, event: Event) -> RelayEvent:
    """``RelayEvent(position, event)``."""
    item: RelayEvent = _new(RelayEvent)
    _set_position(item, position)
    _set_event(item, event)
    return item


def plain_entry(number: int, events: tuple[Event, ...]) -> Entry:
    """``Entry(number, events)`` (no end, no token), without the frozen dataclass's
    ``object.__setattr__`` per field: a follower decodes, and a producer writes, one per
    frame."""
    entry: Entry = _new(Entry)
    _set_number(entry, number)
    _set_events(entry, events)
    _set_end(entry, None)
    _set_token(entry, None)
    _set_memo(entry, None)  # not made yet: a follower's look for it then raises nothing
    return entry


def sse_event(item: RelayEvent) -> bytes:
    """``item`` as one SSE event (``id:``, ``event:``, ``data:``; see
    :mod:`fluxstream.relay.sse`), serialised once per ``RelayEvent`` and kept: the
    followers of one process share one ``RelayEvent`` per stored event (:func:`relayed`),
    so it is serialised once, not once per browser."""
    made: bytes | None = getattr(item, "_memo", None)
    if made is None:
        event = item.event
        made = b"id: %d-%d\nevent: %s\ndata: %s\n\n" % (
            item.position.entry, item.position.index, event.type.encode(),
            _EVENT.dump_json(event),
        )
        _set_memo(item, made)
    return made


def parse_position(value: str | Position | None) -> Position:
    """A follow position from ``after=`` or a ``Last-Event-ID`` header (``None``: the start).

    :raises RelayPositionError: not of the form ``N-I`` (digits), e.g. a foreign event id.
    """
    if value is None:
        return START
    if isinstance(value, Position):
        return value
    text = value.strip()
    if not text:
        return START
    match = _POSITION.fullmatch(text) if len(text) <= _MAX_POSITION_TEXT else None
    if match is None:
        shown = text if len(text) <= _MAX_POSITION_TEXT else text[:_MAX_POSITION_TEXT] + "..."
        raise RelayPositionError(f"not a follow position (expected N-I): {shown!r}")
    return Position(int(match.group(1)), int(match.group(2)))


def encode_entry(events: list[Event], end: dict[str, Any] | None = None) -> str:
    """JSON text of one entry (events by their ``type`` discriminator)."""
    return entry_json(events, end).decode()


def entry_json(events: list[Event] | tuple[Event, ...], end: dict[str, Any] | None = None) -> bytes:
    """:func:`encode_entry` as UTF-8 bytes, what a Redis command carries (no decoding and
    encoding again: an entry is encoded once, as bytes, for the one write of its frame)."""
    # The adapter's serializer itself: ``TypeAdapter.dump_json`` adds a Python call and a
    # dozen default arguments per entry, and the output is the same bytes.
    if end is None:
        if (len(events) == 1 and type(events[0]) in _PLAIN) or _all_plain(events):
            try:
                return _PLAIN_JSON({"e": events})
            except Exception:  # pydantic's path below decides (and raises)
                pass
        return b'{"e":' + _TO_JSON(list(events)) + b"}"
    return b'{"e":' + _TO_JSON(list(events)) + b',"end":' + to_json(end) + b"}"


#: Deltas whose fields are only strings, integers, booleans and ``None``: msgspec writes
#: them as the same bytes as pydantic's serializer in about a third of its CPU, and a
#: producer encodes one such entry per write (tests/relay hold the two equal on random
#: entries). Anything msgspec refuses (a lone surrogate) goes to pydantic, which raises.
_PLAIN = frozenset({TextDelta, ReasoningDelta, RefusalDelta, ToolCallDelta})
_PLAIN_JSON = msgspec.json.Encoder().encode


def _all_plain(events: list[Event] | tuple[Event, ...]) -> bool:
    plain = _PLAIN
    return all(type(event) in plain for event in events)


def decode_entry(number: int, data: str | bytes) -> Entry:
    """The entry stored as ``data`` (see :func:`encode_entry`).

    An entry of deltas of one kind (most of them: a frame of text) is decoded by msgspec
    straight into the event dataclasses, about a fifth of pydantic's CPU; anything else,
    and anything msgspec refuses, by pydantic (:class:`_Stored`), which decides what is
    valid. The fast path only ever gives what pydantic gives (tests/relay prove it on
    random entries and random damage).

    :raises ValueError: ``data`` is not an entry (``pydantic.ValidationError``).
    """
    if isinstance(data, str):
        data = data.encode()
    return decode_entries([number], [data])[0]


def decode_entries(numbers: list[int], datas: list[bytes]) -> list[Entry]:
    """:func:`decode_entry` of each number and its data, in one loop: the entries one read
    found (a tailer's ``XREAD``, an ``XRANGE``), with no call per entry to find the fast
    decoder.

    :raises ValueError: a data is not an entry (``pydantic.ValidationError``).
    """
    entries: list[Entry] = []
    for number, data in zip(numbers, datas, strict=True):
        events: list[Event] | None = None
        for suffix, decoder in _FAST:
            if data.endswith(suffix):
                try:
                    events = decoder.decode(data).e
                except (msgspec.ValidationError, msgspec.DecodeError):
                    events = None
                break
        # msgspec fills a missing ``type`` with its default where pydantic refuses the
        # event: every event must name its type, once (a count of the raw key, which
        # cannot occur inside a JSON string: its closing quote would be escaped).
        if events is not None and data.count(b'"type":') == len(events):
            entries.append(plain_entry(number, tuple(events)))
        else:
            raw = _Stored.model_validate_json(data)
            entries.append(Entry(number, tuple(raw.e), raw.end))
    return entries


class _TextEntry(msgspec.Struct):
    e: list[TextDelta]
    end: None = None


class _ReasoningEntry(msgspec.Struct):
    e: list[ReasoningDelta]
    end: None = None


class _RefusalEntry(msgspec.Struct):
    e: list[RefusalDelta]
    end: None = None


class _ToolCallEntry(msgspec.Struct):
    e: list[ToolCallDelta]
    end: None = None


#: The fast decoders, by how an entry of one kind of delta ends (the last event's type).
_FAST: tuple[tuple[bytes, msgspec.json.Decoder[Any]], ...] = tuple(
    (b'"type":"%s"}]}' % tag.encode(), msgspec.json.Decoder(struct))
    for tag, struct in (
        ("text", _TextEntry), ("reasoning", _ReasoningEntry), ("refusal", _RefusalEntry),
        ("tool_call_delta", _ToolCallEntry),
    )
)


_Text = TextDelta | ReasoningDelta | RefusalDelta


def coalesce(events: list[Event]) -> list[Event]:
    """Join consecutive deltas of one channel with contiguous offsets (same key and choice;
    tool-call fragments of one call that carry no id, name or replacement). Nothing is
    reordered and no text changes, so ``buf[offset:offset+len(text)] = text`` still holds.

    Each run of joinable deltas becomes one event built once, its text joined once: joining
    pairwise made a new event and a new string per delta, quadratic in a long frame."""
    if len(events) < 2:
        return list(events)
    out: list[Event] = []
    run: list[Any] = []  # the deltas of the run being joined (all joinable with the first)
    end = 0  # where the run's text ends (the next delta's offset if it joins)
    for event in cast("list[Any]", events):  # the attributes read depend on the kind
        kind = type(event)
        if run:
            a = run[0]
            b = event
            if type(a) is kind and b.offset == end and a.key == b.key and a.choice == b.choice:
                if kind is ToolCallDelta:
                    if a.call == b.call and b.id is None and b.name is None and not b.replace:
                        run.append(b)
                        end += len(b.arguments)
                        continue
                else:
                    run.append(b)
                    end += len(b.text)
                    continue
            out.append(_joined(run))
            run = []
        if kind in _JOINABLE and not (isinstance(event, ToolCallDelta) and event.replace):
            run = [event]
            end = event.offset + len(event.arguments if kind is ToolCallDelta else event.text)
        else:
            out.append(event)
    if run:
        out.append(_joined(run))
    return out


_JOINABLE = (TextDelta, ReasoningDelta, RefusalDelta, ToolCallDelta)


def _joined(run: list[Any]) -> Event:
    """One event for a run of joinable deltas (see :func:`coalesce`)."""
    first = run[0]
    if len(run) == 1:
        return first  # type: ignore[no-any-return]
    if type(first) is ToolCallDelta:
        arguments = "".join(d.arguments for d in run)
        return ToolCallDelta(
            first.key, first.choice, first.call, first.id, first.name, arguments, first.offset
        )
    return type(first)(first.key, first.choice, first.offset, "".join(d.text for d in run))  # type: ignore[no-any-return]


def end_record(
    outcome: Outcome, reason: str | None, reply: dict[str, Any] | None, token: Any
) -> dict[str, Any]:
    """What a terminal entry carries besides the ``End`` event."""
    return {"outcome": outcome.value, "reason": reason, "reply": reply, "token": token}
