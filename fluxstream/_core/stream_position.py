"""Where a parser's stream stands, as a resume needs it: the position half of ``StreamParser``.

A reconnect sends ``Last-Event-ID`` (:attr:`~StreamPosition.last_event_id`) after waiting the
server's ``retry:`` time (:attr:`~StreamPosition.reconnection_time`); a Responses re-read asks
for the events after a ``sequence_number`` of a response id; a resume token records all of
them with the reply, its offsets and the wire format's own state, and a parser is made again
from one (:meth:`~StreamPosition.from_token`). None of it is parsing: it reads the parser's
parts (the decoder of the current connection, the counts carried over from the replaced ones,
the wire format, the assembler) and says where the stream is, so it lives apart from the
parser, which inherits it, as one view a resume reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ..errors import ResumeTokenError
from ..formats._base import MAX_SEQUENCE
from .carried import Carried
from .resume_token import DAMAGE, MAX_ID_CHARS, damaged, read_token

if TYPE_CHECKING:  # pragma: no cover
    from .._assembly import ReplyAssembler
    from ..formats import WireFormat
    from ..sse import SSEDecoder

__all__ = ["StreamPosition"]

_Parser = TypeVar("_Parser", bound="StreamPosition")


class StreamPosition:
    """A parser's position, read from its parts (see the module docstring)."""

    #: The wire format a token is read for when the parser is made without ``format=``.
    _default_format: ClassVar[str]
    _decoder: SSEDecoder
    _format: WireFormat
    _assembler: ReplyAssembler
    _carried: Carried

    def __init__(self, **parser_kwargs: Any) -> None:  # pragma: no cover - the parser's own
        raise NotImplementedError

    @property
    def last_event_id(self) -> str:
        """The last SSE event id delivered, on this connection or a replaced one."""
        return self._decoder.last_event_id or self._carried.last_event_id

    @property
    def reconnection_time(self) -> int | None:
        """The server's last ``retry:`` time in milliseconds (``None``: it sent none)."""
        time = self._decoder.reconnection_time
        return time if time is not None else self._carried.reconnection_time

    @property
    def sequence(self) -> int | None:
        """Responses API: the highest ``sequence_number`` delivered (``None``: another
        format, none seen yet, or numbers that went backwards, which cannot order a re-read):
        the ``starting_after`` of OpenAI's resume."""
        seq = self._format.resume_sequence()
        return seq if type(seq) is int and 0 <= seq < MAX_SEQUENCE else None

    @property
    def response_id(self) -> str | None:
        """Responses API: the id of the response being streamed now (what a
        ``starting_after`` resume re-reads; after a continuation, the new response's)."""
        rid = self._format.response_id
        # Real ids are tens of characters; a server's megabyte "id" is not put into a URL.
        return rid if isinstance(rid, str) and 0 < len(rid) <= MAX_ID_CHARS else None

    def offsets(self) -> dict[str, Any]:
        """Code points delivered so far per choice, channel and tool call (JSON-serialisable);
        with the reply, this is what :meth:`from_token` needs to go on."""
        return self._assembler.offsets()

    def wire_state(self) -> dict[str, Any] | None:
        """The wire format's state that a resume token carries beyond the reply (``None``:
        the format needs none): see :meth:`from_token`."""
        state = self._format.resume_state()
        return None if state is None else dict(state)

    @classmethod
    def from_token(cls: type[_Parser], token: Mapping[str, Any], **parser_kwargs: Any) -> _Parser:
        """A parser that continues a stream from a resume token (``key``, ``reply``,
        optional ``offsets``, ``last_event_id``, ``reconnection_time``): the partial reply is
        taken over and offsets go on where they stopped.

        :raises ResumeTokenError: ``token`` is not one this library wrote, is damaged, or its
            parts disagree: bad input, never a crash deep in a format nor a reply with a gap
            (what is checked: :mod:`fluxstream._core.resume_token`).
        """
        try:
            parts = read_token(token, parser_kwargs.get("format", cls._default_format))
            parser = cls(content_key=parts.key, **parser_kwargs)
            parts.restore(parser._assembler, parser._format)
            parser._carried = Carried(
                last_event_id=parts.last_event_id, reconnection_time=parts.reconnection_time)
            parser._expect_sequence()  # whatever reads on, it reads after the token's number
            parser._tags_from_reply()
        except ResumeTokenError:
            raise
        except DAMAGE as exc:
            raise damaged(exc) from exc
        return parser

    def _tags_from_reply(self) -> None:  # pragma: no cover - the parser's own
        """A tag splitter goes on from the reply taken over (the parser's)."""
        raise NotImplementedError

    def _expect_sequence(self) -> None:  # pragma: no cover - the parser's own
        """Check that what reads on goes on after :attr:`sequence` (the parser's)."""
        raise NotImplementedError
