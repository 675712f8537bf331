"""One racer of a hedged first connect, and its reading until the first content.

Only a parser knows when content came, so each racer is read until then into one: the first
upstream of a stream's first request into the stream's own parser (what it gave is the
reader's first read if it serves, :class:`RaceReads`), every other racer into a probe, a
throwaway parser of its API, keeping the bytes to put back in front of its body if it
serves. How a race is run and how it ends are :mod:`.hedge`'s, :mod:`.hedge_timer`'s and
:mod:`.hedge_racers`'; this module only connects a racer and reads it, the same whichever
path runs the race (the reads of a racer before content pay for nothing else).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio

from .._core.failover import reason_of
from .._core.progress import CONTENT_EVENTS
from .._events import ErrorEvent, Event
from .._observe import FIRST_SEND
from .._parser import StreamParser
from ..errors import FluxstreamError
from .attempt import Attempt, RequestSpec
from .channel import Channel
from .failover import Target

__all__ = [
    "RaceReads", "Racer", "decided", "hedge_connect", "probe_for", "probed", "read_first",
    "run_racer",
]

#: Bytes read from one racer without content before the race stops waiting on it: it is
#: talking (pings, metadata), and the reader's own limits decide from there.
_MAX_BUFFERED = 1 << 20
#: Reads of one racer before that (a server may send a byte at a time).
_MAX_READS = 100_000


class RaceReads:
    """What a race read of the upstream that serves into the stream's own parser: the
    events the parser gave for those reads, and the error its last one raised (the reader
    acts on both as on a read of its own)."""

    __slots__ = ("error", "events")

    def __init__(self, events: list[Event], error: FluxstreamError | None) -> None:
        self.events = events
        self.error = error


class Racer:
    """One upstream in the race: its request, what was read so far, and how it settled."""

    def __init__(self, target: Target, probe: StreamParser | None) -> None:
        self.target = target
        #: The parser of its reads: a throwaway of its API that only tells when content came
        #: (its bytes, kept in :attr:`chunks`, are parsed again by the reader if it serves),
        #: or ``None``: the stream's own parser, whose events are kept in :attr:`events`.
        self.probe = probe
        self.attempt: Attempt | None = None
        self.chunks: list[bytes] = []
        #: What the stream's own parser gave for its reads, and the error one raised.
        self.events: list[Event] = []
        self.parse_error: FluxstreamError | None = None
        #: It was read into the stream's parser at least once.
        self.read_in = False
        #: Its reads were taken out of the stream's parser (it lost): it reads no more in.
        self.forgotten = False
        #: Its body ran out (nothing more to read after :attr:`chunks`).
        self.ended = False
        #: What ended it badly: the connect's error or a read's (replayed to the reader).
        self.error: BaseException | None = None
        #: Its first-token deadline passed while it was read.
        self.late = False
        #: An error event came before any content.
        self.error_event = False
        #: Content came (or a whole reply, or so much that the reader decides).
        self.won = False
        #: The hedge's request (made when the hedge is sent).
        self.spec: RequestSpec | None = None

    @property
    def reason(self) -> str:
        """Why it failed, as a segment's ``ended`` and a handoff's ``reason``."""
        if self.late:
            return "first_token timeout"
        if self.error is not None:
            return reason_of(self.error)
        if self.error_event:
            return "error event before content"
        return "connection closed before content"


async def run_racer(
    channel: Channel, racer: Racer, connect: Callable[[], Awaitable[Attempt]]
) -> None:
    """Connect, then read until content (or the end, or a failure). A connect that failed
    leaves no attempt: the racer never answered."""
    try:
        attempt = await connect()
    except Exception as exc:  # raised to the reader if this racer is left to serve
        racer.attempt = None
        racer.error = exc
    else:
        racer.attempt = attempt
        try:
            if attempt.is_json:  # the whole reply in one body
                racer.won = True
            else:
                await read_first(channel, racer, attempt)
        except Exception as exc:  # replayed to the reader after the bytes read
            racer.error = exc


async def read_first(channel: Channel, racer: Racer, attempt: Attempt) -> None:
    """Read ``racer`` until content, into its probe (keeping the bytes) or into the
    stream's own parser (keeping its events); bounded by the stream's ``first_token``
    deadline (else by the HTTP library's read timeout, as any read)."""
    probe = racer.probe
    parser = channel.parser
    if attempt is channel.attempt:  # the first racer's: as the reader reads it
        body = channel.direct_body()
        read = channel.receive if body is None else body.__anext__
    else:
        read = attempt.read
    progress = channel.progress
    size = 0
    for _ in range(_MAX_READS):
        left = progress.first_token_left(time.monotonic())
        data: bytes | None = None
        try:
            if left is None:  # no first-token deadline: no scope either
                data = await read()
            else:
                with anyio.move_on_after(left):
                    data = await read()
        except StopAsyncIteration:
            racer.ended = True
            return
        if data is None:
            racer.late = True
            return
        size += len(data)
        if probe is None:
            if racer.forgotten:  # it lost meanwhile (a read that came with the cancel)
                return
            try:
                events = parser.feed(data)
            except FluxstreamError as exc:  # the reader acts on it, as on its own read
                racer.read_in = True
                racer.parse_error = exc
                return
            racer.read_in = True
            racer.events += events
            settled = True if parser.saw_content else decided(parser, events)
            if settled is None and parser.pending_error is not None:
                return  # as the reader, which acts on it before reading on
        else:
            racer.chunks.append(data)
            try:
                settled = probed(probe, data)
            except FluxstreamError:  # the reader's parser meets it again, and decides
                return
        if settled is not None:
            racer.error_event = not settled
            racer.won = settled
            return
        if size > _MAX_BUFFERED:
            racer.won = True
            return
    racer.won = True


def hedge_connect(
    channel: Channel, racer: Racer, spec: RequestSpec
) -> Callable[[], Awaitable[Attempt]]:
    """The hedge's connect: ``spec`` sent as the stream's first request would be (its
    first-byte deadline, the parser's size limit, the observers that take part in
    requests), its attempt on ``racer`` at once so that a cancel reaches it connecting."""

    async def connect() -> Attempt:
        head = channel.progress.head_wait(time.monotonic(), False)
        attempt = racer.attempt = Attempt(spec, head=head)
        limit = channel.parser.max_event_bytes
        if spec.sending is None:
            await attempt.open(max_json_bytes=limit)
        else:  # observers that take part in requests (trace headers) see it too
            own: dict[str, str] = {}
            with spec.sending(own, FIRST_SEND):
                await attempt.open(headers=own, max_json_bytes=limit)
        return attempt

    return connect


def probe_for(parser: StreamParser, target: Target) -> StreamParser:
    """A throwaway parser of ``target``'s API, with the stream's ``parser``'s settings: it
    tells when content came."""
    return StreamParser(
        content_key=parser.content_key, format=target.api.name,
        max_event_bytes=parser.max_event_bytes, strict=parser.strict,
        require_finish_reason=parser.require_finish_reason, limits=parser.limits,
    )


def decided(parser: StreamParser, events: list[Event]) -> bool | None:
    """What :func:`probed` decides of a read, for the stream's own parser that has just
    read it (``events``: what it gave): ``True`` when content came (or the reply finished),
    ``False`` for an error event before content, ``None`` when neither. While another
    upstream could take the reply over, the parser's hold keeps an error event and the rest
    of its read out of the reply: content after it in that read is content all the same."""
    if not parser.saw_content:
        hold = parser.hold
        if hold is not None and hold.held:
            return any(type(event) in CONTENT_EVENTS for event in hold.held)
        if any(type(event) is ErrorEvent for event in events):
            return False
        if not parser.finished:
            return None
    return True


def probed(probe: StreamParser, data: bytes) -> bool | None:
    """``data`` through ``probe`` an event at a time, up to the first content: ``True`` when
    content came (or the reply finished), ``False`` for an error event before content,
    ``None`` when neither (read on). A read often holds the whole reply, and only its start
    decides the race: the reader parses all of it anyway. Cutting at blank lines is only a
    guess at event boundaries (a stream with CR LF line ends is fed in one piece); the parser
    gives the same events at any cut."""
    start, size = 0, len(data)
    while start < size:
        cut = data.find(b"\n\n", start)
        end = size if cut < 0 else cut + 2
        events = probe.feed(data[start:end] if start or end < size else data)
        if not probe.saw_content and any(type(e) is ErrorEvent for e in events):
            if end < size:  # as the reader sees this read: content after it in it wins
                probe.feed(data[end:])
            return probe.saw_content
        if probe.saw_content or probe.finished:
            return True
        start = end
    return None
