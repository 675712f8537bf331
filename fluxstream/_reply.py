"""The assembled reply: what a stream produced, whatever the provider's quirks were.

These are pydantic models (users serialise, validate and compare them), built by
:class:`fluxstream._assembly.ReplyAssembler` with ``model_construct`` (no re-validation of values
the assembler already produced), so taking a snapshot often stays cheap.

:class:`Outcome` lives here rather than in :mod:`fluxstream._events` only to avoid an import
cycle (events carry a :class:`ToolCall`, the reply carries an outcome); ``events.Outcome`` is
the same object.

Reading a reply as structured output (:meth:`Reply.parse`, and :func:`parse_reply` /
:func:`parse_tool_call`, which :mod:`fluxstream.structured` exports) lives here too, on the
sans-IO engine of :mod:`fluxstream._core.partial_objects`: the method needs nothing above the
reply, so the reply never imports the structured package (which imports the reply and the
events).

Tool-call arguments stay the raw string the provider sent: parsing and schema validation happen
only when asked (:meth:`ToolCall.parse_arguments`), never while streaming, so one malformed call
cannot break a stream.
"""

from __future__ import annotations

import json
from decimal import Decimal
from enum import Enum
from typing import Any, Literal, Protocol, TypeVar, overload

import pydantic_core
from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError

from ._core.base_errors import ArgumentsError
from ._core.partial_objects import ObjectBuilder, StructuredResult
from ._core.type_names import schema_name
from ._wire import Usage

__all__ = [
    "Choice",
    "ErrorInfo",
    "Outcome",
    "Reply",
    "Segment",
    "SegmentEnd",
    "StopReason",
    "ToolCall",
    "TotalUsage",
    "Usage",
    "UsageEstimate",
    "unified_stop",
]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class Outcome(str, Enum):
    """How a stream ended. Always stated, never guessed."""

    #: The sentinel (``data: [DONE]``) or the format's terminal event arrived.
    DONE = "done"
    #: The bytes ended without a sentinel, but every choice reported a finish reason.
    FINISHED = "finished"
    #: The bytes ended before that: the reply is partial (everything received is kept).
    TRUNCATED = "truncated"
    #: The caller cancelled the stream.
    CANCELLED = "cancelled"
    #: An error payload arrived in the stream, or the transport/protocol failed.
    FAILED = "failed"

    def __str__(self) -> str:
        # Printed and logged as the word the docs use (``done``): since Python 3.11 a str
        # enum's str() is ``Outcome.DONE``, and StrEnum is not on 3.10.
        return self.value


class PartialSource(Protocol):
    """What the assembler attaches to a :class:`ToolCall` so that
    :meth:`ToolCall.partial_arguments` can reuse its incremental parser (see
    :mod:`fluxstream._partial_json`) instead of re-parsing the whole string."""

    def value_at(self, arguments: str) -> Any:
        """The best-effort value of ``arguments`` (a prefix of the call's growing argument
        string); ``LookupError`` if the incremental state has already moved past it."""
        ...


class ToolCall(BaseModel):
    """One assembled tool (function) call of a choice."""

    model_config = ConfigDict(frozen=False)

    index: int
    id: str | None = None
    name: str | None = None
    #: The raw assembled argument string (an object sent by the provider is serialised to
    #: compact JSON).
    arguments: str = ""

    _source: PartialSource | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        # Fields only: the private incremental-parsing source is an implementation detail, and
        # two parses of the same bytes must give equal calls.
        if not isinstance(other, ToolCall):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable model, like BaseModel itself

    @overload
    def parse_arguments(self, model: None = None) -> Any: ...
    @overload
    def parse_arguments(self, model: type[M]) -> M: ...

    def parse_arguments(self, model: type[M] | None = None) -> Any:
        """The arguments as a JSON value, or validated against ``model``.

        :raises ArgumentsError: the string is not valid JSON (``""`` included), is nested too
            deeply to parse (``RecursionError``), or does not validate against ``model``.
        """
        if model is None:
            try:
                return json.loads(self.arguments)
            except (ValueError, RecursionError) as exc:
                raise ArgumentsError(
                    f"arguments of tool call {self.name!r} are not valid JSON: {exc}",
                    name=self.name,
                    arguments=self.arguments,
                ) from exc
        try:
            return model.model_validate_json(self.arguments)
        except ValidationError as exc:
            raise ArgumentsError(
                f"arguments of tool call {self.name!r} do not match {model.__name__}: {exc}",
                name=self.name,
                arguments=self.arguments,
            ) from exc

    def partial_arguments(self) -> Any:
        """Best-effort JSON value of the arguments received so far (``None`` if nothing usable).

        Incomplete trailing strings are included as far as they arrived; an incomplete key,
        number or literal at the very end is left out. Cheap enough to call after every
        fragment when the call came from a live assembler (incremental parsing); otherwise
        one ``pydantic_core.from_json(..., allow_partial=...)`` pass. Treat the value as
        read-only: containers may be shared with later snapshots.
        """
        source = self._source
        if source is not None:
            try:
                return source.value_at(self.arguments)
            except LookupError:
                pass
        return parse_partial(self.arguments)


def parse_partial(text: str) -> Any:
    """Best-effort value of a JSON prefix in one pass (``None`` when nothing usable)."""
    if not text.strip():
        return None
    try:
        return pydantic_core.from_json(text, allow_partial="trailing-strings")
    except ValueError:
        return None


#: The provider-neutral finish reason (:attr:`Choice.stop`, :attr:`fluxstream._events.Finish.stop`).
StopReason = Literal["stop", "length", "tool_calls", "content_filter", "refusal", "error", "other"]

#: Raw finish reasons of every supported format -> :data:`StopReason`. The raw names do not
#: collide across formats (Chat Completions ``stop``/``length``..., Anthropic ``end_turn``/
#: ``max_tokens``..., Responses ``completed``/``failed``), so one table serves all of them;
#: Responses ``incomplete`` depends on ``incomplete_details.reason`` and is mapped by its format.
_STOPS: dict[str, StopReason] = {
    # Chat Completions (and the many servers imitating it; Gemini-compat sends upper case)
    "stop": "stop",
    "eos": "stop",
    "end_turn": "stop",  # also Anthropic
    "length": "length",
    "max_tokens": "length",  # also Anthropic
    "model_length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "tool_use": "tool_calls",  # also Anthropic
    "content_filter": "content_filter",
    "safety": "content_filter",
    "recitation": "content_filter",
    "blocklist": "content_filter",
    "prohibited_content": "content_filter",
    "spii": "content_filter",
    "error": "error",
    # Anthropic Messages
    "stop_sequence": "stop",
    "refusal": "refusal",
    "model_context_window_exceeded": "length",
    # OpenAI Responses (status of the terminal event)
    "completed": "stop",
    "failed": "error",
    "max_output_tokens": "length",
}


def unified_stop(raw: str | None, *, tool_calls: bool = False) -> StopReason | None:
    """The :data:`StopReason` for a raw finish reason (``None`` stays ``None``).

    ``tool_calls``: the choice has tool calls, so a plain ``stop`` means the model stopped to
    call them (Gemini's OpenAI-compatible endpoint and Responses ``completed`` say ``stop``
    there; an agent loop that waits for ``tool_calls`` would otherwise never run the tools).
    Unknown raw reasons (``pause_turn``, vLLM's ``abort`` ...) are ``other``.
    """
    if raw is None:
        return None
    stop = _STOPS.get(raw) or _STOPS.get(raw.lower(), "other")
    if stop == "stop" and tool_calls:
        return "tool_calls"
    return stop


class Choice(BaseModel):
    """One assembled choice, keyed by the streamed ``choices[].index``.

    ``finish_reason`` is the provider's raw string; ``stop`` the same reason in one vocabulary
    for every format (:data:`StopReason`). ``reasoning_blocks`` keeps provider-native reasoning
    items that are never shown but must be sent back to continue the conversation (Anthropic
    ``thinking`` blocks with their ``signature``, ``redacted_thinking`` blocks, Responses
    ``reasoning`` items), ordered by the provider's block / output index.
    ``reasoning_unclosed`` is true when reasoning a server sent inside the text between tags
    (``think_tags=``) ended without its closing tag: the stream was cut, or the length cap
    reached, while the model was still reasoning.
    """

    index: int
    text: str = ""
    reasoning: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] = []
    finish_reason: str | None = None
    stop: StopReason | None = None
    reasoning_blocks: list[dict[str, Any]] = []
    reasoning_unclosed: bool = False


class ErrorInfo(BaseModel):
    """An error payload that arrived inside the stream (after HTTP 200)."""

    message: str
    code: str | None = None
    type: str | None = None
    param: str | None = None
    raw: Any = None


class UsageEstimate(BaseModel):
    """Token usage *estimated* by fluxstream for a reply whose server reported no final count
    (a cancelled or cut stream, a server that never sends usage, or only a snapshot sent
    before the end, such as Anthropic's ``message_start`` with its placeholder
    ``output_tokens: 1``): never the provider's count.

    ``output_tokens`` is counted from the content received (text, reasoning, refusal and
    tool-call arguments, every choice; see :func:`fluxstream._usage.estimate_output_tokens`
    for the heuristic), never fewer than a snapshot had already counted; ``input_tokens`` is
    the snapshot's count if one came, else the count the server reported for an earlier
    reply of the same content key on the same client, if one did (``None`` otherwise).
    """

    output_tokens: int
    input_tokens: int | None = None
    #: Always true: tells an estimate from a reported usage wherever it is serialised.
    estimated: Literal[True] = True


class SegmentEnd(str, Enum):
    """How one upstream's part of a reply ended (:attr:`Segment.kind`): a closed vocabulary,
    so code can branch on it; :attr:`Segment.detail` says the rest in words."""

    #: It served the reply to its end (the reply's outcome ``done`` or ``finished``).
    DONE = "done"
    #: Its response broke off after it had delivered content (a drop, a transport error, a
    #: stall or idle timeout): the reply went on elsewhere.
    DROPPED = "dropped"
    #: It delivered no content (an HTTP status, a connect error, no first token in time, a
    #: drop before content), or the reply failed while it served.
    FAILED = "failed"
    #: An error event came in its stream (a busy provider's ``overloaded_error`` ...).
    ERROR_EVENT = "error_event"
    #: It lost a hedged race (:class:`fluxstream._upstream.Failover` ``hedge_after``): its
    #: connection was aborted, its request is still listed for billing.
    LOST_HEDGE = "lost_hedge"
    #: Not asked: the circuit breaker had it cooling down.
    COOLING_DOWN = "cooling_down"
    #: The caller cancelled while it served or raced.
    CANCELLED = "cancelled"
    #: The reply ended cut short while it served, with no upstream left to go on.
    TRUNCATED = "truncated"

    def __str__(self) -> str:
        return self.value


class Segment(BaseModel):
    """One upstream's part of a reply (see :class:`fluxstream._upstream.Upstream`): who served
    it, which span of choice 0's text it delivered, how it ended and what it cost.

    ``start``/``end`` are code-point offsets of choice 0's text (``end - start`` characters
    came from this upstream; ``start == end`` for an upstream that delivered nothing: failed
    before content, lost a hedge, or skipped while cooling down). ``kind`` says how its part
    ended (:class:`SegmentEnd`), ``detail`` why, in words (the error, the timeout; empty for a
    reply served to its end). ``usage`` is the usage that upstream reported (billing is per
    upstream); when it delivered content but reported no final count (cut before its usage
    came, or only a snapshot such as Anthropic's ``message_start``), ``usage_estimate`` is
    fluxstream's estimate of its tokens (marked estimated), and the one to bill.
    ``requests`` is the requests sent to it.
    """

    model_config = ConfigDict(frozen=True)

    upstream: str
    api: str
    model: str | None = None
    start: int = 0
    end: int = 0
    kind: SegmentEnd = SegmentEnd.DONE
    detail: str = ""
    usage: Usage | None = None
    usage_estimate: UsageEstimate | None = None
    requests: int = 0
    #: The provider's id of this upstream's last request (``x-request-id``/``request-id``).
    request_id: str | None = None

    @property
    def ended(self) -> str:
        """:attr:`kind` and :attr:`detail` in one line (``"failed: APIStatusError: HTTP
        503: ..."``, ``"lost_hedge"``, ``"done"``), for a log or a display."""
        return f"{self.kind.value}: {self.detail}" if self.detail else self.kind.value


class TotalUsage(Usage):
    """:attr:`Reply.total_usage`: the tokens of every upstream of a reply added up;
    ``estimated`` when any part of it is fluxstream's estimate (an upstream that delivered
    content but reported no final count)."""

    estimated: bool = False


def _counts(
    usage: Usage | None, estimate: UsageEstimate | None
) -> tuple[int, int, int, bool] | None:
    """Input, output and total tokens of one part (its estimate when it has one: it is set
    only when no final count came), and whether they are estimated."""
    if estimate is not None:
        inputs = estimate.input_tokens or 0
        return inputs, estimate.output_tokens, inputs + estimate.output_tokens, True
    if usage is None:
        return None
    inputs, outputs = usage.prompt_tokens or 0, usage.completion_tokens or 0
    return inputs, outputs, usage.total_tokens or inputs + outputs, False


class Reply(BaseModel):
    """Everything a stream produced so far, and how it ended.

    ``outcome`` is ``None`` while streaming. It is ``failed`` whenever an error payload arrived,
    even when the sentinel followed; ``stream_end`` says how the byte stream itself ended
    (``done``/``finished``/``truncated``, or ``cancelled``/``failed`` for transport-driven
    ends) regardless of error payloads, and ``end_reason`` is the ``End`` event's reason.
    """

    id: str | None = None
    model: str | None = None
    choices: list[Choice] = []
    #: The last usage object received (servers that send several, e.g. llama.cpp with
    #: ``n=2`` one per choice, or vLLM's running totals on every chunk: see ``usage_updates``).
    usage: Usage | None = None
    #: Every usage object received, in order (at most 64: past that the last entry is
    #: replaced, so ``usage_updates[-1]`` is always ``usage``).
    usage_updates: list[Usage] = []
    #: Whether ``usage`` is only a snapshot the format sent before the end (Anthropic's
    #: ``message_start`` with its placeholder ``output_tokens: 1``, Gemini's running
    #: ``usageMetadata``, a Chat chunk's running totals), not the provider's final count.
    usage_partial: bool = False
    #: Set when the stream ended without a final usage (no ``usage`` at all, or only a
    #: snapshot: ``usage_partial``): the tokens estimated from what arrived
    #: (:class:`UsageEstimate`); then it, not ``usage``, is the count to bill. ``None``
    #: while streaming and whenever the server reported its final usage.
    usage_estimate: UsageEstimate | None = None
    #: What the reply cost, in the currency of the client's ``prices`` (per million tokens,
    #: for its model): from ``usage_estimate`` when there is one (then an estimate too), else
    #: from ``usage``; a reply served by several upstreams adds up each one's part, priced
    #: by its model. Never negative. ``None`` while streaming, or without a price for a model
    #: that has tokens to bill.
    cost: Decimal | None = None
    error: ErrorInfo | None = None
    outcome: Outcome | None = None
    stream_end: Outcome | None = None
    end_reason: str | None = None
    content_key: str = ""
    #: SSE events dispatched by the decoder (comments excluded).
    events: int = 0
    #: Data frames whose payload was not valid JSON (skipped in lenient mode).
    skipped_frames: int = 0
    #: SSE comment lines (keep-alives such as ``: ping``).
    heartbeats: int = 0
    #: Bytes fed to the parser.
    bytes: int = 0
    #: Each upstream's part, in order, when the stream has fallbacks (empty otherwise): see
    #: :class:`Segment`.
    segments: list[Segment] = []
    #: The provider's id of the request being read (``x-request-id``, Anthropic's
    #: ``request-id``; after a failover, the serving upstream's: each segment has its own).
    request_id: str | None = None

    @property
    def total_usage(self) -> TotalUsage | None:
        """The tokens of every upstream added up: a reply continued elsewhere was billed by
        each upstream it used. Each part is its reported usage or, for an upstream that
        delivered content without a final count, its estimate; ``estimated`` says whether
        any part is one. Without fallbacks: :attr:`usage` (or :attr:`usage_estimate`) as a
        total. ``None`` when there is nothing to add up."""
        parts = [_counts(s.usage, s.usage_estimate) for s in self.segments]
        counted = [p for p in parts if p is not None]
        if not counted:
            own = _counts(self.usage, self.usage_estimate)
            if own is None:
                return None
            if self.usage is not None and not own[3]:  # reported: every field it has, kept
                return TotalUsage.model_validate({**self.usage.model_dump(), "estimated": False})
            counted = [own]
        return TotalUsage(
            prompt_tokens=sum(p[0] for p in counted),
            completion_tokens=sum(p[1] for p in counted),
            total_tokens=sum(p[2] for p in counted),
            estimated=any(p[3] for p in counted),
        )

    @property
    def text(self) -> str:
        """``choices[0].text``, or ``""`` when there is no choice."""
        return self.choices[0].text if self.choices else ""

    def raise_for_outcome(self) -> Reply:
        """This reply if it ended well (``done`` or ``finished``), so that calls chain
        (``text = reply.raise_for_outcome().text``); otherwise a typed error carrying it as
        ``error.reply``, as ``httpx.Response.raise_for_status()`` does for a status. A cut
        stream ends quietly with outcome ``truncated``; code that never reads ``outcome``
        calls this (or lets the client do it: ``raise_for_outcome=True``).

        :raises StreamTruncatedError: ``truncated``: the bytes ended (or the connection broke)
            before the end marker and before every choice finished.
        :raises StreamFailedError: ``failed``: an error payload, or an HTTP, transport or
            protocol failure (its message is the reply's ``error`` when there is one).
        :raises StreamError: ``cancelled`` (the stream was stopped before its end: the reply
            is partial), or no outcome yet (the stream has not ended).
        """
        # The stream errors carry the reply (typed): they name this class, so it names them
        # only here, when one is raised (tests/test_layers.py, DELIBERATE_UPWARD).
        from .errors import StreamError, StreamFailedError, StreamTruncatedError

        outcome = self.outcome
        if outcome is Outcome.DONE or outcome is Outcome.FINISHED:
            return self
        if outcome is Outcome.TRUNCATED:
            raise StreamTruncatedError(
                "the stream ended before the sentinel and before every choice finished", self
            )
        if outcome is Outcome.FAILED:
            error = self.error
            raise StreamFailedError(
                error.message if error is not None else "the stream failed", self)
        if outcome is Outcome.CANCELLED:
            raise StreamError("the stream was cancelled", self)
        raise StreamError("the stream has not ended: the reply has no outcome yet", self)

    @overload
    def parse(
        self, tp: type[T], *, choice: int = 0, tool: str | None = None
    ) -> StructuredResult[T]: ...
    @overload
    def parse(
        self, tp: Any, *, choice: int = 0, tool: str | None = None
    ) -> StructuredResult[Any]: ...

    def parse(self, tp: Any, *, choice: int = 0, tool: str | None = None) -> Any:
        """The structured output of choice ``choice`` read as ``tp`` (a pydantic model or any
        type pydantic adapts): a :class:`~fluxstream.structured.StructuredResult` whose
        ``value`` is the validated instance when ``complete``; a reply cut short (``length``,
        ``max_tokens``, a network cut) gives the last partial object, ``complete=False`` and
        the ``reason``; a refusal gives ``refusal``.

        The object is the choice's text, or the arguments of its tool call named ``tool``
        (Anthropic's forced tool; found by ``tp``'s schema name when the text is empty).
        The type is an argument, not stored on the reply, so a reply dumped, sent and
        validated back parses the same.

        :raises ParseError: not JSON, not an object, or it does not validate.
        """
        found = next((c for c in self.choices if c.index == choice), None)
        if found is not None and (tool is not None or not found.text.strip()):
            name = tool if tool is not None else schema_name(tp)
            call = next((t for t in found.tool_calls if t.name == name), None)
            if call is not None:
                return parse_tool_call(call, tp, reply=self)
        return parse_reply(self, tp, choice=choice)


#: Unified stop reasons (:data:`fluxstream._reply.StopReason`) that cut the content short.
TRUNCATING_STOPS = frozenset({"length", "content_filter", "error"})
_CUT_OUTCOMES = (Outcome.TRUNCATED, Outcome.CANCELLED, Outcome.FAILED)


def _cut(
    reply: Reply | None, finish_reason: str | None, stop: str | None = None
) -> tuple[bool, str | None]:
    """Whether the content was cut short, and the reason to report (the raw finish reason,
    or how the stream ended). ``stop``: the format's unified stop, when known (Responses
    ``incomplete`` is ``length`` only through ``incomplete_details``)."""
    if (stop or unified_stop(finish_reason)) in TRUNCATING_STOPS:
        return True, finish_reason
    if reply is not None and reply.outcome in _CUT_OUTCOMES:
        assert reply.outcome is not None
        return True, reply.outcome.value
    if reply is not None and reply.outcome is None:  # still streaming: what arrived is partial
        return True, "streaming"
    return False, None


def parse_reply(reply: Reply, tp: Any, *, choice: int = 0) -> StructuredResult[Any]:
    """The structured result of a choice's text (``response_format`` output).

    :raises ParseError: see :meth:`ObjectBuilder.finish`.
    """
    found = next((c for c in reply.choices if c.index == choice), None)
    builder: ObjectBuilder[Any] = ObjectBuilder(tp)
    if found is None:
        return builder.finish(truncated=True, reason="no_choice")
    builder.feed(found.text)
    refusal = found.refusal
    if not refusal and found.stop == "refusal":  # Anthropic: the text is the refusal
        refusal = found.text or "refusal"
    truncated, reason = _cut(reply, found.finish_reason, found.stop)
    return builder.finish(truncated=truncated, reason=reason, refusal=refusal)


def parse_tool_call(
    call: ToolCall, tp: Any, *, reply: Reply | None = None, finish_reason: str | None = None
) -> StructuredResult[Any]:
    """The structured result of a tool call's arguments (Anthropic's "tool as schema", or any
    function call whose parameters are ``tp``). Pass the ``reply`` (or the choice's
    ``finish_reason``) so that a call cut short is reported as partial, not as an error.

    :raises ParseError: see :meth:`ObjectBuilder.finish`.
    """
    builder: ObjectBuilder[Any] = ObjectBuilder(tp)
    builder.feed(call.arguments)
    stop = None
    if finish_reason is None and reply is not None:
        owner = next((c for c in reply.choices if any(t is call for t in c.tool_calls)), None)
        if owner is not None:
            finish_reason, stop = owner.finish_reason, owner.stop
    truncated, reason = _cut(reply, finish_reason, stop)
    return builder.finish(truncated=truncated, reason=reason)
