"""The moves of a parser between connections and upstreams: the transitions half of
``StreamParser``.

A stream's reply outlives the connection that began it: a reconnect reads on from a fresh
decoder (:meth:`~StreamMoves.new_connection`), another upstream of maybe another API goes on
with it (:meth:`~StreamMoves.switch_format`), a continuation asks for its rest with the text so
far as a prefix (:meth:`~StreamMoves.begin_continuation`), a restart replaces it
(:meth:`~StreamMoves.reset`), and a hedged racer that lost leaves nothing in it
(:meth:`~StreamMoves.forget_reads`). Each says what of the parser's parts is new and what goes
on; none is called per read. They live apart from the reading (``fluxstream/_parser.py``),
which inherits them, so that the parser's class holds what runs per read and these read as
one list of what the I/O layer may do between reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._assembly import ReplyAssembler
from ..formats import FORMATS, WireFormat
from ..sse import SSEDecoder
from .carried import Carried
from .echo import continuation
from .resume_token import go_on_from
from .stream_position import StreamPosition

if TYPE_CHECKING:  # pragma: no cover
    from .._events import Event
    from .._json_paths import PathTracker
    from .._limits import StreamLimits
    from .._reply import Reply
    from ..errors import FluxstreamError
    from ..formats._contract import FormatClass
    from .echo import EchoFilter
    from .error_hold import ErrorHold
    from .reread import RereadChecks
    from .think_tags import TagSplitter

__all__ = ["StreamMoves"]


class StreamMoves(StreamPosition):
    """A parser's moves between connections and upstreams, made on its parts (see the
    module docstring); the parser's ``__init__`` sets every part named here."""

    _format_class: FormatClass
    _events: int
    _tags: TagSplitter | None
    _echo: EchoFilter | None
    _checks: RereadChecks
    _generation_start: tuple[Reply, dict[str, Any]] | None
    _deferred: FluxstreamError | None

    if TYPE_CHECKING:  # pragma: no cover
        # The parser's public parts, declared for the type checker only: they are the
        # parser's (documented there), not attributes of their own of these moves.
        content_key: str
        max_event_bytes: int
        strict: bool
        require_finish_reason: bool
        limits: StreamLimits
        paths: PathTracker | None
        hold: ErrorHold | None

        @property
        def reply(self) -> Reply: ...

    def new_connection(self, *, resume_after: str | None = None) -> None:
        """A reconnect: a fresh SSE decoder (keeping the last event ID and retry time); the
        assembly state and offsets stay, so the reply continues.

        ``resume_after``: the ``Last-Event-ID`` the transport sends; recorded as the last event
        ID (the server continues after it). When it is numeric, events the new connection
        carries at or below it are dropped as already delivered, so a server that ignores
        the header and starts over never shows text twice.
        """
        carried = self._carried
        carried.reconnection_time = self.reconnection_time
        carried.decoder_replaced(self._decoder, self.last_event_id)
        self._checks.resume = None
        if resume_after is not None:
            carried.last_event_id = resume_after
            # A throwaway format decodes replayed events without touching the reply.
            shadow = self._format_class(self.content_key, strict=False, limits=self.limits)
            if self._generation_start is not None:
                go_on_from(shadow, *self._generation_start)
            reply, tags = self.reply, self._tags
            self._checks.reconnected(resume_after, reply, shadow.feed,
                                     None if tags is None else tags.delivered(reply.choices))
        self._decoder = self._new_decoder()
        # Anthropic restates ``message_start`` on a continuation; Responses re-reads events
        # it delivered already: each format knows what a new connection means for it.
        self._format.new_connection()
        self._expect_sequence()

    def _expect_sequence(self) -> None:
        """A Responses stream read again after ``N`` (a re-read, a token): check that it
        goes on at ``N + 1`` (see :class:`~fluxstream._core.resume_check.SequenceCheck`)."""
        self._checks.expect_sequence(self.sequence)

    def _new_decoder(self) -> SSEDecoder:
        decoder = SSEDecoder(
            max_event_bytes=self.max_event_bytes,
            max_bytes_without_event=self.limits.max_bytes_without_event,
        )
        # Lines outside any SSE field go to the format (Gemini sends an error as a raw JSON
        # object on lines of their own); the others ignore them, as the spec says.
        decoder.foreign_lines = []
        return decoder


    def reset(self, attempt: int, reason: str) -> list[Event]:
        """A restart (a new generation replaces the old one): fresh decoder, format and
        assembly state, announced by a :class:`~fluxstream._events.Reset` event."""
        self.new_connection()
        self._format.reset()
        if self._tags is not None:
            self._tags.reset()
        self._checks.expect_sequence(None)  # a new generation: its numbers start over
        self._generation_start = None
        if self.paths is not None:
            self.paths.reset()
        return self._assembler.reset(attempt, reason)

    def forget_reads(self) -> None:
        """Back to the parser as it was before anything was fed: for a parser read nothing
        before these reads (a stream's first response), when they must leave nothing in the
        reply (that upstream lost a hedged race, or the race was cancelled before any of its
        events was delivered). Its id and model, counts, event id and ``retry:`` time, usage
        and what the hold holds are gone; its settings, wire format (a fresh one of the same
        API), think tags and path tracking stay, and so do the I/O layer's parts (segments,
        rate limits)."""
        self._decoder = self._new_decoder()
        self._format = self._format_class(self.content_key, strict=self.strict, limits=self.limits)
        self._assembler = ReplyAssembler(
            self.content_key, require_finish_reason=self.require_finish_reason,
            limits=self.limits,
        )
        self._events = 0
        self._carried = Carried()
        self._checks.forget_connection()
        self._deferred = None
        if self._tags is not None:
            self._tags.reset()
        if self.paths is not None:
            self.paths.reset()
        if self.hold is not None:
            self.hold.drop()

    def switch_format(self, format: str) -> None:
        """Another upstream, maybe of another API, goes on with this reply: its wire format
        reads the next connection, starting at the offsets delivered so far (the reply, its
        offsets and its id stay). Call before :meth:`begin_continuation` or :meth:`reset`."""
        format_cls = FORMATS[format]
        if self._tags is not None and not self._assembler.saw_content:
            self._tags.reset()  # nothing shown: what it held is no part of the next reply
        old = self._format
        new: WireFormat = format_cls(self.content_key, strict=self.strict, limits=self.limits)
        start = self._generation_start = (self.reply, self._assembler.offsets())
        go_on_from(new, *start)
        new.id, new.model = old.id, old.model
        self._carried.format_replaced(old)
        self._format = new
        # Replays after a Last-Event-ID reconnect are decoded (and checked) in this API now.
        self._format_class = format_cls
        self.new_connection()
        self._checks.new_generation()  # another server: its ids and completion id are its own

    # ------------------------------------------------------------------ continuations

    def continuable(self) -> bool:
        """A continuation (re-request with the partial text as an assistant prefix) can
        extend this reply: one choice with text, no tool call, refusal, finish reason or
        error, and not ended."""
        return self._assembler.continuable()

    def begin_continuation(self, *, min_overlap: int = 8) -> str:
        """Prepare for a continuation request; returns the assistant prefix to send.

        A fresh SSE decoder is used; the reply and offsets go on. The prefix is sent without
        trailing whitespace, and what the provider echoes of it at the start (a suffix of at
        least ``min_overlap`` code points, or the whole prefix if shorter, or the whitespace
        not sent) is cut, so nothing is shown twice (:mod:`fluxstream._core.echo`).
        """
        if not self.continuable():
            raise ValueError("this reply cannot be continued (see StreamParser.continuable)")
        # With tags the model goes on after its text as sent, its reasoning in its tags.
        tags, asm = self._tags, self._assembler
        text = asm.text_of(0) if tags is None else tags.wire_of(asm.choices()[0])
        sent, self._echo = continuation(text, min_overlap)
        self._generation_start = (self.reply, asm.offsets())
        self.new_connection()
        # A continuation is a new response (Responses API: sequence numbers from 0 again).
        self._format.continued()
        self._checks.expect_sequence(None)  # a new response: its numbers start over
        self._checks.new_generation()  # and its event ids and completion id are its own
        return sent

