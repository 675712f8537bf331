"""The engine of :mod:`fluxstream.web.ai_sdk` (its docstring says what the protocol is and
how events map onto it): the encoding, the encoder, and the request's messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from .._events import (
    End,
    ErrorEvent,
    Event,
    Finish,
    ReasoningDelta,
    RefusalDelta,
    Reset,
    TextDelta,
    ToolCallDelta,
    ToolCallDone,
    UsageUpdate,
)
from .._reply import Outcome, StopReason, ToolCall, Usage
from ..relay import RelayEvent
from ._encoding import Encoding
from ._ids import EventIds

__all__ = [
    "DONE",
    "FINISH_REASONS",
    "UI_MESSAGE_STREAM_HEADERS",
    "UIMessageStream",
    "UIMessageStreamEncoder",
    "chat_messages",
    "masked_error",
]

#: The headers of a UI message stream response besides its ``content-type``
#: (``text/event-stream``). ``useChat`` needs none of them to read the body; the version
#: marker is what the AI SDK's server helpers send, and proxies must not buffer the stream.
UI_MESSAGE_STREAM_HEADERS: tuple[tuple[str, str], ...] = (
    ("cache-control", "no-cache"),
    ("x-vercel-ai-ui-message-stream", "v1"),
    ("x-accel-buffering", "no"),
)

#: The last event of a UI message stream.
DONE = b"data: [DONE]\n\n"

#: The AI SDK's finish reasons for fluxstream's :data:`~fluxstream.StopReason`.
FINISH_REASONS: Mapping[StopReason, str] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool-calls",
    "content_filter": "content-filter",
    "refusal": "content-filter",
    "error": "error",
    "other": "other",
}

#: What a :class:`~fluxstream.Reset` writes: the step so far is dropped, a new one begins.
_RESET_STEP = b'data: {"type":"reset-step"}\n\ndata: {"type":"start-step"}\n\n'

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode

Kind = Literal["text", "reasoning", "refusal"]


def masked_error(event: ErrorEvent | End) -> str:
    """The default ``error_text``: that an error occurred, and nothing of what the upstream
    said (why: :mod:`fluxstream.web.ai_sdk`)."""
    return "An error occurred."


def _chunk(value: dict[str, Any]) -> bytes:
    return b"data: " + _encode(value) + b"\n\n"


@dataclass
class _ToolInput:
    """One tool call of the message as the page has been told it so far."""

    index: int
    id: str | None = None
    name: str | None = None
    #: Code points of the arguments sent as ``tool-input-delta`` (what the offsets count).
    shown: int = 0
    #: Arguments that arrived before the name (``tool-input-start`` needs it).
    pending: str = ""
    started: bool = False
    #: A delta replaced the arguments: the page keeps the streamed ones until
    #: ``tool-input-available`` brings the final input (the protocol cannot take text back).
    replaced: bool = False
    done: bool = False

    def call_id(self) -> str:
        return self.id if self.id is not None else f"call-{self.index}"


class UIMessageStream:
    """The AI SDK's UI message stream as an encoding of a web response's events: give it to
    :class:`~fluxstream.web.EventStreamResponse` (``encoding=UIMessageStream()``) and the
    response is what ``useChat`` reads, with the response's heartbeats, cancel on disconnect
    and send timeout.

    ``message_id``: the ``start`` chunk's ``messageId`` (the AI SDK makes one up when it is
    not given). ``choice``: the choice shown (the protocol has one message). ``error_text``:
    what the page is told of an error (default :func:`masked_error`). ``metadata``: send the
    outcome and usage as the finish's ``messageMetadata``.

    The events carry no ``id:``: ``useChat`` resumes a reply by asking for it again (its
    ``resume`` option), not with ``Last-Event-ID``; an endpoint that serves such a resume
    follows the reply's relay log from the start, and the page rebuilds the message.
    """

    media_type = "text/event-stream"
    headers = UI_MESSAGE_STREAM_HEADERS

    def __init__(
        self,
        *,
        message_id: str | None = None,
        choice: int = 0,
        error_text: Callable[[ErrorEvent | End], str] = masked_error,
        metadata: bool = True,
    ) -> None:
        if isinstance(choice, bool) or not isinstance(choice, int) or choice < 0:
            raise ValueError("choice: the index of a choice (0, 1, ...)")
        if not callable(error_text):
            raise TypeError("error_text: a function of the error event (or the failed End)")
        self.message_id = message_id
        self.choice = choice
        self.error_text = error_text
        self.metadata = metadata

    def __repr__(self) -> str:
        return f"UIMessageStream(message_id={self.message_id!r}, choice={self.choice!r})"

    def encoder(self, ids: EventIds | None = None) -> UIMessageStreamEncoder:
        """A new encoder for one response (``ids`` is not used: see the class docstring)."""
        return UIMessageStreamEncoder(self)


#: Checked by mypy: the class fits the response's seam.
_ENCODING: type[Encoding] = UIMessageStream


class UIMessageStreamEncoder:
    """One reply's events in, the bytes of a UI message stream out (sans-IO; one per
    response, made by :meth:`UIMessageStream.encoder`, whose options it follows).

    ``open()`` is the message's opening chunks; ``encode(event)`` (``event(item)`` for a
    followed :class:`~fluxstream.relay.RelayEvent`) the SSE bytes for one event, ``b""``
    when it shows nothing (usage, a finish reason, another choice's delta...); an
    :class:`~fluxstream.End` writes the finish, and ``close()`` the final ``data: [DONE]``.
    A heartbeat is an SSE comment, which the AI SDK's parser skips.
    """

    def __init__(self, options: UIMessageStream | None = None) -> None:
        self.options = UIMessageStream() if options is None else options
        self.choice = self.options.choice  # read for every delta
        self.started = False
        self.ended = False
        self.done = False
        self._reset_parts()
        self._error_sent = False
        self._usage: Usage | None = None

    def _reset_parts(self) -> None:
        self._open: Kind | None = None
        self._part_id = b""
        self._parts = 0
        self._shown: dict[Kind, int] = {"text": 0, "reasoning": 0, "refusal": 0}
        self._calls: dict[int, _ToolInput] = {}
        self._stop: StopReason | None = None

    # ---------------------------------------------------------------- the response's ends

    def open(self) -> bytes:
        """The message's opening chunks (``start``, ``start-step``); ``encode`` writes them
        before its first event if this was not called."""
        if self.started:
            return b""
        self.started = True
        opening: dict[str, Any] = {"type": "start"}
        if self.options.message_id is not None:
            opening["messageId"] = self.options.message_id
        return _chunk(opening) + b'data: {"type":"start-step"}\n\n'

    def heartbeat(self) -> bytes:
        """An SSE comment: it keeps a proxy from cutting the connection, and the AI SDK's
        parser skips it."""
        return b": ping\n\n"

    def close(self) -> bytes:
        """``data: [DONE]``, after the reply's end (once)."""
        if self.done:
            return b""
        self.done = True
        return DONE

    def event(self, item: RelayEvent) -> bytes:
        """The SSE bytes for a followed event (its position is not sent: see
        :class:`UIMessageStream`)."""
        return self.encode(item.event)

    def encode(self, event: Event) -> bytes:
        """The SSE bytes for ``event`` (see the class docstring)."""
        if self.ended:
            return b""
        out = b"" if self.started else self.open()
        if isinstance(event, (TextDelta, ReasoningDelta, RefusalDelta)):
            if event.choice == self.choice:
                out += self._delta(event)
        elif isinstance(event, ToolCallDelta):
            if event.choice == self.choice:
                out += self._tool_delta(event)
        elif isinstance(event, ToolCallDone):
            if event.choice == self.choice:
                out += self._tool_done(event.call)
        elif isinstance(event, Finish):
            if event.choice == self.choice:
                self._stop = event.stop
        elif isinstance(event, UsageUpdate):
            self._usage = event.usage
        elif isinstance(event, ErrorEvent):
            out += self._close_part() + self._error(event)
        elif isinstance(event, Reset):
            out += self._close_part() + _RESET_STEP
            self._reset_parts()
        elif isinstance(event, End):
            out += self._end(event)
        return out

    # ---------------------------------------------------------------------- text parts

    def _delta(self, event: TextDelta | ReasoningDelta | RefusalDelta) -> bytes:
        kind: Kind = event.type
        text = event.text
        shown = self._shown[kind]
        if event.offset < shown:  # repeats what was delivered: only the rest is new
            text = text[shown - event.offset:]
            if not text:
                return b""
            self._shown[kind] = shown + len(text)
        else:
            self._shown[kind] = event.offset + len(text)
        out = b"" if self._open == kind else self._open_part(kind)
        return out + b'data: {"type":"%s-delta","id":"%s","delta":%s}\n\n' % (
            b"reasoning" if kind == "reasoning" else b"text", self._part_id, _encode(text))

    def _open_part(self, kind: Kind) -> bytes:
        out = self._close_part()
        self._parts += 1
        self._open = kind
        self._part_id = b"%s-%d" % (kind.encode(), self._parts)
        return out + b'data: {"type":"%s-start","id":"%s"}\n\n' % (
            b"reasoning" if kind == "reasoning" else b"text", self._part_id)

    def _close_part(self) -> bytes:
        if self._open is None:
            return b""
        kind, self._open = self._open, None
        return b'data: {"type":"%s-end","id":"%s"}\n\n' % (
            b"reasoning" if kind == "reasoning" else b"text", self._part_id)

    # ----------------------------------------------------------------------- tool calls

    def _tool(self, index: int) -> _ToolInput:
        found = self._calls.get(index)
        if found is None:
            found = self._calls[index] = _ToolInput(index)
        return found

    def _tool_delta(self, event: ToolCallDelta) -> bytes:
        call = self._tool(event.call)
        if call.id is None and event.id is not None and not call.started:
            call.id = event.id
        if call.name is None and event.name:
            call.name = event.name
        if call.done:
            return b""
        if event.replace:
            call.replaced = True
        arguments = "" if call.replaced else event.arguments
        if arguments and event.offset < call.shown + len(call.pending):
            arguments = arguments[call.shown + len(call.pending) - event.offset:]
        out = b""
        if not call.started:
            if call.name is None:  # the protocol's start needs the name: hold the text
                call.pending += arguments
                return b""
            out = self._close_part() + _chunk({
                "type": "tool-input-start", "toolCallId": call.call_id(), "toolName": call.name,
            })
            call.started = True
            arguments, call.pending = call.pending + arguments, ""
        if arguments:
            call.shown += len(arguments)
            out += _chunk({"type": "tool-input-delta", "toolCallId": call.call_id(),
                           "inputTextDelta": arguments})
        return out

    def _tool_done(self, done: ToolCall) -> bytes:
        call = self._tool(done.index)
        if call.done:
            return b""
        call.done = True
        if call.id is None and not call.started:
            call.id = done.id
        name = done.name or call.name or "unknown"
        out = self._close_part()
        try:  # strict JSON (what JSON.parse reads); no arguments at all is an empty input
            value = _decode(done.arguments) if done.arguments.strip() else {}
        except (msgspec.DecodeError, RecursionError):
            return out + _chunk({
                "type": "tool-input-error", "toolCallId": call.call_id(), "toolName": name,
                "input": done.arguments, "errorText": "the tool call's arguments are not JSON",
            })
        return out + _chunk({"type": "tool-input-available", "toolCallId": call.call_id(),
                             "toolName": name, "input": value})

    # ------------------------------------------------------------------ errors and the end

    def _error(self, event: ErrorEvent | End) -> bytes:
        self._error_sent = True
        return _chunk({"type": "error", "errorText": str(self.options.error_text(event))})

    def _end(self, end: End) -> bytes:
        self.ended = True
        out = self._close_part()
        if end.outcome is Outcome.CANCELLED:
            reason = {"reason": end.reason} if end.reason else {}
            return out + _chunk({"type": "abort", **reason})
        if end.outcome is Outcome.FAILED:
            if not self._error_sent:
                out += self._error(end)
            finish = "error"
        elif end.outcome is Outcome.TRUNCATED:
            finish = "interrupted"
        else:
            finish = FINISH_REASONS[self._stop] if self._stop is not None else "stop"
        closing: dict[str, Any] = {"type": "finish", "finishReason": finish}
        if self.options.metadata:
            meta: dict[str, Any] = {"outcome": end.outcome.value}
            if self._usage is not None:
                meta["usage"] = self._usage.model_dump(mode="json", exclude_none=True)
            closing["messageMetadata"] = meta
        return out + b'data: {"type":"finish-step"}\n\n' + _chunk(closing)


#: The roles of the AI SDK's UI messages a Chat Completions request takes as they are.
_ROLES = frozenset({"system", "user", "assistant"})


def chat_messages(body: object) -> list[dict[str, str]]:
    """The Chat Completions ``messages`` of a ``useChat`` request: its JSON body
    (``{"id", "messages": [{"role", "parts": [...]}], ...}``) with each message's text parts
    joined. Parts other than text (files, tool calls, reasoning) are left out: a page's
    conversation is resent with every request, and only its text is the model's context here.

    :raises ValueError: the body is not that shape (answer it with a 400): it comes from the
        browser.
    """
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise ValueError("expected a JSON object with a list of messages")
    messages: list[dict[str, str]] = []
    for message in body["messages"]:
        role = message.get("role") if isinstance(message, dict) else None
        if not isinstance(role, str) or role not in _ROLES:
            raise ValueError("each message needs a role: system, user or assistant")
        parts = message.get("parts")
        if not isinstance(parts, list):
            raise ValueError("each message needs a list of parts")
        texts = [part.get("text") for part in parts
                 if isinstance(part, dict) and part.get("type") == "text"]
        if not all(isinstance(text, str) for text in texts):
            raise ValueError("a text part's text must be a string")
        messages.append({"role": role, "content": "".join(texts)})  # type: ignore[arg-type]
    return messages
