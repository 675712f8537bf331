"""The ``id:`` of each event a page is sent, and the ``Last-Event-ID`` a browser sends back.

An id is ``<tag>.<entry>-<index>``: the follow position of the event (see
:mod:`fluxstream.relay.codec`; a live stream numbers its events ``1-0``, ``2-0`` ...) behind a
tag of the reply it belongs to. The tag is a short hash of the content key and of
whether the reply was live or followed through a log: a ``Last-Event-ID`` is untrusted input,
and an id of another reply (another tab, another user, a live reply sent to a follow
endpoint) must be refused, not read as a position in this one, where it would show text
twice or skip some. The hash says nothing a page does not already hold: every text event
carries the content key itself.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import Enum

from ..errors import RelayPositionError
from ..relay import Position, parse_position

__all__ = ["MAX_ID_CHARS", "EventIds", "IdProblem", "Kind"]

#: The longest ``Last-Event-ID`` read (an id this module writes is at most 38 characters).
MAX_ID_CHARS = 64


class Kind(Enum):
    """What the positions of a reply's ids count."""

    #: Events of a live stream, one by one: nothing to resume from once it is gone.
    LIVE = b"fluxstream-live"
    #: Follow positions of a :class:`~fluxstream.relay.ReplyLog`.
    FOLLOWED = b"fluxstream-log"


class IdProblem(Enum):
    """Why a ``Last-Event-ID`` was not taken."""

    MALFORMED = "malformed"
    OTHER_REPLY = "other reply"


@dataclass(frozen=True)
class EventIds:
    """How the ids of one reply are written and read."""

    #: 12 hex digits naming the reply (and its :class:`Kind`).
    tag: str

    @classmethod
    def of(cls, key: str, kind: Kind) -> EventIds:
        digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=6,
                                 person=kind.value)
        return cls(digest.hexdigest())

    @property
    def prefix(self) -> bytes:
        """What comes before the position in every id: ``b"<tag>."``."""
        return self.tag.encode() + b"."

    def id_of(self, position: Position) -> str:
        """The id of the event at ``position``."""
        return f"{self.tag}.{position}"

    def read(self, last_event_id: str) -> Position | IdProblem:
        """The position a ``Last-Event-ID`` names, or why it names none here."""
        text = last_event_id.strip()
        tag, dot, position = text.partition(".")
        if len(text) > MAX_ID_CHARS or not dot:
            return IdProblem.MALFORMED
        try:
            parsed = parse_position(position)
        except RelayPositionError:
            return IdProblem.MALFORMED
        if len(tag) != len(self.tag) or not _is_hex(tag) or parsed.entry == 0:
            return IdProblem.MALFORMED  # entry 0 is before every event: no event's id
        if tag != self.tag:
            return IdProblem.OTHER_REPLY
        return parsed


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)
