"""What a parser keeps of the SSE decoders and wire formats it replaced.

A reply outlives its connections: a reconnect reads with a fresh
:class:`~fluxstream.sse.SSEDecoder`, a hand-off to another API with a fresh wire format, yet
the reply's counters (bytes, SSE comments, in-band heartbeats, skipped frames) go on from
where the replaced ones stopped, and what a reconnect sends back (the last event id, the
server's ``retry:`` time) is the latest any connection set. One value, folded when a decoder
or a format is replaced, so that :class:`~fluxstream._parser.StreamParser` reads one object
where it kept a counter per connection-scoped number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..formats._contract import WireFormat
    from ..sse import SSEDecoder

__all__ = ["Carried"]


@dataclass(slots=True)
class Carried:
    """The counts and SSE state of the decoders and formats a parser no longer reads with."""

    #: Bytes the replaced decoders were fed, and bytes read after the reply's end (counted,
    #: never parsed).
    bytes: int = 0
    #: SSE comments the replaced decoders read (keep-alives, as the reply counts them).
    comments: int = 0
    #: In-band keep-alives the replaced formats counted (Anthropic's ``ping``).
    heartbeats: int = 0
    #: Frames the replaced formats skipped.
    skipped: int = 0
    #: The last event id delivered ("" for none): what a ``Last-Event-ID`` reconnect sends.
    last_event_id: str = ""
    #: The server's ``retry:`` in milliseconds, as the decoder bounds it (``None``: none).
    reconnection_time: int | None = None

    def decoder_replaced(self, decoder: SSEDecoder, last_event_id: str) -> None:
        """``decoder`` reads no more: its counts go on here, and ``last_event_id`` is the
        id delivered so far."""
        self.bytes += decoder.bytes_fed
        self.comments += decoder.comments
        self.last_event_id = last_event_id

    def format_replaced(self, fmt: WireFormat) -> None:
        """``fmt`` reads no more (another upstream's wire format does): its counts go on here."""
        self.skipped += fmt.skipped
        self.heartbeats += fmt.heartbeats
