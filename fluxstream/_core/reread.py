"""The checks a new connection's first events pass before the parser trusts them.

Two kinds of connection read a stream again: a ``Last-Event-ID`` reconnect (its replayed
events are verified and dropped: :class:`~fluxstream._core.resume_check.ResumeCheck`), and a
Responses re-read after ``sequence_number`` ``N`` (``starting_after``, a resume token: it must
go on at ``N + 1``, :class:`~fluxstream._core.resume_check.SequenceCheck`). Kept apart from
:class:`~fluxstream._parser.StreamParser` because it is one state with one rule (checked until
the first new event, then over), which the parser only consults per read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .._events import Event
from .._reply import Reply
from ..errors import ResumeMismatchError
from ..sse import ServerSentEvent
from .resume_check import ResumeCheck, SequenceCheck, completion_id

__all__ = ["RereadChecks"]


class RereadChecks:
    """The pending checks of the current connection (none once its first new event came)."""

    __slots__ = ("continued", "dropped", "first_event_id", "generation_id", "resume",
                 "sequence")

    def __init__(self) -> None:
        #: After a ``Last-Event-ID`` reconnect, until its first new event.
        self.resume: ResumeCheck | None = None
        #: After a Responses re-read, until its first numbered event.
        self.sequence: SequenceCheck | None = None
        #: The first event id of the stream (a reconnect's replay must start from it).
        self.first_event_id: str | None = None
        #: Replayed events verified and dropped.
        self.dropped = 0
        #: The connections since :meth:`new_generation` answer another request than the
        #: reply's first (a continuation, another upstream): their completion id is
        #: :attr:`generation_id`, not the reply's.
        self.continued = False
        #: The top-level ``id`` of that request's first event (``None``: it had none).
        self.generation_id: str | None = None

    def new_generation(self) -> None:
        """The next connection answers another request (a continuation, another upstream):
        its event ids and its completion id are its own, so a later ``Last-Event-ID``
        reconnect of it is checked against them, not the reply's first stream."""
        self.first_event_id = None
        self.continued = True
        self.generation_id = None

    def forget_connection(self) -> None:
        """The current connection's reads are forgotten (they were another upstream's, which
        lost a race): the first event id and completion id they set are unset, as they were
        before its first event."""
        self.first_event_id = None
        self.generation_id = None

    def reconnected(self, last_id: str, reply: Reply,
                    shadow: Callable[[ServerSentEvent], list[Event]],
                    delivered: Mapping[int, str] | None = None) -> None:
        """A new connection that sent ``last_id`` as ``Last-Event-ID``: ``reply`` is what was
        delivered, ``shadow`` a throwaway format's ``feed`` to decode replayed events without
        touching it; ``delivered`` the text on the wire per choice when it is not the reply's
        (reasoning split out of tagged text)."""
        self.resume = ResumeCheck(
            last_id,
            first_id=self.first_event_id,
            reply_id=self.generation_id if self.continued else reply.id,
            delivered=(
                {c.index: c.text for c in reply.choices} if delivered is None else delivered
            ),
            shadow=shadow,
        )

    def expect_sequence(self, after: int | None) -> None:
        """The stream is read again after ``after`` (``None``: it is not a re-read)."""
        self.sequence = None if after is None else SequenceCheck(after)

    def filter(self, sses: list[ServerSentEvent]) -> list[ServerSentEvent]:
        """A read's events without the verified replays.

        :raises ResumeMismatchError: the connection does not continue the stream (the caller
            forgets its bytes, so nothing of it is shown); the checks are over.
        """
        if self.first_event_id is None:
            self.first_event_id = sses[0].id
            if self.continued:  # once per request: one decode of its first event
                self.generation_id = completion_id(sses[0])
        check = self.resume
        if check is not None:
            try:
                sses, over = check.filter(sses)
            except ResumeMismatchError:
                self.resume = None
                raise
            finally:
                self.dropped += check.dropped
                check.dropped = 0
            if over:
                self.resume = None
            if not sses:
                return sses
        numbers = self.sequence
        if numbers is not None:
            try:
                over = numbers.filter(sses)
            except ResumeMismatchError:
                self.sequence = None
                raise
            if over:
                self.sequence = None
        return sses
