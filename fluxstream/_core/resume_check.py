"""Verify a ``Last-Event-ID`` reconnect before trusting it (sans-IO).

The SSE resume contract says the server sends only events after the id it was given. Real
servers break it in three ways, and each would splice or repeat text silently:

* the header is ignored and a **new sample** is generated (llama.cpp-style servers with ids):
  the chunks carry a different completion ``id``, or the "replayed" text differs;
* the ids are **renumbered** on the new connection (they restart at 1): an id at or below the
  resume point whose text is not the text delivered at that position;
* **non-numeric** ids (UUIDs) cannot be ordered: a server that starts over shows the first
  id of the original stream again.

:class:`ResumeCheck` looks at the first events of the new connection. An event at or before the
resume point (numerically, or from the original first id up to the resume id) is a replay: its
text must equal what was delivered at the same offsets, and it is dropped. The first event past
the point must carry the same completion id as the reply, if the server sends ids in its
chunks. Anything else raises :class:`~fluxstream.errors.ResumeMismatchError`; the stream then
falls back to the next resume strategy, or ends ``truncated`` with that reason.

Cost: one JSON decode per replayed event and one for the first new event; then the check is
off for the rest of the connection. The delivered text is joined once per check.

:class:`SequenceCheck` does the same for the Responses API's own resume (``GET
/responses/{id}?stream=true&starting_after=N``, or a resume token carrying ``N``): the
events at or below ``N`` are replays (the format drops and counts them), and the first
event past ``N`` must be ``N + 1``. A later one means the re-read lost events between the
two connections (``ABCF`` for ``ABCDEF``): :class:`~fluxstream.errors.ResumeMismatchError`,
never a splice. It reads only the top-level ``sequence_number`` of the first events, without
building the rest of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from .._events import Event, TextDelta
from ..errors import ResumeMismatchError
from ..formats._base import MAX_SEQUENCE, crowded
from ..formats._surrogates import fallback_loads
from ..sse import ServerSentEvent

__all__ = ["ResumeCheck", "SequenceCheck", "completion_id"]

_MAX_ID_DIGITS = 18


def _number(event_id: str) -> int | None:
    if event_id.isdigit() and len(event_id) <= _MAX_ID_DIGITS:
        return int(event_id)
    return None


class ResumeCheck:
    """The check of one ``Last-Event-ID`` reconnect.

    :param last_id: the id sent as ``Last-Event-ID``.
    :param first_id: the id of the first event of the original stream (``None``: unknown).
    :param reply_id: the completion id of the reply so far (``None``: the server sent none).
    :param delivered: text delivered so far, per choice.
    :param shadow: a fresh format's ``feed`` (``None``: replayed text is not compared), used
        to decode replayed events without touching the reply.
    """

    def __init__(
        self,
        last_id: str,
        *,
        first_id: str | None,
        reply_id: str | None,
        delivered: Mapping[int, str],
        shadow: Callable[[ServerSentEvent], list[Event]] | None,
    ) -> None:
        self.last_id = last_id
        self.first_id = first_id
        self.reply_id = reply_id
        self.delivered = delivered
        self.shadow = shadow
        self._last_number = _number(last_id)
        #: Replayed events are being dropped (after verifying them).
        self.replaying: bool | None = None  # None: the first event has not been seen
        #: Events dropped as verified replays.
        self.dropped = 0
        self._past_last = False

    def filter(self, sses: list[ServerSentEvent]) -> tuple[list[ServerSentEvent], bool]:
        """The events to deliver, and whether the check is over (trust the rest)."""
        for position, sse in enumerate(sses):
            if self._is_replay(sse):
                self._verify_replay(sse)
                self.dropped += 1
                continue
            self._verify_new(sse)
            return sses[position:], True
        return [], False

    def _is_replay(self, sse: ServerSentEvent) -> bool:
        event_id = sse.id
        number = _number(event_id)
        if self._last_number is not None and number is not None:
            self.replaying = number <= self._last_number
            return self.replaying
        # Non-numeric ids cannot be ordered: only a restart from the top is recognised, as
        # the original first id again; the replay then runs up to and including the resume id.
        if self.replaying is None:
            self.replaying = bool(event_id) and event_id == self.first_id
        elif self.replaying and self._past_last and event_id != self.last_id:
            self.replaying = False
        if self.replaying and event_id == self.last_id:
            self._past_last = True
        return self.replaying

    def _verify_replay(self, sse: ServerSentEvent) -> None:
        self._verify_completion_id(sse)
        if self.shadow is None:
            return
        for event in self.shadow(sse):
            if type(event) is TextDelta:
                have = self.delivered.get(event.choice, "")
                end = event.offset + len(event.text)
                if have[event.offset : end] != event.text:
                    raise ResumeMismatchError(
                        f"the resumed stream replays text that differs from what was delivered"
                        f" (event id {sse.id!r}, choice {event.choice}, offset {event.offset})"
                    )

    def _verify_new(self, sse: ServerSentEvent) -> None:
        self._verify_completion_id(sse)

    def _verify_completion_id(self, sse: ServerSentEvent) -> None:
        if self.reply_id is None:
            return
        new_id = completion_id(sse)
        if new_id is not None and new_id != self.reply_id:
            raise ResumeMismatchError(
                f"the resumed stream is a new sample (completion id {new_id!r}, the reply's is"
                f" {self.reply_id!r}): the server did not honour Last-Event-ID"
            )


def completion_id(sse: ServerSentEvent) -> str | None:
    """The top-level ``id`` of an event's JSON data (a Chat Completions chunk's completion
    id), or ``None``: no JSON object, or no such id (the format skips and counts an event
    it cannot read; that is not a question of resuming)."""
    if not sse.data.startswith("{"):
        return None
    try:
        payload: Any = json.loads(sse.data)
    except (ValueError, RecursionError):
        return None
    found = payload.get("id") if isinstance(payload, dict) else None
    return found if isinstance(found, str) and found else None


#: Decodes an event's top level only: every value stays raw bytes, however big or deep.
_top_level = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_decode = msgspec.json.Decoder().decode
#: Longer ``type`` values are not read (no event type is this long): not ``response.*``.
_MAX_TYPE = 128


def _peek(data: str, event: str) -> tuple[int | None, bool]:
    """A Responses event's ``sequence_number`` (``None``: none, or not a count), and whether
    the event carries nothing the format reads: a keep-alive, ``{}``, a frame that is not
    an object or whose type (its ``type``, else its ``event:`` line, as the format reads
    it) is neither ``response.*`` nor ``error``. Such a frame is skipped by the format and
    says nothing about the re-read; an unnumbered event the format reads ends the check.
    A keep-alive or an unknown frame ending it let a gap behind it through, spliced."""
    if data[:1] != "{":
        return None, True
    number: Any
    kind: Any
    try:
        top = _top_level(data)
        raw, raw_kind = top.get("sequence_number"), top.get("type")
        number = None if raw is None or len(raw) > 20 else _decode(raw)
        kind = None if raw_kind is None or len(raw_kind) > _MAX_TYPE else _decode(raw_kind)
    except (ValueError, msgspec.MsgspecError, RecursionError):
        # Lone UTF-16 surrogate escapes (an emoji cut by a Node server), which only
        # json.loads takes, as the formats do; anything else the format skips and counts.
        if crowded(data):
            return None, True
        obj = fallback_loads(data)
        if not isinstance(obj, dict):
            return None, True
        number, kind = obj.get("sequence_number"), obj.get("type")
    if number.__class__ is int and 0 <= number < MAX_SEQUENCE:
        return number, False
    if kind.__class__ is not str:
        kind = event
    return None, not (kind == "error" or kind.startswith("response."))


class SequenceCheck:
    """The check of one ``starting_after=N`` re-read (see the module docstring).

    :param after: ``N``, the last ``sequence_number`` delivered.
    """

    def __init__(self, after: int) -> None:
        self.after = after

    def filter(self, sses: list[ServerSentEvent]) -> bool:
        """Whether the check is over (the first new event continues the stream; trust the
        rest); raises :class:`ResumeMismatchError` when it does not."""
        after = self.after
        for sse in sses:
            number, empty = _peek(sse.data, sse.event)
            if number is None:
                if empty:
                    continue
                return True  # unnumbered content: nothing left to check it by
            if number <= after:
                continue  # a replay: the format drops and counts it
            if number != after + 1:
                raise ResumeMismatchError(
                    f"the starting_after={after} re-read resumed at sequence_number {number}, "
                    f"not {after + 1}: the events between were lost"
                )
            return True
        return False
