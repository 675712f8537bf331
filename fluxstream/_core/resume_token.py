"""Resume tokens: their version, how one is written, and how one from outside is read.

One home for the token's shape: :func:`write_token` writes what
:meth:`fluxstream._stream.ReplyStream.resume_token` hands out (the parts a
:class:`~fluxstream._parser.StreamParser` knows of its stream, :class:`TokenSource`, beside the
request), and :func:`read_token` reads a token back into exactly those parts
(:class:`TokenParts`), which :meth:`fluxstream._parser.StreamParser.from_token` applies. A
change of the shape is made here, on both sides at once, with :data:`RESUME_TOKEN_VERSION`.
Signing is not the token's shape: :mod:`fluxstream._core.token_signature` signs a written token
and verifies one before it is read.

A token travels through databases, browsers and other workers, so it is data from outside:
every part is checked into exactly the shape the parser wrote, and anything else is a
:class:`~fluxstream.errors.ResumeTokenError`, never a crash deep in a format. Kept apart from
the parser because it is its own rulebook (which numbers a token may hold, which parts are
optional), tested on its own, while the parser only applies the parts.

A token says several things twice, and the copies must agree before it is believed: the
offsets are the lengths of the stored reply's text, reasoning, refusal and tool-call
arguments (code points delivered), for exactly the reply's choices and calls; the wire state
names open blocks, calls and candidates the reply holds. Trusted one by one, a token whose
text offset was 1,000,000 on a reply of 15 characters resumed at offset 1,000,000, and one
whose reply was ``[]`` resumed as an empty reply with the delivered text missing; both ended
``done``. What a token says of the server's own stream (its last event id, a Responses
sequence number, the request) has no second copy: only its type is checked here, and a
signed token (:mod:`fluxstream._core.token_signature`) is what keeps it from being altered.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .._reply import Choice, Reply
from ..errors import ResumeTokenError
from ..formats import FORMATS
from ..formats._base import MAX_SEQUENCE
from ..sse import MAX_RETRY_MS

if TYPE_CHECKING:  # pragma: no cover
    from .._assembly import ReplyAssembler
    from ..formats._contract import WireFormat

__all__ = [
    "DAMAGE", "MAX_ID_CHARS", "RESUME_TOKEN_VERSION", "TokenParts", "TokenSource", "check_version",
    "damaged",
    "go_on_from", "read_token", "write_token",
]

#: The version a written token carries; a client resumes only tokens of this version.
RESUME_TOKEN_VERSION = 1

#: What a damaged token can make the restoring code raise (pydantic's ValidationError is a
#: ValueError): each becomes a :class:`ResumeTokenError` (see :func:`damaged`).
DAMAGE = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError,
          RecursionError)

#: Indices and counts of a token stay below this in size (a format keeps any integer index
#: the wire gives, negative ones included; anything larger is not a token we wrote).
_TOKEN_NUMBER_BOUND = 10**40
#: The longest response id a token (or a ``starting_after`` URL) carries: real ids are tens of
#: characters, and a server's megabyte "id" is not put into a URL.
MAX_ID_CHARS = 1024
#: A block index as the Anthropic format writes it (``str`` of a count).
_BLOCK_INDEX = re.compile(r"[0-9]{1,16}")
_BLOCK_KINDS = frozenset({"text", "thinking", "tool", "ignored", "closed"})
_CHANNELS = ("text", "reasoning", "refusal")
#: Characters an SSE event id never holds (the decoder drops an id with NUL, and a line
#: ends at CR or LF): one in a token's id would only forge a ``Last-Event-ID`` header.
_NOT_IN_AN_ID = re.compile("[\x00\r\n]")


@dataclass(frozen=True, slots=True)
class TokenParts:
    """A token's parts, checked: what the parser takes over."""

    key: str
    reply: Reply
    #: Offsets as :meth:`~fluxstream._assembly.ReplyAssembler.offsets` writes them, equal to
    #: the reply's own lengths; ``None``: the token has none (they are then the reply's).
    offsets: dict[str, Any] | None
    #: Responses' ``starting_after`` (a count), or ``None``.
    sequence: int | None
    response_id: str | None
    #: The wire format's own state (:meth:`~fluxstream.formats._contract.WireFormat.
    #: resume_state`), of the shape its format writes and naming only what the reply holds.
    wire: Mapping[str, Any] | None
    last_event_id: str
    #: The server's ``retry:`` in milliseconds, as the SSE decoder bounds it.
    reconnection_time: int | None

    def restore(self, assembler: ReplyAssembler, fmt: WireFormat) -> None:
        """Put the parts into a new parser's assembler and wire format: the reply, the format
        going on from it (:func:`go_on_from`), its id and model, its place in a Responses
        stream and its own state. (The SSE state is the parser's to keep.)"""
        reply = self.reply
        assembler.restore(reply)
        go_on_from(fmt, reply, self.offsets or assembler.offsets())
        fmt.id, fmt.model = reply.id, reply.model
        # Before the wire state: ``auto`` chooses Responses for a token with a sequence.
        fmt.restore_position(self.sequence, self.response_id)
        fmt.restore_state(self.wire)  # the wire format's own state (Anthropic: open blocks)


def go_on_from(fmt: WireFormat, reply: Reply, offsets: dict[str, Any]) -> None:
    """``fmt``, new, goes on from ``reply`` (a token's, or the reply another upstream's format
    takes over): its tool calls by id and name, its finish reasons, and ``offsets``, the code
    points delivered (:meth:`~fluxstream._assembly.ReplyAssembler.offsets`)."""
    fmt.restore(
        offsets,
        {c.index: {t.index: (t.id, t.name) for t in c.tool_calls} for c in reply.choices},
        {c.index: c.finish_reason for c in reply.choices},
    )


# --------------------------------------------------------------------------- writing


class TokenSource(Protocol):
    """What a token is written from: a :class:`~fluxstream._parser.StreamParser`'s view of its
    stream (its members of these names)."""

    @property
    def content_key(self) -> str: ...
    @property
    def last_event_id(self) -> str: ...
    @property
    def reconnection_time(self) -> int | None: ...
    @property
    def response_id(self) -> str | None: ...
    @property
    def sequence(self) -> int | None: ...
    @property
    def reply(self) -> Reply: ...
    def offsets(self) -> dict[str, Any]: ...
    def wire_state(self) -> dict[str, Any] | None: ...


def write_token(
    source: TokenSource, *, api: str, path: str, body: Mapping[str, Any], continued: bool,
    upstream: str | None = None,
) -> dict[str, Any]:
    """A token of the stream ``source`` parses, sent as ``body`` to ``path`` of the API named
    ``api`` (``upstream``: the label of the upstream serving it, when it has fallbacks): a
    small JSON-serialisable value that :func:`read_token` reads back. No headers: they may
    hold secrets.

    ``continued``: what is being read answers a continuation, not ``body``: its ids (event
    ids, a response and its sequence) number another stream, so they are left out and the
    token resumes by continuing the text instead."""
    own = not continued
    token: dict[str, Any] = {
        "version": RESUME_TOKEN_VERSION,
        "key": source.content_key,
        "api": api,
        # Read by releases that name the API by its path only.
        "path": path,
        "body": body,
        "last_event_id": (source.last_event_id or None) if own else None,
        "reconnection_time": source.reconnection_time,
        # Responses API: what a starting_after resume needs (None for other formats).
        "response_id": source.response_id if own else None,
        "sequence": source.sequence if own else None,
        "offsets": source.offsets(),
        # The wire format's own state (Anthropic: the content blocks open at the token).
        "wire": source.wire_state(),
        "reply": source.reply.model_dump(mode="json"),
    }
    if upstream is not None:  # its API and body are that upstream's: say which
        token["upstream"] = upstream
    return token


# --------------------------------------------------------------------------- reading


def damaged(exc: BaseException) -> ResumeTokenError:
    """The error for a token that made restoring raise ``exc`` (one of :data:`DAMAGE`)."""
    return ResumeTokenError(f"the resume token is damaged: {type(exc).__name__}: {str(exc)[:200]}")


def check_version(token: Mapping[str, Any]) -> None:
    """Refuse a token of another version than this library writes (its shape may differ).

    :raises ResumeTokenError: the token's ``version`` is not :data:`RESUME_TOKEN_VERSION`.
    """
    if token.get("version") != RESUME_TOKEN_VERSION:
        raise ResumeTokenError(f"unsupported resume token version {token.get('version')!r}")


def read_token(token: object, format: str | None = None) -> TokenParts:
    """The checked parts of ``token`` (``key``, ``reply``, optional ``offsets``,
    ``sequence``, ``response_id``, ``wire``, ``last_event_id``, ``reconnection_time``), for a
    parser of ``format`` (``None`` or ``"auto"``: whichever the token's parts claim).

    :raises ResumeTokenError: ``token`` is not one this library wrote, is damaged, or its
        parts disagree with each other.
    """
    if not isinstance(token, Mapping) or not isinstance(token.get("key"), str):
        raise ResumeTokenError("a resume token is a mapping with a string 'key'")
    reply = _checked_reply(token.get("reply"))
    given = token.get("offsets")
    offsets = None
    if given is not None:
        offsets = _checked_offsets(given)
        _agree(offsets, reply)
    sequence = _optional_count(token.get("sequence"), "sequence number", MAX_SEQUENCE)
    response_id = _response_id(token.get("response_id"))
    named = format if format not in (None, "auto") else None
    if (named is not None and not _rereads(named)
            and (sequence is not None or response_id is not None)):
        raise ResumeTokenError(
            f"the resume token carries a Responses position (a sequence number or a response"
            f" id), which a {named} stream never has"
        )
    return TokenParts(
        key=token["key"],
        reply=reply,
        offsets=offsets,
        sequence=sequence,
        response_id=response_id,
        wire=_checked_wire(token.get("wire"), named, reply),
        last_event_id=_event_id(token.get("last_event_id")),
        reconnection_time=_optional_count(
            token.get("reconnection_time"), "reconnection time", MAX_RETRY_MS + 1),
    )


def _rereads(format: str) -> bool:
    """Whether a stream of ``format`` carries a re-read position (an unknown name: assume
    so, the parser refuses the name itself)."""
    cls = FORMATS.get(format)
    return cls is None or cls.rereads


# --------------------------------------------------------------------------- the reply


def _checked_reply(data: object) -> Reply:
    """The token's partial reply: a mapping (``[]`` or ``None`` is no reply, not an empty
    one), each choice once, each call of a choice once. (Its ``content_key`` is not read: the
    token's ``key`` names the stream.)"""
    if not isinstance(data, Mapping):
        raise ResumeTokenError(
            f"the resume token's 'reply' (the partial reply it goes on from) is not a "
            f"mapping but {type(data).__name__}"
        )
    try:
        reply = Reply.model_validate(data)
    except DAMAGE as exc:
        raise damaged(exc) from exc
    seen: set[int] = set()
    for choice in reply.choices:
        index = _bounded(choice.index, "choice index")
        if index in seen:
            raise ResumeTokenError(f"the resume token's reply holds choice {index} twice")
        seen.add(index)
        calls = [_bounded(call.index, "tool call index") for call in choice.tool_calls]
        if len(set(calls)) != len(calls):
            raise ResumeTokenError(
                f"the resume token's reply holds a tool call of choice {index} twice")
    return reply


def _bounded(index: int, what: str) -> int:
    if not -_TOKEN_NUMBER_BOUND < index < _TOKEN_NUMBER_BOUND:
        raise ResumeTokenError(f"the resume token's {what} is not a number it can hold")
    return index


def _lengths(choice: Choice) -> dict[str, Any]:
    """The offsets of ``choice`` as the assembler writes them: its lengths."""
    return {
        "text": len(choice.text), "reasoning": len(choice.reasoning or ""),
        "refusal": len(choice.refusal or ""),
        "tool_calls": {str(t.index): len(t.arguments) for t in choice.tool_calls},
    }


def _agree(offsets: dict[str, Any], reply: Reply) -> None:
    """Offsets are the reply's lengths, for exactly its choices and calls: an offset past
    them would leave a gap, one short of them would show text twice."""
    choices = {str(c.index): c for c in reply.choices}
    if set(offsets) != set(choices):
        raise ResumeTokenError(
            f"the resume token's offsets name choices {sorted(offsets)[:8]} where its reply "
            f"holds {sorted(choices)[:8]}"
        )
    for index, counts in offsets.items():
        lengths = _lengths(choices[index])
        for channel in _CHANNELS:
            if counts.get(channel, 0) != lengths[channel]:
                raise ResumeTokenError(
                    f"the resume token's {channel} offset of choice {index} "
                    f"({counts.get(channel, 0)}) is not the length of its reply's "
                    f"{channel} ({lengths[channel]})"
                )
        if counts["tool_calls"] != lengths["tool_calls"]:
            raise ResumeTokenError(
                f"the resume token's tool call offsets of choice {index} are not the lengths "
                f"of its reply's tool call arguments"
            )


# --------------------------------------------------------------------------- numbers, ids


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


def _optional_count(value: object, what: str, bound: int) -> int | None:
    """``None``, or a plain int from 0 to below ``bound`` (not a bool, not a string)."""
    if value is None:
        return None
    if type(value) is not int or not 0 <= value < bound:
        raise ResumeTokenError(f"the resume token's {what} is not a count below {bound}")
    return value


def _response_id(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS:
        raise ResumeTokenError(
            f"the resume token's response id is not an id of 1 to {MAX_ID_CHARS} characters")
    return value


def _event_id(value: object) -> str:
    """The ``Last-Event-ID`` to send: a string an SSE ``id:`` field can hold (``None``: none)."""
    if value is None:
        return ""
    if not isinstance(value, str) or _NOT_IN_AN_ID.search(value):
        raise ResumeTokenError(
            "the resume token's last event id is not an SSE event id (a string without NUL, "
            "CR or LF)"
        )
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
            for channel in _CHANNELS
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
        if str(index) in checked:
            raise ResumeTokenError(f"the resume token's offsets name choice {index} twice")
        checked[str(index)] = entry
    return checked


# --------------------------------------------------------------------------- wire state


def _checked_wire(wire: object, format: str | None, reply: Reply) -> Mapping[str, Any] | None:
    """The format's own state, of the shape that format writes (``format`` ``None``: the one
    its parts claim, as ``auto`` chooses), naming only blocks, calls and candidates the
    reply holds. ``None`` or ``{}``: no state (Chat Completions writes none; ``auto``
    writes ``{}`` before it knows the format)."""
    if wire is None:
        return None
    if not isinstance(wire, Mapping):
        raise ResumeTokenError("the resume token's wire state is not a mapping")
    if not wire:
        return wire
    name = format if format is not None else _claimed(wire)
    rule = _WIRE_RULES.get(name or "")
    if rule is None:
        raise ResumeTokenError(
            f"the resume token carries wire state, which a {name or 'stream of its kind'} "
            f"stream never writes"
        )
    rule(wire, reply)
    return wire


def _claimed(wire: Mapping[str, Any]) -> str | None:
    """The format whose state ``wire`` is, by the part only that format writes."""
    for part, name in (("blocks", "anthropic_messages"), ("parts", "responses"),
                       ("candidates", "gemini")):
        if part in wire:
            return name
    return None


def _wrong(format: str, part: str) -> ResumeTokenError:
    return ResumeTokenError(f"the resume token's {format} wire state has a wrong '{part}'")


def _is_count(value: object) -> bool:
    return type(value) is int and 0 <= value < MAX_SEQUENCE


def _optional(wire: Mapping[str, Any], part: str, kind: type | tuple[type, ...],
              format: str) -> None:
    value = wire.get(part)
    if value is not None and not isinstance(value, kind):
        raise _wrong(format, part)


def _calls(reply: Reply, index: int) -> dict[int, str]:
    """The tool calls of choice ``index``: ``{call index: arguments}``."""
    choice = next((c for c in reply.choices if c.index == index), None)
    return {} if choice is None else {t.index: t.arguments for t in choice.tool_calls}


def _held_of_one_choice(held: object, reply: Reply, format: str) -> None:
    """UTF-16 high halves held back, ``[channel, None, unit]`` or ``["tool", call, unit]``
    (:meth:`~fluxstream.formats._choice_state.ChoiceState.held_state`)."""
    calls = _calls(reply, 0)
    for entry in _entries(held, format, "held"):
        channel, index, unit = entry
        if not (
            (channel in _CHANNELS and index is None)
            or (channel == "tool" and type(index) is int and index in calls)
        ) or not _is_high_half(unit):
            raise _wrong(format, "held")


def _entries(value: object, format: str, part: str, size: int = 3) -> list[list[Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(entry, list) and len(entry) == size for entry in value
    ):
        raise _wrong(format, part)
    return value


def _is_high_half(unit: object) -> bool:
    return type(unit) is int and 0xD800 <= unit <= 0xDBFF


def _anthropic_wire(wire: Mapping[str, Any], reply: Reply) -> None:
    """The content blocks open at the token: a tool block is a call of the reply, an open
    thinking block's text is the end of the reply's reasoning."""
    name = "anthropic_messages"
    blocks = wire.get("blocks")
    if not isinstance(blocks, Mapping):
        raise _wrong(name, "blocks")
    calls = _calls(reply, 0)
    reasoning = next((c.reasoning or "" for c in reply.choices if c.index == 0), "")
    for key, block in blocks.items():
        if not (isinstance(key, str) and _BLOCK_INDEX.fullmatch(key)
                and isinstance(block, Mapping) and isinstance(block.get("kind"), str)
                and block["kind"] in _BLOCK_KINDS):
            raise _wrong(name, "blocks")
        kind = block["kind"]
        if kind == "tool" and (int(key) not in calls or not isinstance(
                block.get("input", ""), str)):
            raise _wrong(name, "blocks")
        if kind == "thinking":
            thinking, signature = block.get("thinking", ""), block.get("signature", "")
            if not (isinstance(thinking, str) and isinstance(signature, str)
                    and reasoning.endswith(thinking)):
                raise _wrong(name, "blocks")
    if not isinstance(wire.get("message_started", False), bool):
        raise _wrong(name, "message_started")
    _optional(wire, "usage", Mapping, name)
    _optional(wire, "stop", str, name)
    _held_of_one_choice(wire.get("held"), reply, name)


def _responses_wire(wire: Mapping[str, Any], reply: Reply) -> None:
    """The parts that received deltas, the output items by id, the call streamed last (a
    call of the reply)."""
    name = "responses"
    for part in ("parts", "shown"):
        for kind, output, index in _entries(wire.get(part), name, part):
            if not (isinstance(kind, str) and (output is None or _is_count(output))
                    and (index is None or _is_count(index))):
                raise _wrong(name, part)
    for item, position in _entries(wire.get("items"), name, "items", size=2):
        if not (isinstance(item, str) and _is_count(position)):
            raise _wrong(name, "items")
    if "positions" in wire and not _is_count(wire["positions"]):
        raise _wrong(name, "positions")
    last = wire.get("last_call")
    if last is not None and not (_is_count(last) and last in _calls(reply, 0)):
        raise _wrong(name, "last_call")
    if not isinstance(wire.get("errored", False), bool):
        raise _wrong(name, "errored")
    _held_of_one_choice(wire.get("held"), reply, name)


def _gemini_wire(wire: Mapping[str, Any], reply: Reply) -> None:
    """Per candidate of the reply its thought signatures and the call still streaming (a call
    of that candidate, whose arguments written so far are the reply's)."""
    name = "gemini"
    candidates = wire.get("candidates", {})
    indices = {c.index for c in reply.choices}
    if not isinstance(candidates, Mapping):
        raise _wrong(name, "candidates")
    for key, entry in candidates.items():
        index = _token_number(key, "candidate index", signed=True)
        if index not in indices or not isinstance(entry, Mapping) or not _is_count(
                entry.get("signatures", 0)):
            raise _wrong(name, "candidates")
        if "open" in entry:
            calls = _calls(reply, index)
            pieces = entry.get("pieces")
            if not (type(entry["open"]) is int and entry["open"] in calls) or (
                pieces is not None and not (
                    isinstance(pieces, Mapping)
                    and pieces.get("written") == calls[entry["open"]])):
                raise _wrong(name, "candidates")
    _optional(wire, "usage", Mapping, name)
    for flag in ("usage_sent", "blocked"):
        if not isinstance(wire.get(flag, False), bool):
            raise _wrong(name, flag)
    for index, channel, unit in _entries(wire.get("held"), name, "held"):
        if not (type(index) is int and index in indices and channel in ("text", "reasoning")
                and _is_high_half(unit)):
            raise _wrong(name, "held")


_WIRE_RULES: dict[str, Callable[[Mapping[str, Any], Reply], None]] = {
    "anthropic_messages": _anthropic_wire,
    "responses": _responses_wire,
    "gemini": _gemini_wire,
}
