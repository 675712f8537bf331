"""The OpenAI Responses API stream format (``POST /responses`` with ``stream: true``).

Named events (``event: response.output_text.delta``), one JSON object per event carrying its
own ``type`` and a ``sequence_number``, no ``[DONE]``: the stream ends with
``response.completed``, ``response.incomplete`` or ``response.failed``. A Responses stream has
one output, so everything lands in choice 0.

Mapping (the corpus conventions, ``tests/fixtures/chat/README.md``):

* ``response.output_text.delta`` -> text; ``response.reasoning_summary_text.delta`` and
  ``response.reasoning_text.delta`` -> reasoning; ``response.refusal.delta`` -> refusal. A
  ``*.done`` text is used only when no delta arrived for that part (servers that send only
  ``.done``); otherwise the deltas win (a ``.done`` that disagrees is not shown twice). A part
  is matched by output and part index, a missing index matching any (LiteLLM streams summary
  deltas without ``summary_index`` and then names ``summary_index: 0`` in their ``.done``).
* ``function_call`` output items -> tool calls: index = ``output_index``, id = ``call_id`` (not
  the ``fc_...`` item id), name from the item. Servers that send no ``output_index``
  (llama.cpp's) are read by the item's id (``item.id``, ``item_id``): each new item takes the
  next output position in arrival order, which is what ``output_index`` would have said; an
  argument event that names no item continues the call streamed last; arguments are the streamed
  ``response.function_call_arguments.delta`` fragments, *replaced* by
  ``response.function_call_arguments.done`` / ``response.output_item.done`` when those
  arrive (LM Studio sends only ``.done``). A final value that extends the fragments is
  delivered as one more fragment; one that disagrees is delivered with ``replace=True``. After
  a resume from a token the streamed text is not known, so the final value replaces it whole
  (``replace=True`` at offset 0). A call named only by a ``.done`` is announced like any
  other, so the assembler's ``max_tool_calls`` bounds it.
* ``response.completed|incomplete|failed`` are terminal (outcome ``done``); when nothing was
  streamed before (a proxy emulating a stream with the final response alone), the terminal
  response's ``output`` is read as the content, as openai-python's helper does; the raw finish
  reason is the response's ``status``; the unified one is ``stop`` (``tool_calls`` when there
  are function calls), ``incomplete`` by ``incomplete_details.reason`` (``max_output_tokens``
  -> ``length``, ``content_filter`` -> ``content_filter``), ``failed`` -> ``error``. The
  response's ``usage`` (own field names kept) and ``id`` are taken.
* ``error`` events (message flat or under ``error``) and ``response.failed``'s
  ``response.error`` become ``reply.error`` (the first error wins: the ``error`` event has the
  detail, ``response.failed`` repeats it).
* ``reasoning`` output items are kept as :class:`~fluxstream._events.ReasoningBlock` (they
  carry ``encrypted_content`` when requested, which a stateless conversation sends back).
* other ``response.*`` events (content parts, annotations, hosted tools ...) are ignored; a
  ``type`` outside that namespace is skipped and counted; ``keepalive`` counts as a heartbeat.
* every event carries a strictly increasing ``sequence_number``: :attr:`ResponsesFormat.
  sequence` is the highest seen (the ``starting_after`` of OpenAI's resume,
  ``GET /responses/{id}?stream=true&starting_after=N``). Only a re-read (after
  :meth:`~ResponsesFormat.new_connection`, or from a token) drops events as delivered
  already: its leading events at or below ``N`` (a server that ignores ``starting_after`` and
  starts over never shows text twice), each skipped and counted (and in ``replayed``). On a
  first connection nothing was delivered before, so a number that repeats or goes backwards
  drops nothing; such numbers cannot order a re-read (nor can one that is not a count), so
  :attr:`~ResponsesFormat.ordered` turns false and the parser offers no ``starting_after``.
  That a re-read's first new event is ``N + 1`` is checked by the parser
  (:class:`~fluxstream._core.resume_check.SequenceCheck`). A number outside ``0 .. 2**53`` is not
  used: one absurd value would hide every later event.
* usage that is not an object, and usage fields of the wrong type, are dropped and counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec

from .._events import Event, Finish, ReasoningBlock, UsageUpdate
from .._limits import DEFAULT_STREAM_LIMITS, StreamLimits
from .._reply import StopReason, unified_stop
from ._base import (
    MAX_SEQUENCE,
    approx_size,
    error_event,
)
from ._contract import Claim
from ._event_makers import text_delta, tool_delta
from ._responses_calls import CallReader
from ._responses_items import MAX_PARTS, count, item_texts
from ._usage_fields import normalized_usage

__all__ = ["MAX_PARTS", "ResponsesFormat"]


class _TextDelta(msgspec.Struct, tag_field="type", tag="response.output_text.delta"):
    """The fields of a text fragment :meth:`ResponsesFormat.quick` reads (the others, such
    as ``logprobs`` and ``obfuscation``, are skipped undecoded). A value of another type
    than these makes the decode fail: the general path reads it."""

    delta: str
    sequence_number: int | None = None
    output_index: int | None = None
    content_index: int | None = None
    item_id: str | None = None


class _ArgumentsDelta(msgspec.Struct, tag_field="type",
                      tag="response.function_call_arguments.delta"):
    """The fields of an argument fragment :meth:`ResponsesFormat.quick` reads."""

    delta: str
    output_index: int
    sequence_number: int | None = None


_QUICK = msgspec.json.Decoder(_TextDelta | _ArgumentsDelta)

_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_INCOMPLETE: dict[str, StopReason] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}


class ResponsesFormat(CallReader):
    """Sans-IO: Responses stream events in, normalized events out (see the module docstring).

    :param key: the content key stamped on every keyed event.
    :param strict: raise :class:`~fluxstream.errors.FrameDecodeError` on a frame that is not a
        JSON object, instead of skipping and counting it.
    :param limits: :class:`~fluxstream._limits.StreamLimits`: a function call past
        ``max_tool_calls`` raises :class:`~fluxstream.errors.LimitExceededError` before the
        format keeps it.
    """

    #: Its events carry ``sequence_number`` and the response's id, a re-read's position.
    rereads: ClassVar[bool] = True

    __slots__ = ("_errored", "live", "ordered", "replayed", "response_id", "sequence")

    def __init__(self, key: str, *, strict: bool = False,
                 limits: StreamLimits = DEFAULT_STREAM_LIMITS) -> None:
        super().__init__(key, strict=strict, limits=limits)
        #: The highest ``sequence_number`` seen (``-1``: none): the ``starting_after`` to
        #: resume a background response from (``GET /responses/{id}?stream=true&...``).
        self.sequence = -1
        #: Events dropped because their ``sequence_number`` was already seen.
        self.replayed = 0
        #: The id of the response being streamed now (``reply.id`` stays the first one's: a
        #: continuation is a new response). What a ``starting_after`` resume re-reads.
        self.response_id: str | None = None
        #: An event past ``sequence`` arrived on this connection: what follows is new, whatever
        #: its number (before it, on a re-read, an event at or below ``sequence`` is a replay).
        self.live = False
        #: The numbers only ever grew: a ``starting_after`` re-read can be trusted.
        self.ordered = True
        self._errored = False
        self._new_response()

    # ------------------------------------------------------------------ detection

    @classmethod
    def claims(cls, event: str, payload: Mapping[str, Any] | None) -> Claim:
        """Every event of this API names itself ``response.*`` (its ``type``, and its
        ``event:`` line when there is one)."""
        kind = payload.get("type") if payload is not None else None
        if kind.__class__ is str and kind.startswith("response."):
            return Claim.SURE
        return Claim.LIKELY if event.startswith("response.") else Claim.NO

    reply_shape = "a response object, with 'output'"

    @classmethod
    def claims_body(cls, body: Mapping[str, Any]) -> Claim:
        """A ``response`` object (``object: "response"``, an ``output`` list)."""
        return Claim.LIKELY if body.get("object") == "response" or "output" in body else Claim.NO

    @classmethod
    def claims_state(cls, state: Mapping[str, Any], sequence: int | None) -> Claim:
        """Its state lists the streamed ``parts``; a token with a ``sequence`` is a
        Responses stream's too (only this API numbers its events)."""
        if isinstance(state.get("parts"), list):
            return Claim.SURE
        return Claim.LIKELY if sequence is not None else Claim.NO

    def _new_response(self) -> None:
        """Parts, items and calls are a response's own (a continuation is a new response)."""
        self._new_parts()
        #: The call streamed last (an argument event naming no item continues it).
        self.last_call = None

    def reset(self) -> None:
        super().reset()
        self.sequence = -1
        self.response_id = None
        self.live = False
        self.ordered = True
        self._errored = False
        self._new_response()

    def continued(self) -> None:
        """A continuation request follows: a *new* response, whose sequence numbers count
        from 0 again and whose parts are new (offsets and the reply go on)."""
        self.sequence = -1
        self.response_id = None
        self.ordered = True
        self._new_response()

    def errored_before(self) -> None:
        """An error event arrived before this format was chosen (``auto``): it is the first
        error, which ``response.failed`` then only repeats."""
        self._errored = True

    def new_connection(self) -> None:
        """A new connection (a re-read, a resume): its leading events at or below
        :attr:`sequence` were delivered already."""
        super().new_connection()
        self.live = False

    def resume_sequence(self) -> int | None:
        """:attr:`sequence` when the numbers can order a re-read."""
        seq = self.sequence
        return seq if self.ordered and 0 <= seq < MAX_SEQUENCE else None

    def restore_position(self, sequence: int | None, response_id: str | None) -> None:
        """A token's position: events at or below ``sequence`` are never shown again."""
        if sequence is not None:
            self.sequence = sequence
        if response_id is not None:
            self.response_id = response_id

    # ------------------------------------------------------------------ resume tokens

    def resume_state(self) -> dict[str, Any]:
        """What a resume token must carry beyond the reply: the parts that received deltas
        (a resume after the last delta of a part must not take that part's ``.done`` text as
        new text: it would show the whole part twice), whether an error arrived and the
        surrogate halves held back (:meth:`held_state`)."""
        return {"parts": [list(marker) for marker in self._parts],
                "shown": [list(marker) for marker in self._shown],
                **self.items.state(), "last_call": self.last_call,
                "errored": self._errored, "held": self.held_state()}

    def restore_state(self, state: Any) -> None:
        """Take over :meth:`resume_state` from a token; entries that are not what it writes
        are left out (a token is data from outside: it cannot make the format crash)."""
        if not isinstance(state, Mapping):
            return
        self._parts.restore(state.get("parts"))
        self._shown.restore(state.get("shown"))
        self.items.restore(state)
        self.last_call = count(state.get("last_call"))
        self._errored = state.get("errored") is True
        self.restore_held(state.get("held"))

    # ------------------------------------------------------------------ events

    delta_kinds = frozenset({
        "response.output_text.delta", "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta", "response.refusal.delta",
        "response.function_call_arguments.delta",
    })

    quick_decoder = _QUICK
    quick_events = frozenset({"message", "response.output_text.delta",
                              "response.function_call_arguments.delta"})

    def quick(self, obj: _TextDelta | _ArgumentsDelta, out: list[Event]) -> bool:
        """A text or argument fragment that :meth:`dispatch` would map without a decision
        of its own: a ``sequence_number`` past every one seen (or none), a text fragment
        of the part streamed last, an argument fragment of a known call. Any other one is
        declined before anything changes (the general path decides)."""
        seq = obj.sequence_number
        if seq is not None and not self.sequence < seq < MAX_SEQUENCE:
            return False  # a replay, a number out of order or out of range: dispatch decides
        text = obj.delta
        if isinstance(obj, _TextDelta):
            if text and (obj.output_index, obj.content_index, obj.item_id) != self._text_part:
                return False  # a new part: where it is, whether its .done came first
            if seq is not None:
                self.sequence = seq
                self.live = True
            if not text:
                return True
            if not self.started:
                self.start()
            offset = self.text
            self.text = offset + len(text)
            out.append(text_delta(self.key, 0, offset, text))
            return True
        index = obj.output_index
        call = self.calls.get(index)
        if call is None:
            return False  # a fragment before its item, or of no call: dispatch decides
        if seq is not None:
            self.sequence = seq
            self.live = True
        if text:
            out.append(tool_delta(self.key, 0, index, None, None, text, call.add(text)))
        return True

    def dispatch(self, kind: str, obj: Mapping[str, Any]) -> list[Event]:
        seq = obj.get("sequence_number")
        if seq.__class__ is int and 0 <= seq < MAX_SEQUENCE:
            if seq > self.sequence:
                self.sequence = seq
                self.live = True
            elif not self.live:
                # A re-read's leading event that was delivered already (its server started
                # over): never shown twice, and counted.
                self.replayed += 1
                return self.skip(f"delivered already (sequence_number {seq})", obj)
            else:
                self.ordered = False  # read as it is: nothing was dropped for a number
        elif seq is not None:
            self.ordered = False  # a number that is not one: it cannot order a re-read
        if kind == "response.output_text.delta" and not self.scan:
            # Hot path, inlined: nearly every event of a text reply is one of these (once lone
            # surrogate halves were seen, ``scan``, the general path joins them).
            text = obj.get("delta")
            if text.__class__ is not str or not text:
                return []
            part = (obj.get("output_index"), obj.get("content_index"), obj.get("item_id"))
            if part != self._text_part:
                # A new part (rarely): where it is, and whether its ``.done`` came first.
                marker = ("text", self.items.output_of(obj), count(part[1]))
                if self._shown.has(marker):
                    return self.skip("delta after its part's .done", obj)
                self._text_part = part
                self._parts.add(marker)
            if not self.started:
                self.start()
            offset = self.text
            self.text = offset + len(text)
            return [text_delta(self.key, 0, offset, text)]
        out: list[Event] = []
        if kind == "response.function_call_arguments.delta":
            text = obj.get("delta")
            index: Any = obj.get("output_index")
            call = self.calls.get(index) if index.__class__ is int else None
            if call is None or text.__class__ is not str or self.scan:
                self._arguments_delta(obj, out)  # the general path: checks, skips, opens
                return out
            if not text:
                return out
            return [tool_delta(self.key, 0, index, None, None, text, call.add(text))]
        if kind == "response.output_text.delta":
            self._delta("text", obj, out)
        elif kind == "response.reasoning_summary_text.delta":
            self._delta("reasoning", obj, out, "summary_index", "summary")
        elif kind == "response.reasoning_text.delta":
            self._delta("reasoning", obj, out)
        elif kind == "response.refusal.delta":
            self._delta("refusal", obj, out)
        elif kind in ("response.created", "response.in_progress", "response.queued"):
            self._response(obj.get("response"))
            self.start()
        elif kind == "response.output_item.added":
            self._item(obj, out, done=False)
        elif kind == "response.output_item.done":
            self._item(obj, out, done=True)
        elif kind == "response.function_call_arguments.done":
            self._arguments_done(obj, out)
        elif kind == "response.output_text.done":
            self._part_done("text", obj, "text", out)
        elif kind == "response.refusal.done":
            self._part_done("refusal", obj, "refusal", out)
        elif kind == "response.reasoning_text.done":
            self._part_done("reasoning", obj, "text", out)
        elif kind == "response.reasoning_summary_text.done":
            self._part_done("reasoning", obj, "text", out, "summary_index", "summary")
        elif kind in _TERMINAL:
            self._terminal(kind, obj, out)
        elif kind == "error":
            self._errored = True
            out.append(error_event(obj, obj))
        elif kind in ("keepalive", "ping"):
            self.heartbeats += 1
        elif not kind.startswith("response."):
            return self.skip(f"unknown Responses event type {kind!r}", obj)
        return out

    def _response(self, response: object) -> Mapping[str, Any] | None:
        if not isinstance(response, Mapping):
            return None
        rid = response.get("id")
        if rid and isinstance(rid, str):
            if self.id is None:
                self.id = rid
            if self.response_id is None:
                self.response_id = rid
        if self.model is None:
            model = response.get("model")
            if model and isinstance(model, str):
                self.model = model
        return response

    # ------------------------------------------------------------------ the end

    def _terminal(
        self, kind: str, obj: Mapping[str, Any], out: list[Event], *, snapshot: bool = True
    ) -> None:
        response = self._response(obj.get("response"))
        self.start()
        if snapshot and response is not None and not (
            self.text or self.reasoning or self.refusal or self.calls
        ):
            # Nothing was streamed (a proxy that emulates streaming with the final response
            # alone): its output is the content, read as a whole body. Never once anything
            # was delivered: the two could not be told apart without showing text twice.
            output = response.get("output")
            for index, item in enumerate(output if isinstance(output, list) else []):
                if isinstance(item, Mapping):
                    self._whole_item(index, item, out)
        status, stop = _outcome(kind, response, bool(self.calls))
        if response is not None:
            checked = self.usage_model_of(response.get("usage"), obj, out)
            if checked is not None and checked[0]:
                kept, model = checked
                out.append(UsageUpdate(
                    normalized_usage(kept, vocabulary="responses", checked=model)))
            error = response.get("error")
            if error and not self._errored:
                self._errored = True
                out.append(error_event(error, obj))
        self.flush(out)
        out.append(Finish(self.key, 0, status, stop))
        self.done = True
        self.done_reason = kind

    # ------------------------------------------------------------------ whole bodies

    def feed_completion(self, obj: Mapping[str, Any]) -> list[Event]:
        """A non-streaming ``response`` object: its ``output`` items read as if streamed,
        then its status as the terminal event. Marks the format done."""
        if not self.reads_body(obj):
            return self.no_reply(obj)
        out: list[Event] = []
        if obj.get("type") == "error" or ("error" in obj and "output" not in obj):
            self.start()
            out.append(error_event(obj, obj))
        else:
            self._response(obj)
            self.start()
            output = obj.get("output")
            for index, item in enumerate(output if isinstance(output, list) else []):
                if not isinstance(item, Mapping):
                    continue
                self._whole_item(index, item, out)
            kind = obj.get("status")
            status = kind if isinstance(kind, str) and kind else "completed"
            name = f"response.{status}"
            self._terminal(name if name in _TERMINAL else "response.completed",
                           {"response": obj}, out, snapshot=False)
        self.done = True
        self.done_reason = "completion"
        return out

    def _whole_item(self, index: int, item: Mapping[str, Any], out: list[Event]) -> None:
        for channel, text in item_texts(item):
            self.add_to(channel, text, out)
        kind = item.get("type")
        if kind == "reasoning" and self.keep(approx_size(item)):
            out.append(ReasoningBlock(self.key, 0, index, dict(item)))
        elif kind == "function_call":
            self._item({"output_index": index, "item": item}, out, done=True)


def _outcome(kind: str, response: Mapping[str, Any] | None,
             tool_calls: bool) -> tuple[str, StopReason | None]:
    """A terminal event's raw finish reason (the response's ``status``, else the event's
    own) and the unified one (see the module docstring)."""
    status = response.get("status") if response is not None else None
    if not isinstance(status, str) or not status:
        status = kind.removeprefix("response.")
    if status != "incomplete":
        return status, unified_stop(status, tool_calls=tool_calls)
    details = response.get("incomplete_details") if response is not None else None
    reason = details.get("reason") if isinstance(details, Mapping) else None
    return status, _INCOMPLETE.get(reason, "other") if isinstance(reason, str) else "other"
