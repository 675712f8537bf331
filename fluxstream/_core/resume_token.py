"""Reading a resume token: what :meth:`fluxstream.parser.StreamParser.from_token` takes over.

A token travels through databases, browsers and other workers, so it is data from outside:
every part is checked into exactly the shape the parser wrote (:class:`TokenParts`), and
anything else is a :class:`~fluxstream.errors.ResumeTokenError`, never a crash deep in a
format. Kept apart from the parser because it is its own rulebook (which numbers a token may
hold, which parts are optional), tested on its own, while the parser only applies the parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ResumeTokenError
from ..formats._base import MAX_SEQUENCE
from ..reply import Reply

__all__ = ["DAMAGE", "TokenParts", "damaged", "read_token"]

#: What a damaged token can make the restoring code raise (pydantic's ValidationError is a
#: ValueError): each becomes a :class:`ResumeTokenError` (see :func:`damaged`).
DAMAGE = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError,
          RecursionError)

#: Indices and counts of a token stay below this in size (a format keeps any integer index
#: the wire gives, negative ones included; anything larger is not a token we wrote).
_TOKEN_NUMBER_BOUND = 10**40


@dataclass(frozen=True, slots=True)
class TokenParts:
    """A token's parts, checked: what the parser takes over."""

    key: str
    reply: Reply
    #: Offsets as :meth:`~fluxstream.assembly.ReplyAssembler.offsets` writes them; ``None``:
    #: the token has none (they are then the reply's own).
    offsets: dict[str, Any] | None
    #: Responses' ``starting_after`` (a count), or ``None``.
    sequence: int | None
    response_id: str | None
    #: The wire format's own state (:meth:`~fluxstream.formats._contract.WireFormat.
    #: resume_state`), checked by the format that takes it over.
    wire: Any
    last_event_id: str
    reconnection_time: Any

    def calls(self) -> dict[int, dict[int, tuple[Any, Any]]]:
        """Per choice, ``{call index: (id, name)}`` of the reply's tool calls."""
        return {c.index: {t.index: (t.id, t.name) for t in c.tool_calls}
                for c in self.reply.choices}

    def finishes(self) -> dict[int, str | None]:
        """Per choice, the finish reason so far."""
        return {c.index: c.finish_reason for c in self.reply.choices}


def damaged(exc: BaseException) -> ResumeTokenError:
    """The error for a token that made restoring raise ``exc`` (one of :data:`DAMAGE`)."""
    return ResumeTokenError(f"the resume token is damaged: {type(exc).__name__}: {str(exc)[:200]}")


def read_token(token: object) -> TokenParts:
    """The checked parts of ``token`` (``key``, ``reply``, optional ``offsets``,
    ``sequence``, ``response_id``, ``wire``, ``last_event_id``, ``reconnection_time``).

    :raises ResumeTokenError: ``token`` is not one this library wrote, or is damaged.
    """
    if not isinstance(token, Mapping) or not isinstance(token.get("key"), str):
        raise ResumeTokenError("a resume token is a mapping with a string 'key'")
    try:
        reply = Reply.model_validate(token.get("reply") or {})
    except DAMAGE as exc:
        raise damaged(exc) from exc
    given = token.get("offsets")
    sequence = token.get("sequence")
    response_id = token.get("response_id")
    return TokenParts(
        key=token["key"],
        reply=reply,
        offsets=_checked_offsets(given) if given else None,
        # Events at or below it are never shown again: only a count is believed.
        sequence=sequence if type(sequence) is int and 0 <= sequence < MAX_SEQUENCE else None,
        response_id=response_id if isinstance(response_id, str) and response_id else None,
        wire=token.get("wire"),
        last_event_id=str(token.get("last_event_id") or ""),
        reconnection_time=token.get("reconnection_time"),
    )


def _token_number(value: Any, what: str, *, signed: bool = False) -> int:
    """An index (``signed``: any integer, as the wire may give it) or a count (>= 0) from a
    token: an int, or its decimal string as JSON object keys are."""
    if isinstance(value, str):
        digits = value[1:] if signed and value[:1] == "-" else value
        if digits.isascii() and digits.isdigit() and len(digits) <= 40:
            value = int(value)
    low = -_TOKEN_NUMBER_BOUND if signed else 0
    if type(value) is not int or not low <= value < _TOKEN_NUMBER_BOUND:
        raise ResumeTokenError(f"the resume token's {what} is not a number it can hold")
    return value


def _checked_offsets(offsets: Any) -> dict[str, Any]:
    """A token's ``offsets`` in exactly the shape :meth:`ReplyAssembler.offsets` writes, or
    :class:`ResumeTokenError`: every format's ``restore`` (and ``auto``'s, which runs only
    when the format is known, at the first event) may then trust it."""
    if not isinstance(offsets, Mapping):
        raise ResumeTokenError("the resume token's 'offsets' is not a mapping")
    checked: dict[str, Any] = {}
    for key, counts in offsets.items():
        index = _token_number(key, "choice index", signed=True)
        if not isinstance(counts, Mapping):
            raise ResumeTokenError("the resume token's offsets of a choice are not a mapping")
        entry: dict[str, Any] = {
            channel: _token_number(counts[channel], f"{channel} offset")
            for channel in ("text", "reasoning", "refusal")
            if channel in counts
        }
        calls = counts.get("tool_calls") or {}
        if not isinstance(calls, Mapping):
            raise ResumeTokenError("the resume token's tool call offsets are not a mapping")
        entry["tool_calls"] = {
            str(_token_number(call, "tool call index", signed=True)): _token_number(
                length, "tool call offset"
            )
            for call, length in calls.items()
        }
        checked[str(index)] = entry
    return checked
