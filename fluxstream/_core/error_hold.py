"""An error event held back from the reply while another upstream could take the reply over.

Applied, an error event ends the reply ``failed`` at once; a stream with fallbacks must first
decide (:meth:`~fluxstream._core.recovery.Recovery.decide`) whether to retry, to hand the reply
to the next upstream, or to let it fail as it would have without fallbacks. So while an
upstream is left to move to, the first error event of a read, and the events after it, are kept
out of the reply (:meth:`ErrorHold.screen`, which the parser runs over each read's events
before they reach the reply) until the decision releases or drops them.

This is failover's concern, not parsing's: the hold belongs to the stream's route
(:class:`~fluxstream._io.failover.Route`), and the parser only gives it each read's events
(its ``hold`` hook) and applies what it releases (:meth:`~fluxstream._parser.StreamParser.
apply_held`). A stream without fallbacks has none, and pays nothing for it.
"""

from __future__ import annotations

from .._events import ErrorEvent, Event

__all__ = ["ErrorHold"]


class ErrorHold:
    """The error event a read brought while it may not be applied yet, and what followed it."""

    __slots__ = ("active", "held")

    def __init__(self) -> None:
        #: Error events are held back (``False`` once no upstream is left to move to: they
        #: end the reply as without fallbacks).
        self.active = True
        #: The held error event and the events of its read after it, in order.
        self.held: list[Event] = []

    def screen(self, batch: list[Event]) -> list[Event]:
        """The events of a read that may reach the reply: while :attr:`active`, those before
        its first error event (that event and the rest are held)."""
        if self.active:
            for position, event in enumerate(batch):
                if type(event) is ErrorEvent:
                    self.held = batch[position:]
                    return batch[:position]
        return batch

    @property
    def error(self) -> ErrorEvent | None:
        """The error event held back (the events after it wait with it), if any."""
        first = self.held[0] if self.held else None
        return first if isinstance(first, ErrorEvent) else None

    def release(self) -> list[Event]:
        """What was held, for the parser to apply as if it had not been held (no other
        upstream takes the reply over, so it ends ``failed`` as it always did)."""
        held, self.held = self.held, []
        return held

    def drop(self) -> None:
        """Forget what was held: the reply goes on by a retry or on another upstream."""
        self.held = []
