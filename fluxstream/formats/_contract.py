"""The contract between :class:`~fluxstream._parser.StreamParser` and a wire format, and the
registry of formats.

Why one explicit contract: the parser drives every format through the same calls (feeding,
reconnecting, resuming, the state a resume token carries), so each of them is declared here
and every format implements all of them (:class:`~fluxstream.formats._base.FormatBase` gives
the defaults a format without the feature needs). mypy then checks each call; the parser
never asks whether a format happens to have a hook.

Why a registry object down here: :data:`FORMATS` is listed in ``fluxstream/formats/__init__.py``
(a new format is its module plus one line there), but ``auto``'s detection and the Chat
Completions format's "an event of another format" check must loop over the registered
formats without importing the package that lists them (an import circle). So the dict is
created here, below every format, and filled by the package; any import of a format module
runs the package first, so it is always filled when it is read.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Protocol

from .._events import Event
from .._limits import StreamLimits
from ..sse import ServerSentEvent

__all__ = ["FORMATS", "Claim", "FormatClass", "WireFormat"]


class Claim(enum.IntEnum):
    """How sure a format is that an event (or a whole body) is its own.

    ``format="auto"`` asks every registered format and takes the surest claim (the first
    format in :data:`FORMATS` order on a tie): an event's own ``type`` (``SURE``) outranks
    its ``event:`` line (``LIKELY``), which outranks a shape any untyped payload may have
    (``WEAK``: Chat Completions, the only format whose events have no ``type``).
    """

    NO = 0
    WEAK = 1
    LIKELY = 2
    SURE = 3


class WireFormat(Protocol):
    """What :class:`~fluxstream._parser.StreamParser` calls on a format (every format has all
    of it; ``auto`` passes each call on to the format it chose)."""

    key: str
    strict: bool
    limits: StreamLimits
    id: str | None
    model: str | None

    @property
    def done(self) -> bool:
        """The stream's terminal event (or a whole body) arrived."""
    @property
    def done_reason(self) -> str | None: ...
    @property
    def cut(self) -> bool:
        """A payload cut by the end of the bytes was dropped."""
    @property
    def skipped(self) -> int: ...
    @property
    def heartbeats(self) -> int:
        """In-band keep-alives (Anthropic ``ping``): counted like SSE comments."""
    @property
    def new_choices(self) -> list[int]:
        """Choices first seen since the parser last cleared the list."""
    @property
    def response_id(self) -> str | None:
        """The response a re-read (``starting_after``) reads again; ``None``: no such
        resume in this format."""

    # ------------------------------------------------------------------ feeding
    def feed(self, sse: ServerSentEvent, *, at_eof: bool = False) -> list[Event]: ...
    def feed_many(self, sses: list[ServerSentEvent], out: list[Event]) -> None:
        """:meth:`feed` each event, appending to ``out`` (kept when one raises)."""
    def feed_chunk(self, obj: Mapping[str, Any]) -> list[Event]: ...
    def feed_completion(self, obj: Mapping[str, Any]) -> list[Event]: ...
    def feed_lines(self, lines: list[str]) -> list[Event]:
        """Lines the SSE decoder read outside any field it knows (Gemini's raw error
        object); formats whose servers send none ignore them, as the spec says."""
    def body_ended(self, clean: bool) -> list[Event]:
        """The bytes ended (``clean``: without a transport error): a format with no end
        marker (Gemini) decides here whether the reply is done."""

    # ------------------------------------------------------------------ connections
    def reset(self) -> None:
        """A new generation: offsets start over."""
    def new_connection(self) -> None:
        """A new connection goes on with this reply (a reconnect, a continuation)."""
    def continued(self) -> None:
        """A continuation request follows (a new response of the same reply)."""
    def errored_before(self) -> None:
        """An error arrived before ``auto`` chose this format."""

    # ------------------------------------------------------------------ resume tokens
    def restore(self, offsets: dict[str, Any], calls: dict[int, dict[int, tuple[Any, Any]]],
                finishes: dict[int, str | None]) -> None: ...
    def shift_text(self, choice: int, by: int) -> None: ...
    def resume_sequence(self) -> int | None:
        """The ``sequence_number`` a re-read starts after; ``None``: none usable."""
    def resume_state(self) -> dict[str, Any] | None:
        """What a resume token must carry beyond the reply (``None``: nothing)."""
    def restore_state(self, state: Any) -> None: ...
    def restore_position(self, sequence: int | None, response_id: str | None) -> None:
        """A token's re-read position (``sequence`` already checked as a count)."""


class FormatClass(Protocol):
    """A registered format class (its name is its key in :data:`FORMATS`): its detection
    rules and its constructor."""

    @property
    def sentinel(self) -> str | None:
        """The data line that ends the format's streams (``[DONE]``): it names the format."""

    @property
    def rereads(self) -> bool:
        """Whether its stream carries a re-read position (a sequence number, a response id)."""

    def __call__(self, key: str, *, strict: bool = ...,
                 limits: StreamLimits = ...) -> WireFormat: ...
    def claims(self, event: str, payload: Mapping[str, Any] | None) -> Claim:
        """How sure the format is that an SSE event (its ``event:`` name and decoded
        payload; ``None`` before it is decoded) is its own."""
    def claims_body(self, body: Mapping[str, Any]) -> Claim:
        """The same for a whole non-streaming body."""
    def reads_body(self, body: Mapping[str, Any]) -> bool:
        """Whether a whole non-streaming body is one the format reads (its reply object, or
        an error object): anything else is no reply, and a stream given it fails."""
    def claims_state(self, state: Mapping[str, Any], sequence: int | None) -> Claim:
        """The same for a resume token's wire state (and its ``sequence``)."""


#: Format name -> format class (filled in ``fluxstream/formats/__init__.py``).
FORMATS: dict[str, FormatClass] = {}
