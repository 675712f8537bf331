"""Normalized events -> the assembled :class:`~fluxstream._reply.Reply`, and the outcome.

``ReplyAssembler`` is the one place that decides how a stream ended (the transport only
reports "bytes ended", "cancelled" or "failed with X"). It is sans-IO and format-neutral: it
sees only :mod:`fluxstream._events`.

Why it looks the way it does:

* **Fragments, not ``str +=``.** Text and tool-call arguments are kept as lists of fragments;
  every ``_FOLD`` fragments are folded into one chunk (so memory follows the size of the reply,
  not the number of deltas), and the chunks are joined only when a snapshot is taken. Folding
  joins only the new fragments, never what was folded before, so it is linear in the deltas
  (folding everything into one string every ``_FOLD`` fragments was quadratic: 4M deltas took
  12 s, 8M 53 s).
* **Limits.** The assembler enforces the format-neutral :class:`~fluxstream._limits.StreamLimits`
  (choices, tool calls per choice, code points kept for the whole reply) and raises
  :class:`~fluxstream.errors.LimitExceededError` past them.
* **Cheap snapshots.** :meth:`ReplyAssembler.snapshot` rebuilds only the choices that changed
  since the last snapshot (``model_construct``, no re-validation) and returns the same object
  when nothing changed.
* **Lazy incremental partial JSON.** Each tool call owns a :class:`~fluxstream._partial_json.
  PartialJSON`, created on the first :meth:`~fluxstream._reply.ToolCall.partial_arguments`
  call and fed only the text that arrived since the previous one.
* **Outcome, never guessed.** ``done`` on the sentinel, ``finished`` when the bytes ended but
  every choice has a finish reason, ``truncated`` otherwise (including a payload cut by the
  end of the bytes), ``failed`` whenever an error payload arrived (``Reply.stream_end`` keeps
  how the bytes ended), ``cancelled``/``failed`` for transport-driven ends. The sentinel
  alone is not enough: ``[DONE]`` (or another format's end marker, such as Anthropic's
  ``message_stop``) when no choice has a finish reason (and no error arrived) is
  ``truncated`` with reason ``"sentinel without a finish reason"`` (llama-cpp-python sends
  exactly that when another request interrupts a stream; ``"message_stop without ..."``)
  unless ``require_finish_reason`` is off, for servers that never send finish reasons. The
  rule is per stream, not per choice: a stream where some choices finished stays ``done``,
  the others keep ``finish_reason=None``.
* **Usage.** Every usage object is kept in order (``Reply.usage_updates``, at most
  ``_MAX_USAGE_UPDATES``: past that the last entry is replaced, so memory stays bounded when a
  server sends usage on every chunk); ``Reply.usage`` is the last one received, and
  ``Reply.usage_partial`` whether it was only a snapshot sent before the end (see
  :class:`~fluxstream._events.UsageUpdate`), not the format's final count.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, NoReturn, TypeVar

from pydantic import BaseModel

from ._events import (
    End,
    ErrorEvent,
    Event,
    Finish,
    ReasoningBlock,
    ReasoningDelta,
    RefusalDelta,
    Reset,
    TextDelta,
    ToolCallDelta,
    ToolCallDone,
    UsageUpdate,
)
from ._limits import DEFAULT_STREAM_LIMITS, StreamLimits
from ._partial_json import PartialJSON
from ._reply import Choice, ErrorInfo, Outcome, Reply, ToolCall, Usage, UsageEstimate
from .errors import FluxstreamError, LimitExceededError

__all__ = ["ReplyAssembler"]

M = TypeVar("M", bound=BaseModel)

_FOLD = 256  # fragments kept before folding them into one chunk
_MAX_USAGE_UPDATES = 64  # usage objects kept in Reply.usage_updates

# Every join of kept text goes through this global, so that tests can count the characters
# copied and hold the fold to O(n).
_join = "".join

_setattr = object.__setattr__


def _construct(cls: type[M], values: dict[str, Any], private: dict[str, Any] | None = None) -> M:
    """``cls.model_construct(**values)`` for values the assembler produced itself, without its
    per-call overhead (it dominated snapshot time). ``values`` must hold every field."""
    obj = cls.__new__(cls)
    _setattr(obj, "__dict__", values)
    _setattr(obj, "__pydantic_fields_set__", set(values))
    _setattr(obj, "__pydantic_extra__", None)
    _setattr(obj, "__pydantic_private__", private)
    return obj


class _Text:
    """A growing string: recent fragments, and earlier ones folded into chunks of ``_FOLD``
    fragments each; joined on demand (and then kept as one chunk).

    Each character is copied once by folding, then once by every :meth:`value` that is the
    first to see it (and once more per later :meth:`value` after new text arrived: the cost
    of building the snapshot string itself).
    """

    __slots__ = ("chunks", "parts")

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.parts: list[str] = []

    def add(self, text: str) -> None:
        parts = self.parts
        parts.append(text)
        if len(parts) > _FOLD:
            self.chunks.append(_join(parts))
            self.parts = []

    def value(self) -> str:
        chunks = self.chunks
        if self.parts:
            chunks += self.parts
            self.parts = []
        if len(chunks) > 1:
            self.chunks = chunks = [_join(chunks)]
        return chunks[0] if chunks else ""


class _Call:
    """One tool call being assembled; also the incremental partial-JSON source."""

    __slots__ = ("args", "done", "id", "index", "name", "partial", "pending")

    def __init__(self, index: int) -> None:
        self.index = index
        self.id: str | None = None
        self.name: str | None = None
        self.args = _Text()
        self.done = False
        # Created on the first request for partial arguments; from then on every fragment is
        # also queued in ``pending`` until the next request feeds it (O(fragment) each).
        self.partial: PartialJSON | None = None
        self.pending: list[str] = []

    def add(self, text: str) -> None:
        self.args.add(text)
        if self.partial is not None:
            self.pending.append(text)

    def model(self) -> ToolCall:
        return _construct(
            ToolCall,
            {"index": self.index, "id": self.id, "name": self.name,
             "arguments": self.args.value()},
            {"_source": self},
        )

    def current(self) -> PartialJSON:
        """The incremental parser, fed with everything that arrived so far."""
        partial = self.partial
        if partial is None:
            partial = self.partial = PartialJSON()
            partial.feed(self.args.value())
        elif self.pending:
            partial.feed("".join(self.pending))
            self.pending = []
        return partial

    def value_at(self, arguments: str) -> Any:
        """:class:`~fluxstream._reply.PartialSource` for the call's reply snapshots."""
        partial = self.current()
        if partial.consumed != len(arguments):
            raise LookupError("the snapshot is older than the incremental state")
        return partial.value()


class _Choice:
    __slots__ = (
        "blocks", "calls", "dirty", "finish", "index", "model", "reasoning", "refusal", "stop",
        "text", "unclosed",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.text = _Text()
        self.reasoning = _Text()
        self.refusal = _Text()
        self.calls: dict[int, _Call] = {}
        self.finish: str | None = None
        self.stop: str | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.unclosed = False
        self.dirty = True
        self.model: Choice | None = None

    def build(self) -> Choice:
        if self.dirty or self.model is None:
            # Most choices are text alone: the empty channels, calls and blocks are skipped
            # without a call each (every stream's reply is built at least once).
            reasoning, refusal = self.reasoning, self.refusal
            calls, blocks = self.calls, self.blocks
            self.model = _construct(
                Choice,
                {
                    "index": self.index,
                    "text": self.text.value(),
                    "reasoning": reasoning.value() or None
                    if reasoning.parts or reasoning.chunks else None,
                    "refusal": refusal.value() or None if refusal.parts or refusal.chunks else None,
                    "tool_calls": [calls[i].model() for i in sorted(calls)] if calls else [],
                    "finish_reason": self.finish,
                    "stop": self.stop,
                    "reasoning_blocks": [blocks[i] for i in sorted(blocks)] if blocks else [],
                    "reasoning_unclosed": self.unclosed,
                },
            )
            self.dirty = False
        return self.model


class ReplyAssembler:
    """Feed normalized events; read the reply; end it once.

    :meth:`feed` returns the events to pass on: the input, with a
    :class:`~fluxstream._events.ToolCallDone` inserted after a choice's first
    :class:`~fluxstream._events.Finish` for each of its calls.

    :param require_finish_reason: the sentinel with no finish reason on any choice ends
        ``truncated`` (see the module docstring); ``False`` for servers that never send one.
    :param limits: :class:`~fluxstream._limits.StreamLimits` (choices, tool calls, reply size).
    """

    def __init__(
        self,
        content_key: str,
        *,
        require_finish_reason: bool = True,
        limits: StreamLimits = DEFAULT_STREAM_LIMITS,
    ) -> None:
        self.key = content_key
        self.require_finish_reason = require_finish_reason
        self.limits = limits
        self._choices: dict[int, _Choice] = {}
        # Code points of content kept (text, reasoning, refusal, arguments; all choices).
        self._size = 0
        self.usage: Usage | None = None
        #: Every usage object received, in order (see ``_MAX_USAGE_UPDATES``).
        self.usage_updates: list[Usage] = []
        #: Whether :attr:`usage` is only an early snapshot, not the format's final count.
        self.usage_partial = False
        #: Set once the stream has ended (:mod:`fluxstream._usage`): every later snapshot
        #: carries them.
        self.usage_estimate: UsageEstimate | None = None
        self.cost: Decimal | None = None
        self.error: ErrorInfo | None = None
        self.outcome: Outcome | None = None
        self.stream_end: Outcome | None = None
        self.end_reason: str | None = None
        #: Any text, reasoning, refusal or tool-call delta so far.
        self.saw_content = False
        self._version = 0
        self._snapshot_version = -1
        self._choice_models: list[Choice] = []
        #: When :meth:`feed` raised part way through a batch (a limit): the events of that
        #: batch it had applied (the reply holds them), for the parser to deliver.
        self.applied_before_error: list[Event] = []

    @property
    def finished(self) -> bool:
        """An ``End`` was emitted."""
        return self.outcome is not None

    @property
    def all_finished(self) -> bool:
        """At least one choice, and every choice has a finish reason."""
        choices = self._choices.values()
        return bool(choices) and all(st.finish is not None for st in choices)

    def _choice(self, index: int) -> _Choice:
        st = self._choices.get(index)
        if st is None:
            self._check_choices()
            st = self._choices[index] = _Choice(index)
        return st

    def _check_choices(self) -> None:
        limit = self.limits.max_choices
        if len(self._choices) >= limit:
            raise LimitExceededError("max_choices", limit, len(self._choices) + 1)

    def add_choices(self, indexes: list[int]) -> None:
        """Choices that appeared in the stream, with or without content."""
        for index in indexes:
            if index not in self._choices:
                self._check_choices()
                self._choices[index] = _Choice(index)
                self._version += 1

    # ------------------------------------------------------------------ events

    def feed(self, events: list[Event]) -> list[Event]:
        """Apply events in order; return them plus any ``ToolCallDone`` they caused."""
        if not events:
            return events
        self._version += 1
        choices = self._choices
        out: list[Event] | None = None
        size = 0
        # Characters this batch may still add: the delta that would cross max_reply_chars is
        # not kept (nor any after it), so the reply never holds more than the limit, and what
        # it holds does not depend on how the events were batched.
        room = self.limits.max_reply_chars - self._size
        seen = self.saw_content
        try:
            for position, ev in enumerate(events):
                cls = ev.__class__
                if cls is TextDelta:
                    # The most common event, with _Text.add inlined.
                    text = ev.text  # type: ignore[union-attr]
                    st = choices.get(ev.choice)  # type: ignore[union-attr]
                    if st is None:
                        st = self._choice(ev.choice)  # type: ignore[union-attr]
                    size += len(text)
                    if size > room:
                        size -= len(text)  # not kept
                        self._too_large(size, len(text))
                    kept = st.text
                    parts = kept.parts
                    parts.append(text)
                    if len(parts) > _FOLD:
                        kept.chunks.append(_join(parts))
                        kept.parts = []
                    st.dirty = True
                    if not seen:
                        self.saw_content = seen = True
                elif cls is ReasoningDelta or cls is RefusalDelta:
                    st = choices.get(ev.choice)  # type: ignore[union-attr]
                    if st is None:
                        st = self._choice(ev.choice)  # type: ignore[union-attr]
                    delta = len(ev.text)  # type: ignore[union-attr]
                    if size + delta > room:
                        self._too_large(size, delta)
                    size += delta
                    if cls is ReasoningDelta:
                        st.reasoning.add(ev.text)  # type: ignore[union-attr]
                    else:
                        st.refusal.add(ev.text)  # type: ignore[union-attr]
                    st.dirty = True
                    self.saw_content = seen = True
                elif cls is ToolCallDelta:
                    assert isinstance(ev, ToolCallDelta)
                    delta = len(ev.arguments)
                    if size + delta > room:
                        self._too_large(size, delta)
                    self._tool_delta(ev)
                    size += delta
                elif cls is Finish:
                    assert isinstance(ev, Finish)
                    done = self._finish(ev)
                    if done:
                        if out is None:
                            out = list(events[:position])
                        out.append(ev)
                        out += done
                        continue
                elif cls is UsageUpdate:
                    assert isinstance(ev, UsageUpdate)
                    self.usage = ev.usage
                    self.usage_partial = not ev.final
                    updates = self.usage_updates
                    if len(updates) < _MAX_USAGE_UPDATES:
                        updates.append(ev.usage)
                    else:
                        updates[-1] = ev.usage
                elif cls is ReasoningBlock:
                    assert isinstance(ev, ReasoningBlock)
                    st = choices.get(ev.choice) or self._choice(ev.choice)
                    st.blocks[ev.index] = ev.block
                    st.dirty = True
                elif cls is ErrorEvent:
                    assert isinstance(ev, ErrorEvent)
                    self.error = ErrorInfo.model_construct(
                        message=ev.message, code=ev.code, type=ev.error_type, param=ev.param,
                        raw=ev.raw,
                    )
                if out is not None:
                    out.append(ev)
        except FluxstreamError:
            # The events before this one were applied: the parser delivers them.
            self.applied_before_error = events[:position] if out is None else out
            raise
        finally:
            # Also when a limit raised mid-batch: the events before it were applied.
            if size:
                self._size += size
        return events if out is None else out

    def _too_large(self, size: int, delta: int) -> NoReturn:
        """A delta of ``delta`` characters after ``size`` characters of this batch would
        cross ``max_reply_chars``: it is not kept (``feed`` counts the ``size`` applied)."""
        raise LimitExceededError(
            "max_reply_chars", self.limits.max_reply_chars, self._size + size + delta
        )

    def _tool_delta(self, ev: ToolCallDelta) -> None:
        st = self._choices.get(ev.choice) or self._choice(ev.choice)
        call = st.calls.get(ev.call)
        if call is None:
            limit = self.limits.max_tool_calls
            if len(st.calls) >= limit:
                raise LimitExceededError("max_tool_calls", limit, len(st.calls) + 1)
            call = st.calls[ev.call] = _Call(ev.call)
        if ev.id is not None and call.id is None:
            call.id = ev.id
        if ev.name is not None and call.name is None:
            call.name = ev.name
        if ev.replace:
            # The provider's final value disagreed with the fragments: keep the agreeing
            # prefix, restart the incremental partial-JSON state.
            kept = call.args.value()[: ev.offset]
            call.args = _Text()
            if kept:
                call.args.add(kept)
            call.partial = None
            call.pending = []
            call.done = False
        if ev.arguments:
            call.add(ev.arguments)
            call.done = False
        st.dirty = True
        self.saw_content = True

    def _finish(self, ev: Finish) -> list[Event]:
        st = self._choices.get(ev.choice) or self._choice(ev.choice)
        st.finish = ev.reason
        st.stop = ev.stop
        st.dirty = True
        return self._calls_done(st)

    def _calls_done(self, st: _Choice) -> list[Event]:
        done: list[Event] = []
        for index in sorted(st.calls):
            call = st.calls[index]
            if not call.done:
                call.done = True
                done.append(ToolCallDone(self.key, st.index, call.model()))
        return done

    # ------------------------------------------------------------------ ends

    def end(self, *, sentinel: bool, cut: bool, reason: str) -> list[Event]:
        """The bytes ended (or the sentinel / a complete body arrived): decide the outcome."""
        if self.finished:
            return []
        if sentinel:
            stream_end = Outcome.DONE
            if (
                reason != "completion"
                and self.require_finish_reason
                and self.error is None
                and not any(st.finish is not None for st in self._choices.values())
            ):
                # Any stream's end marker (``[DONE]``, Anthropic's ``message_stop`` ...): a
                # whole body (``completion``) is complete by itself.
                stream_end = Outcome.TRUNCATED
                reason = f"{reason} without a finish reason"
        elif not cut and self.all_finished:
            stream_end = Outcome.FINISHED
        else:
            stream_end = Outcome.TRUNCATED
        out: list[Event] = []
        if self.error is not None:
            outcome = Outcome.FAILED
            reason = f"error payload ({reason})"
        else:
            outcome = stream_end
            if stream_end is not Outcome.TRUNCATED:
                for index in sorted(self._choices):
                    out += self._calls_done(self._choices[index])
        return out + self._end(outcome, stream_end, reason)

    def cancel(self, reason: str) -> list[Event]:
        if self.finished:
            return []
        return self._end(Outcome.CANCELLED, Outcome.CANCELLED, reason)

    def end_at_length(self, reason: str) -> list[Event]:
        """End here, complete: the reply's length cap is spent (counted by the caller across
        the upstreams that served it). Every choice without a finish reason finishes
        ``length``, as a model that reached the cap does; the outcome is ``finished``."""
        if self.finished:
            return []
        finishes: list[Event] = [
            Finish(self.key, st.index, "length", "length")
            for st in self._choices.values() if st.finish is None
        ]
        out = self.feed(finishes) if finishes else []
        return out + self.end(sentinel=False, cut=False, reason=reason)

    def fail(self, reason: str) -> list[Event]:
        if self.finished:
            return []
        return self._end(Outcome.FAILED, Outcome.FAILED, reason)

    def _end(self, outcome: Outcome, stream_end: Outcome, reason: str) -> list[Event]:
        self.outcome = outcome
        self.stream_end = stream_end
        self.end_reason = reason
        self._version += 1
        return [End(outcome, reason)]

    def reset(self, attempt: int, reason: str) -> list[Event]:
        """A restarted generation: forget the content, announce it with a ``Reset``."""
        self._choices = {}
        self._size = 0
        self.usage = None
        self.usage_updates = []
        self.usage_partial = False
        self.error = None
        self.outcome = self.stream_end = None
        self.end_reason = None
        self.saw_content = False
        self._version += 1
        return [Reset(self.key, attempt, reason)]

    # ------------------------------------------------------------------ resume support

    def continuable(self) -> bool:
        """One choice, some text, nothing else that a text continuation could not extend
        (no tool call, refusal, finish reason or error), and not ended."""
        if self.finished or self.error is not None or len(self._choices) != 1:
            return False
        st = self._choices.get(0)
        return (
            st is not None
            and st.finish is None
            and not st.calls
            and not st.refusal.value()
            and bool(st.text.value())
        )

    def feed_last(self, events: list[Event], unclosed: list[int]) -> list[Event]:
        """The last deltas before an end the I/O layer states (what a tag splitter held
        back; ``unclosed``: its choices whose reasoning never closed): applied as far as the
        limits let them, never raising on the way to the end."""
        self.mark_unclosed(unclosed)
        try:
            return self.feed(events) if events else []
        except FluxstreamError:  # a limit crossed by the last few characters: what fit
            applied, self.applied_before_error = self.applied_before_error, []
            return applied

    def mark_unclosed(self, indexes: list[int]) -> None:
        """Reasoning of these choices, sent inside tags, ended without its closing tag."""
        for index in indexes:
            st = self._choices.get(index)
            if st is not None and not st.unclosed:
                st.unclosed = st.dirty = True
                self._version += 1

    def text_of(self, choice: int) -> str:
        st = self._choices.get(choice)
        return st.text.value() if st is not None else ""

    def offsets(self) -> dict[str, Any]:
        """Code points delivered per channel and per tool call: JSON-serialisable."""
        return {
            str(index): {
                "text": len(st.text.value()),
                "reasoning": len(st.reasoning.value()),
                "refusal": len(st.refusal.value()),
                "tool_calls": {str(i): len(c.args.value()) for i, c in st.calls.items()},
            }
            for index, st in self._choices.items()
        }

    def restore(self, reply: Reply) -> None:
        """Take over a partial reply (from a resume token) as if it had streamed here."""
        for choice in reply.choices:
            st = self._choice(choice.index)
            for channel, value in (
                (st.text, choice.text),
                (st.reasoning, choice.reasoning),
                (st.refusal, choice.refusal),
            ):
                if value:
                    channel.add(value)
            for call in choice.tool_calls:
                entry = st.calls[call.index] = _Call(call.index)
                entry.id, entry.name = call.id, call.name
                if call.arguments:
                    entry.add(call.arguments)
            st.finish = choice.finish_reason
            st.stop = choice.stop
            st.blocks = {i: dict(b) for i, b in enumerate(choice.reasoning_blocks)}
            self.saw_content = self.saw_content or bool(
                choice.text or choice.reasoning or choice.refusal or choice.tool_calls
            )
        self.usage = reply.usage
        self.usage_updates = list(reply.usage_updates[:_MAX_USAGE_UPDATES])
        self.usage_partial = reply.usage_partial
        self._size = sum(
            len(c.text) + len(c.reasoning or "") + len(c.refusal or "")
            + sum(len(t.arguments) for t in c.tool_calls)
            for c in reply.choices
        )
        self.error = reply.error
        self._version += 1

    # ------------------------------------------------------------------ snapshots

    def partial_arguments(self, choice: int, call: int) -> Any:
        """Best-effort JSON value of a call's arguments so far, without taking a snapshot
        (no join of the whole argument string): the cheapest way to render them live."""
        st = self._choices.get(choice)
        entry = st.calls.get(call) if st is not None else None
        if entry is None:
            raise KeyError(f"no tool call {call} in choice {choice}")
        return entry.current().value()

    def choices(self) -> list[Choice]:
        """The choices, ordered by index (rebuilt only where something changed)."""
        if self._snapshot_version != self._version:
            self._choice_models = [self._choices[i].build() for i in sorted(self._choices)]
            self._snapshot_version = self._version
        return self._choice_models

    def snapshot(
        self,
        *,
        id: str | None,
        model: str | None,
        events: int,
        skipped_frames: int,
        heartbeats: int,
        bytes: int,
        segments: list[Any] | None = None,
        request_id: str | None = None,
    ) -> Reply:
        """A :class:`~fluxstream._reply.Reply`, with the id, model and counters given."""
        return _construct(
            Reply,
            {
                "id": id,
                "model": model,
                "choices": list(self.choices()),
                "usage": self.usage,
                "usage_updates": list(self.usage_updates),
                "usage_partial": self.usage_partial,
                "usage_estimate": self.usage_estimate,
                "cost": self.cost,
                "error": self.error,
                "outcome": self.outcome,
                "stream_end": self.stream_end,
                "end_reason": self.end_reason,
                "content_key": self.key,
                "events": events,
                "skipped_frames": skipped_frames,
                "heartbeats": heartbeats,
                "bytes": bytes,
                "segments": segments or [],
                "request_id": request_id,
            },
        )
