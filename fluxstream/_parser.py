"""``StreamParser``: the one sans-IO pipeline, bytes in, normalized events out, reply kept.

It composes :class:`~fluxstream.sse.SSEDecoder`, the wire format named by ``format=`` (a class
of :data:`~fluxstream.formats.FORMATS`, driven through the one contract every format has,
:class:`~fluxstream.formats._contract.WireFormat`) and
:class:`~fluxstream._assembly.ReplyAssembler`. Everything that has bytes drives this one object
(:func:`replay`, the HTTP stream, the CLI), and so does code that already has decoded chunks
from another SDK (:meth:`StreamParser.feed_chunk`), so there is no second copy of the wiring.

Exactly one :class:`~fluxstream._events.End` is emitted over a parser's life, always last:

* by :meth:`~StreamParser.feed` / :meth:`~StreamParser.feed_sse` when the sentinel arrives
  (the transport can stop reading at once: :attr:`~StreamParser.finished` turns true),
* else by :meth:`~StreamParser.close` (the bytes ended), :meth:`~StreamParser.cancel` or
  :meth:`~StreamParser.fail`; these return ``[]`` when the ``End`` was already emitted.

No asyncio here: the parser runs the same under asyncio, trio, or a plain loop.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ._assembly import ReplyAssembler
from ._core.carried import Carried
from ._core.echo import EchoFilter
from ._core.reread import RereadChecks
from ._core.stream_moves import StreamMoves
from ._core.think_tags import TagSplitter, ThinkTags
from ._events import Event
from ._json_paths import PathTracker
from ._limits import DEFAULT_STREAM_LIMITS, StreamLimits
from ._reply import Reply, Segment
from .errors import FluxstreamError, ResumeMismatchError
from .formats import FORMATS, WireFormat
from .formats._contract import FormatClass
from .sse import DEFAULT_MAX_EVENT_BYTES, ServerSentEvent, SSEDecoder

if TYPE_CHECKING:  # pragma: no cover
    from decimal import Decimal

    from ._core.error_hold import ErrorHold
    from ._core.rate_limits import RateLimits
    from ._reply import Usage, UsageEstimate

__all__ = ["StreamParser", "replay"]

_RANDOM = os.urandom
# uuid.UUID's version-4 and RFC 4122 variant bits: cleared by _KEY_MASK, set by _KEY_BITS.
_KEY_MASK = ~((0xC000 << 48) | (0xF000 << 64))
_KEY_BITS = (0x8000 << 48) | (4 << 76)


def new_content_key() -> str:
    """A random content key: exactly ``uuid.uuid4().hex`` (the same random bits from
    ``os.urandom``, version and variant bits set alike), at under half the cost (1 us of a
    parser's 4 us set-up went to building the ``UUID`` object)."""
    return "%032x" % (int.from_bytes(_RANDOM(16), "big") & _KEY_MASK | _KEY_BITS)


#: The wire format a parser reads when none is named.
_DEFAULT_FORMAT = "chat_completions"


class OptInReading:
    """The opt-in views of what a :class:`StreamParser` reads, kept apart from its
    composition of the layers: reasoning split out of tagged text (``think_tags``) and path
    events of JSON documents (``json_paths``). Off, each costs one ``None`` check per read."""

    _tags: TagSplitter | None
    _assembler: ReplyAssembler
    #: Path events of the JSON documents in the reply, when asked for
    #: (:meth:`track_paths`); ``None``, the usual case (set by the parser's ``__init__``).
    paths: PathTracker | None

    def track_paths(self, *, content: bool = False) -> None:
        """Put :class:`~fluxstream._events.PathStart`, ``PathDelta`` and ``PathDone`` after
        the deltas that make them: for every tool call's arguments, and for the text of
        every choice when ``content`` (structured output). From the next read on."""
        self.paths = PathTracker(content=content)

    def _end_tags(self) -> list[Event]:
        """What a tag splitter holds back, applied before an end the I/O layer states."""
        tags = self._tags
        if tags is None or self._assembler.finished:
            return []
        return self._assembler.feed_last(tags.flush(), tags.unclosed())

    def _tags_from_reply(self) -> None:
        """After a resume token: the tag splitter reads on from the reply taken over."""
        if self._tags is not None:
            self._tags.restore(self._assembler.choices())


class StreamParser(OptInReading, StreamMoves):
    """Sans-IO: feed bytes (or SSE events, or decoded chunks); get normalized events.

    :param content_key: stable key of the logical request, stamped on every keyed event
        (generated when not given).
    :param format: the wire format: a name of :data:`~fluxstream.formats.FORMATS`
        (``"chat_completions"``, ``"responses"``, ``"anthropic_messages"``, ``"gemini"``), or
        ``"auto"`` (recognised from the first event; see :mod:`fluxstream.formats.auto`).
    :param max_event_bytes: cap on one SSE event (see :class:`~fluxstream.sse.SSEDecoder`).
    :param strict: raise :class:`~fluxstream.errors.FrameDecodeError` on a data frame whose
        payload is not a JSON object, instead of skipping and counting it.
    :param require_finish_reason: the sentinel when no choice has a finish reason ends
        ``truncated`` ("sentinel without a finish reason"); ``False`` for servers that never
        send finish reasons (see :class:`~fluxstream._assembly.ReplyAssembler`).
    :param limits: caps on server-controlled input (:class:`~fluxstream._limits.StreamLimits`);
        past one, :class:`~fluxstream.errors.LimitExceededError` is raised.
    :param think_tags: reasoning a server sends inside the text between tags
        (``<think>…</think>``) becomes reasoning deltas, the rest text
        (:class:`~fluxstream._core.think_tags.ThinkTags`; off by default).
    """

    _default_format: ClassVar[str] = _DEFAULT_FORMAT

    def __init__(
        self,
        *,
        content_key: str | None = None,
        format: str = _DEFAULT_FORMAT,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        strict: bool = False,
        require_finish_reason: bool = True,
        limits: StreamLimits | None = None,
        think_tags: ThinkTags | None = None,
    ) -> None:
        try:
            format_cls = FORMATS[format]
        except KeyError:
            raise ValueError(
                f"unknown format {format!r}; known: {', '.join(sorted(FORMATS))}"
            ) from None
        self.content_key = content_key or new_content_key()
        self.max_event_bytes = max_event_bytes
        self.strict = strict
        self.require_finish_reason = require_finish_reason
        self.limits = limits = limits or DEFAULT_STREAM_LIMITS
        self._decoder = self._new_decoder()
        self._format_class: FormatClass = format_cls
        self._format: WireFormat = format_cls(self.content_key, strict=strict, limits=limits)
        self._assembler = ReplyAssembler(
            self.content_key, require_finish_reason=require_finish_reason, limits=limits
        )
        self._events = 0
        #: Splits tagged reasoning out of the text (``None``: off, nothing done per delta).
        self._tags = None if think_tags is None else TagSplitter(think_tags, self.content_key)
        # Counts and SSE state of the decoders and formats replaced (connections before the
        # current one, other upstreams' wire formats), and bytes read after the end.
        self._carried = Carried()
        # A continuation's first text, until its echo is cut (begin_continuation).
        self._echo: EchoFilter | None = None
        # A reconnect's or a re-read's first events are checked before they are trusted.
        self._checks = RereadChecks()
        # Where the stream being read began in the reply (another upstream's, a
        # continuation): a Last-Event-ID reconnect's replays are decoded from there, so
        # that an honest replay matches what was delivered. ``None``: at the reply's start.
        self._generation_start: tuple[Reply, dict[str, Any]] | None = None
        #: An error found part way through a read whose earlier events were delivered:
        #: raised by the next :meth:`feed`, stated by :meth:`close` (see _apply_delivering).
        self._deferred: FluxstreamError | None = None
        #: Each upstream's part of the reply (set by the I/O layer when a stream has
        #: fallbacks; see :class:`~fluxstream._reply.Segment`).
        self.segments: list[Segment] = []
        #: Set by the I/O layer while another upstream could take the reply over: each read's
        #: events pass its :meth:`~fluxstream._core.error_hold.ErrorHold.screen` before they
        #: reach the reply, and while it holds any the reply does not end at the sentinel
        #: (what it held reaches the reply by :meth:`apply_held`, or never).
        self.hold: ErrorHold | None = None
        #: What the headers of the response being read say (set by the I/O layer; read
        #: only when asked): the reply's request id.
        self.rate_limits: RateLimits | None = None
        self.paths = None

    def __repr__(self) -> str:
        state = self._assembler.outcome.value if self._assembler.outcome else "streaming"
        return f"<StreamParser {state} key={self.content_key!r}>"

    # ------------------------------------------------------------------ feeding

    def feed(self, data: bytes) -> list[Event]:
        """One read of the body; returns the events it completed (may be ``[]``).

        Bytes after the sentinel (or after any ``End``) are counted and ignored.
        """
        if self._format.done or self._assembler.finished:
            self._carried.bytes += len(data)
            return []
        deferred = self._deferred
        if deferred is not None:  # raised now, after the events before it were delivered
            self._deferred = None
            self._carried.bytes += len(data)
            raise deferred
        sses = self._decoder.feed(data)
        lines = self._decoder.foreign_lines
        if not sses:
            if not lines:
                return []
            hold = self.hold
            taken = self._take_lines()
            return self._apply_delivering(taken if hold is None else hold.screen(taken))
        checks = self._checks
        if (checks.first_event_id is None or checks.resume is not None
                or checks.sequence is not None):
            try:
                sses = checks.filter(sses)
            except ResumeMismatchError:
                self._decoder = self._new_decoder()  # nothing of the rejected connection stays
                raise
            if not sses:
                return []
        self._events += len(sses)
        batch: list[Event] = []
        try:
            # The whole read in one call (the events appended to ``batch``, so that those
            # before a raise are kept): fewer calls per event.
            self._format.feed_many(sses, batch)
            if lines:
                # After the read's events: the raw object Gemini sends ends the body.
                batch += self._take_lines()
        except FluxstreamError as exc:
            # A strict-mode bad frame, or a frame past a StreamLimits limit: what came
            # before it in the same read is kept, delivered now, and the error raised by the
            # next feed (or stated by close): a consumer sees every delta the reply holds.
            events = self._apply_delivering(batch) if batch else []
            if not events:
                raise
            if self._deferred is None:
                self._deferred = exc
            return events
        hold = self.hold  # what it lets through
        return self._apply_delivering(batch if hold is None else hold.screen(batch))

    def apply_held(self, events: list[Event]) -> list[Event]:
        """Events :attr:`hold` kept back from a read, applied now as if they had not been
        (no other upstream takes the reply over: an error event ends it ``failed``)."""
        return self._apply_delivering(events) if events else []

    def _apply_delivering(self, batch: list[Event]) -> list[Event]:
        """:meth:`_apply`; when the assembler raises part way (``max_reply_chars``,
        ``max_tool_calls``), the events it applied are returned and the error deferred to
        the next :meth:`feed` or :meth:`close`, so nothing in the reply goes undelivered."""
        try:
            return self._apply(batch)
        except FluxstreamError as exc:
            asm = self._assembler
            applied, asm.applied_before_error = asm.applied_before_error, []
            if not applied:
                raise
            self._deferred = exc
            return applied if self.paths is None else self.paths.feed(applied)

    def feed_sse(self, event: ServerSentEvent) -> list[Event]:
        """One SSE event decoded elsewhere (e.g. by ``httpx-sse``)."""
        if self._assembler.finished:
            return []
        self._events += 1
        return self._apply(self._format.feed(event))

    def feed_chunk(self, obj: Mapping[str, Any] | Any) -> list[Event]:
        """One chunk another SDK already decoded: a mapping, or an object with ``model_dump()``
        (openai-python's ``ChatCompletionChunk``). Without bytes there is no sentinel, so end
        with :meth:`close` (outcome ``finished`` when every choice finished)."""
        if self._assembler.finished:
            return []
        return self._apply(self._format.feed_chunk(_as_mapping(obj)))

    def feed_completion(self, obj: Mapping[str, Any] | Any) -> list[Event]:
        """A whole non-streaming ``chat.completion`` body; :meth:`close` then ends ``done``."""
        if self._assembler.finished:
            return []
        return self._apply(self._format.feed_completion(_as_mapping(obj)), end=False)

    def _shift(self, by: int) -> None:
        self._format.shift_text(0, by)

    def _take_lines(self) -> list[Event]:
        """The lines outside any SSE field the decoder collected, read by the format."""
        decoder = self._decoder
        lines, decoder.foreign_lines = decoder.foreign_lines or [], []
        return self._format.feed_lines([line.decode("utf-8", "replace") for line in lines])

    def _apply(
        self, events: list[Event], *, end: bool = True, final: bool = False
    ) -> list[Event]:
        fmt = self._format
        asm = self._assembler
        if fmt.new_choices:
            asm.add_choices(fmt.new_choices)
            fmt.new_choices.clear()
        echo = self._echo
        if echo is not None and (events or fmt.done or final):
            events = echo.filter(events, self.content_key, self._shift, fmt.done or final)
            if not echo.deciding:
                self._echo = None
        ending = end and fmt.done and (self.hold is None or not self.hold.held)
        tags = self._tags
        if tags is not None and (events or final or ending):
            events = tags.split(events) if events else events
            if final or ending:
                events = events + tags.flush()
                asm.mark_unclosed(tags.unclosed())
        if events:
            events = asm.feed(events)
            if self.paths is not None:
                events = self.paths.feed(events)
        if ending:
            ended = asm.end(sentinel=True, cut=False, reason=fmt.done_reason or "sentinel")
            events = events + ended if events else ended
        return events

    # ------------------------------------------------------------------ ends

    def close(self, *, cause: BaseException | None = None) -> list[Event]:
        """The bytes ended (``cause``: the transport error that ended them, if any).

        Flushes a pending event (an unterminated final ``data:`` line still counts; a payload
        cut mid-JSON is dropped silently and makes the stream ``truncated``), then ends with
        the ``End``. Returns ``[]`` if an ``End`` was already emitted.

        :raises FluxstreamError: the last read found an error (a limit crossed, a bad frame in
            strict mode) after events it delivered: the reply ends ``failed`` and the error is
            raised here, as :meth:`feed` would have raised it.
        """
        asm = self._assembler
        if asm.finished:
            return []
        deferred = self._deferred
        if deferred is not None:
            self._deferred = None
            asm.fail(f"{type(deferred).__name__}: {deferred}")
            raise deferred
        fmt = self._format
        events: list[Event] = []
        decoder = self._decoder
        delivered_id = self.last_event_id
        if not fmt.done:
            try:
                sses = decoder.close()
            except FluxstreamError as exc:
                # The decoder failed (an event over max_event_bytes, too many bytes without an
                # event) after delivering what came before: keep it, end failed, never raise.
                events = self._apply(events, end=False, final=True)
                return events + asm.fail(f"{type(exc).__name__}: {exc}")
            self._events += len(sses)
            for sse in sses:
                events += fmt.feed(sse, at_eof=True)
            if decoder.foreign_lines:
                events += self._take_lines()
            # A format without an end marker (Gemini) decides here whether the reply is done.
            events += self._format.body_ended(cause is None)
        events = self._apply(events, end=False, final=True)
        if not fmt.done and fmt.cut:
            # The event flushed at the end was cut short and dropped: its id must not count
            # as delivered, or a resume from this point would skip it.
            self._decoder = self._new_decoder()
            self._carried.decoder_replaced(decoder, delivered_id)
        reason, cut = _bytes_ended(fmt, decoder, cause)
        return events + asm.end(sentinel=fmt.done, cut=cut, reason=reason)

    def usage_parts(self) -> tuple[Usage | None, UsageEstimate | None, bool]:
        """The reply's usage, its estimate and whether the usage is only a snapshot sent
        before the end: what settling a stream reads of it (see
        :meth:`fluxstream._usage.UsageLedger.settle_parts`), without a snapshot."""
        asm = self._assembler
        return asm.usage, asm.usage_estimate, asm.usage_partial

    def settle(self, estimate: UsageEstimate | None, cost: Decimal | None) -> None:
        """The reply's usage estimate and cost, once the stream has ended
        (:class:`fluxstream._usage.UsageLedger`): every snapshot from now on carries them."""
        self._assembler.usage_estimate = estimate
        self._assembler.cost = cost

    def cancel(self, reason: str) -> list[Event]:
        """The caller cancelled: outcome ``cancelled``, everything received is kept."""
        return self._end_tags() + self._assembler.cancel(reason)

    def end_at_length(self, reason: str) -> list[Event]:
        """The reply's length cap is spent (a reply continued across upstreams, counted by
        the I/O layer): what an echo check still holds is delivered, every unfinished
        choice finishes ``length`` and the reply ends ``finished``, nothing more asked."""
        events = self._apply([], end=False, final=True)
        return events + self._assembler.end_at_length(reason)

    def fail(self, reason: str, error: BaseException | None = None) -> list[Event]:
        """The transport or protocol failed (``error`` is informational): outcome ``failed``."""
        self._deferred = None
        return self._end_tags() + self._assembler.fail(reason)

    @property
    def pending_error(self) -> FluxstreamError | None:
        """An error the last read found after the events :meth:`feed` returned for it (a
        limit crossed, a bad frame in strict mode): the next ``feed`` or ``close`` raises
        it. An I/O layer ends the stream with it (:meth:`fail`) at once instead of waiting
        for more bytes."""
        return self._deferred

    # ------------------------------------------------------------------ state

    @property
    def reply(self) -> Reply:
        """A snapshot of the reply so far (rebuilds only what changed since the last one)."""
        fmt = self._format
        decoder = self._decoder
        carried = self._carried
        return self._assembler.snapshot(
            id=fmt.id,
            model=fmt.model,
            events=self._events,
            skipped_frames=carried.skipped + fmt.skipped,
            # SSE comments, plus in-band keep-alives the format counts (Anthropic ``ping``).
            heartbeats=carried.comments + decoder.comments + carried.heartbeats + fmt.heartbeats,
            bytes=carried.bytes + decoder.bytes_fed,
            segments=self.segments,
            request_id=None if self.rate_limits is None else self.rate_limits.request_id,
        )

    def partial_arguments(self, choice: int = 0, call: int = 0) -> Any:
        """Best-effort JSON value of tool call ``call`` of ``choice`` as far as it arrived
        (``KeyError`` if there is no such call). Same value as
        ``reply.choices[..].tool_calls[..].partial_arguments()`` but without building a
        snapshot: O(new fragments + the open part of the value) per call."""
        return self._assembler.partial_arguments(choice, call)

    @property
    def finished(self) -> bool:
        """An ``End`` was emitted."""
        return self._assembler.finished

    @property
    def complete(self) -> bool:
        """At least one choice exists and every choice has a finish reason (a drop now would
        end ``finished``, so there is nothing to resume)."""
        return self._assembler.all_finished

    @property
    def in_event(self) -> bool:
        """Part of an event (or of a line) has been read and the rest has not come yet."""
        return self._decoder.in_event

    @property
    def saw_content(self) -> bool:
        """Any text, reasoning, refusal or tool-call delta arrived."""
        return self._assembler.saw_content

    @property
    def done(self) -> bool:
        """The sentinel (or a complete non-streaming body) arrived."""
        return self._format.done


def _bytes_ended(
    fmt: WireFormat, decoder: SSEDecoder, cause: BaseException | None
) -> tuple[str, bool]:
    """Why the bytes ended, as the reply's end states it, and whether they were cut short."""
    if fmt.done:
        return fmt.done_reason or "sentinel", fmt.cut
    reason = "eof mid-event" if decoder.ended_mid_event else "eof"
    if cause is None:
        return reason, fmt.cut
    # A transport error is never a clean end: without the sentinel it is a truncation, even
    # if every choice had already finished.
    return f"{reason}: {type(cause).__name__}: {cause}", True


def _as_mapping(obj: Mapping[str, Any] | Any) -> Mapping[str, Any]:
    if isinstance(obj, Mapping):
        return obj
    dump = getattr(obj, "model_dump", None)
    if dump is None:
        raise TypeError(f"expected a mapping or an object with model_dump(), got {type(obj)!r}")
    try:
        # Only what the provider sent; no warnings for values that do not fit the other SDK's
        # declared types (Mistral list content, object arguments): we read them as they are.
        data = dump(exclude_unset=True, warnings=False)
    except TypeError:
        data = dump()
    if not isinstance(data, Mapping):
        raise TypeError(f"model_dump() returned {type(data)!r}, not a mapping")
    return data


def replay(reads: Iterable[bytes], **parser_kwargs: Any) -> Reply:
    """Run recorded reads (a file's bytes, a fixture in chunks) through a parser; the reply."""
    parser = StreamParser(**parser_kwargs)
    for data in reads:
        parser.feed(data)
    parser.close()
    return parser.reply
