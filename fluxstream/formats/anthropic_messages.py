"""The Anthropic Messages stream format (``POST /messages`` with ``stream: true``).

Served by Anthropic and by gateways (LiteLLM, OpenRouter ...). Named events carrying their own
``type``: ``message_start``, then per content block ``content_block_start`` /
``content_block_delta``\\* / ``content_block_stop``, then ``message_delta`` (stop reason,
cumulative usage) and ``message_stop``; ``ping`` anywhere; ``error`` mid-stream (after HTTP
200, e.g. ``overloaded_error``). One message, so everything lands in choice 0.

Mapping (the corpus conventions, ``tests/fixtures/chat/README.md``):

* ``text_delta`` -> text; ``thinking_delta`` -> reasoning. ``signature_delta`` and
  ``redacted_thinking`` blocks are never shown: each thinking block (its full text and
  signature) and each redacted block is kept as a :class:`~fluxstream._events.ReasoningBlock`
  in Anthropic's own shape, ready to send back in the next request.
* ``tool_use`` blocks -> tool calls, index = the content block index; arguments are the
  ``input_json_delta.partial_json`` fragments, or the block-start ``input`` (normally ``{}``)
  when no non-empty fragment arrived. ``server_tool_use`` (a tool the server runs) is not a
  client tool call and is ignored, as are its ``*_tool_result`` blocks.
* ``message_delta.delta.stop_reason`` -> the finish reason (unified: ``end_turn`` and
  ``stop_sequence`` -> stop, ``max_tokens`` -> length, ``tool_use`` -> tool_calls, ``refusal``
  -> refusal); ``usage`` = ``message_start.message.usage`` shallow-updated by every
  ``message_delta.usage`` (which is cumulative and may revise ``input_tokens``).
* blocks already in ``message_start``'s ``message.content`` (a proxy emulating a stream;
  Anthropic sends ``[]``) are started as if by ``content_block_start``.
* ``message_stop`` is terminal (outcome ``done``); a stop reason without it ends
  ``finished``; ``ping`` counts as a heartbeat; ``event: error`` gives ``reply.error``.

Bad input never raises (except invalid JSON in strict mode): unknown event, block and delta
types, a delta for a block that never started (or of the wrong kind), a second ``content_block
_start`` for an index, and a second ``message_start`` are skipped and counted; events after
``message_stop`` are ignored.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from .._events import Event, Finish, ReasoningBlock, ToolCallDelta, UsageUpdate
from .._limits import DEFAULT_STREAM_LIMITS, StreamLimits
from .._reply import unified_stop
from . import _choice_state
from ._base import approx_size, compact, error_event, is_error_object
from ._choice_state import (
    _FOLD,  # thinking fragments are folded like arguments (see ``fold``)
    ToolCallState,
    fold,
)
from ._contract import Claim
from ._event_makers import text_delta, tool_delta
from ._json_event import JsonEventFormat
from ._usage_fields import final_usage, normalized_usage

__all__ = ["AnthropicMessagesFormat"]

class _TextDelta(msgspec.Struct, tag_field="type", tag="text_delta"):
    text: str


class _JsonDelta(msgspec.Struct, tag_field="type", tag="input_json_delta"):
    partial_json: str


class _BlockDelta(msgspec.Struct, tag_field="type", tag="content_block_delta"):
    """The fields of a text or argument fragment :meth:`AnthropicMessagesFormat.quick`
    reads; any other delta type, or a value of another type, makes the decode fail (the
    general path reads it)."""

    index: int
    delta: _TextDelta | _JsonDelta


_QUICK = msgspec.json.Decoder(_BlockDelta)

#: The event types of this API: what tells its streams from the others'.
EVENTS = frozenset({
    "message_start", "content_block_start", "content_block_delta", "content_block_stop",
    "message_delta", "message_stop",
})
#: Block types that carry nothing for the reply (server-side tools and their results).
_IGNORED_BLOCKS = frozenset({"server_tool_use", "mcp_tool_use", "mcp_tool_result",
                             "container_upload"})
#: Delta types that carry nothing for the reply.
_IGNORED_DELTAS = frozenset({"citations_delta"})
#: Events anthropic-sdk-python's ``MessageStream`` derives from the raw ones (``text`` repeats
#: a ``text_delta`` with a snapshot ...): fed to :meth:`feed_chunk` they are ignored, not
#: counted, so that a helper's whole event stream can be passed through as it is.
_SDK_DERIVED = frozenset({"text", "thinking", "signature", "input_json", "citation"})
#: Content blocks remembered per message. Real messages have a few dozen; without a cap a
#: stream of empty block starts would grow memory with the bytes while the reply stays empty.
MAX_BLOCKS = 4096
#: Usage fields kept. ``message_delta.usage`` is merged into the usage so far and normalized
#: again on every event; real usage has under ten fields, and without a bound a stream adding
#: one per event made each event cost all the fields so far (quadratic).
MAX_USAGE_FIELDS = 64
_BLOCK_KINDS = frozenset({"text", "thinking", "tool", "ignored", "closed"})
#: A block index as ``resume_state`` writes it (``str(int)`` of a count): ``str.isdigit``
#: accepts "²", which ``int()`` refuses, and ``int()`` refuses more than 4300 digits.
_INDEX = re.compile(r"[0-9]{1,16}")
#: Block indices are counts below this (as resume tokens carry them).
_MAX_INDEX = 2**53


class _Block:
    """An open content block: its kind and, for thinking blocks, what must be kept."""

    __slots__ = ("fold_at", "kind", "parts", "signature", "signature_fold_at")

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "text", "thinking", "tool", "ignored", "closed"
        self.parts: list[str] = []
        self.fold_at = _FOLD  # ``parts`` is folded when it grows past this (see ``fold``)
        #: Signature fragments, folded like ``parts`` (``str +=`` on an attribute copies the
        #: whole string every time: quadratic).
        self.signature: list[str] = []
        self.signature_fold_at = _FOLD


class AnthropicMessagesFormat(JsonEventFormat):
    """Sans-IO: Anthropic Messages stream events in, normalized events out (see the module
    docstring).

    :param key: the content key stamped on every keyed event.
    :param strict: raise :class:`~fluxstream.errors.FrameDecodeError` on a frame that is not a
        JSON object, instead of skipping and counting it.
    :param limits: :class:`~fluxstream._limits.StreamLimits`: a ``tool_use`` block past
        ``max_tool_calls`` raises :class:`~fluxstream.errors.LimitExceededError` before the
        format keeps it.
    """

    __slots__ = ("_blocks", "_message_started", "_open", "_stop", "_usage")

    def __init__(self, key: str, *, strict: bool = False,
                 limits: StreamLimits = DEFAULT_STREAM_LIMITS) -> None:
        super().__init__(key, strict=strict, limits=limits)
        self._blocks: dict[int, _Block] = {}
        #: A block may be open (one started since every block was last closed): without it,
        #: every new stop reason walked all the message's blocks (up to MAX_BLOCKS).
        self._open = False
        self._message_started = False
        self._usage: dict[str, Any] | None = None
        self._stop: str | None = None

    @classmethod
    def claims(cls, event: str, payload: Mapping[str, Any] | None) -> Claim:
        """An event whose ``type`` (or, untyped, ``event:`` line) is one of :data:`EVENTS`
        (``ping`` and ``error`` are not: any proxy sends them)."""
        kind = payload.get("type") if payload is not None else None
        if kind.__class__ is str and kind in EVENTS:
            return Claim.SURE
        return Claim.LIKELY if event in EVENTS else Claim.NO

    reply_shape = "a message, with 'type': 'message' and its 'content'"

    @classmethod
    def claims_body(cls, body: Mapping[str, Any]) -> Claim:
        """A ``message`` (or Anthropic's ``{"type": "error"}``) body, or one with a
        ``stop_reason``."""
        typed = body.get("type") in ("message", "error")
        return Claim.LIKELY if typed or "stop_reason" in body else Claim.NO

    @classmethod
    def claims_state(cls, state: Mapping[str, Any], sequence: int | None) -> Claim:
        """Its state maps the content ``blocks`` by index."""
        return Claim.SURE if isinstance(state.get("blocks"), Mapping) else Claim.NO

    def reset(self) -> None:
        super().reset()
        self._blocks = {}
        self._message_started = False
        self._usage = None
        self._stop = None

    # ------------------------------------------------------------------ resume tokens

    def resume_state(self) -> dict[str, Any]:
        """What a resume token must carry beyond the reply: the content blocks by index (a
        ``Last-Event-ID`` resume goes on inside an open block, whose ``content_block_start``
        is not sent again) with, for a tool block that has no argument fragment yet, its
        start ``input`` (a tool without parameters gets no fragment at all: its arguments
        are that ``{}``), whether the message started, the usage and stop reason so far
        (``message_start`` is not sent again either) and the surrogate halves held back."""
        blocks: dict[str, Any] = {}
        for index, block in self._blocks.items():
            entry: dict[str, Any] = {"kind": block.kind}
            if block.kind == "thinking":
                entry["thinking"] = _choice_state._join(block.parts)
                entry["signature"] = _choice_state._join(block.signature)
            elif block.kind == "tool":
                call = self.calls.get(index)
                start = call.start_input if call is not None and call.length == 0 else None
                if start is not None:
                    with contextlib.suppress(TypeError, ValueError):
                        entry["input"] = start if isinstance(start, str) else compact(start)
            blocks[str(index)] = entry
        return {"blocks": blocks, "message_started": self._message_started,
                "usage": self._usage, "stop": self._stop, "held": self.held_state()}

    def restore_state(self, state: Any) -> None:
        """Take over :meth:`resume_state` from a token; entries that are not what it writes
        are left out (a token is data from outside: it cannot make the format crash)."""
        if not isinstance(state, Mapping):
            return
        blocks = state.get("blocks")
        for key, entry in (blocks.items() if isinstance(blocks, Mapping) else ()):
            if len(self._blocks) >= MAX_BLOCKS:
                break
            kind = entry.get("kind") if isinstance(entry, Mapping) else None
            if not (isinstance(key, str) and _INDEX.fullmatch(key) and kind in _BLOCK_KINDS):
                continue
            index = int(key)
            block = self._blocks[index] = _Block(kind)
            self._open = True
            thinking, signature = entry.get("thinking"), entry.get("signature")
            if kind == "thinking" and isinstance(thinking, str) and isinstance(signature, str):
                block.parts = [thinking] if thinking else []
                block.signature = [signature] if signature else []
            elif kind == "tool":
                # The reply knows the call (restore() ran first); a token that names a tool
                # block the reply lacks still gets its arguments, never a crash.
                call = self.calls.get(index)
                if call is None:
                    call = self.calls[index] = ToolCallState(kept=False)
                start = entry.get("input")
                if isinstance(start, str) and call.length == 0:
                    call.start_input = start
        self._message_started = state.get("message_started") is True
        usage = state.get("usage")
        self._usage = _bounded(usage) if isinstance(usage, Mapping) else None
        stop = state.get("stop")
        self._stop = stop if isinstance(stop, str) else None
        self.restore_held(state.get("held"))

    # ------------------------------------------------------------------ events

    delta_kinds = frozenset({"content_block_delta"})

    quick_decoder = _QUICK
    quick_events = frozenset({"message", "content_block_delta"})

    def quick(self, obj: _BlockDelta, out: list[Event]) -> bool:
        """A text fragment of a text block or an argument fragment of a tool block, as
        :meth:`dispatch` maps them; any other one is declined (the general path decides)."""
        index = obj.index
        block = self._blocks.get(index)
        if block is None:
            return False
        delta = obj.delta
        if isinstance(delta, _TextDelta):
            if block.kind != "text":
                return False
            text = delta.text
            if text:
                offset = self.text
                self.text = offset + len(text)
                out.append(text_delta(self.key, 0, offset, text))
            return True
        if block.kind != "tool":
            return False
        text = delta.partial_json
        if text:
            call = self.calls[index]
            offset = call.length
            call.length = offset + len(text)
            out.append(tool_delta(self.key, 0, index, None, None, text, offset))
        return True

    def dispatch(self, kind: str, obj: Mapping[str, Any]) -> list[Event]:
        if kind == "content_block_delta":
            # Hot path, inlined (nearly every event is one of these two): a text or argument
            # fragment for a block of the right kind. Anything else (and every fragment once
            # lone surrogate halves were seen: ``scan``) takes ``_delta``.
            delta = obj.get("delta")
            index = obj.get("index")
            if delta.__class__ is dict and index.__class__ is int and not self.scan:
                block = self._blocks.get(index)
                if block is not None:
                    dkind = delta.get("type")
                    if dkind == "text_delta" and block.kind == "text":
                        text = delta.get("text")
                        if text.__class__ is str:
                            if not text:
                                return []
                            offset = self.text
                            self.text = offset + len(text)
                            return [text_delta(self.key, 0, offset, text)]
                    elif dkind == "input_json_delta" and block.kind == "tool":
                        text = delta.get("partial_json")
                        if text.__class__ is str:
                            if not text:
                                return []
                            call = self.calls[index]
                            offset = call.length
                            call.length = offset + len(text)
                            return [tool_delta(self.key, 0, index, None, None, text, offset)]
            return self._delta(obj)
        if kind == "ping":
            self.heartbeats += 1
            return []
        if kind == "content_block_start":
            return self._block_start(obj)
        if kind == "content_block_stop":
            index = obj.get("index")
            block = self._blocks.get(index) if type(index) is int else None
            if block is None or type(index) is not int:
                return self.skip("content_block_stop for a block that never started", obj)
            out: list[Event] = []
            self._close(index, block, out)
            return out
        if kind == "message_start":
            return self._message_start(obj)
        if kind == "message_delta":
            return self._message_delta(obj)
        if kind == "message_stop":
            out = []
            self._close_all(out)
            self.flush(out)
            self.start()
            self.done = True
            self.done_reason = "message_stop"
            return out
        if kind == "error":
            self.start()
            return [error_event(obj, obj)]
        if kind in _SDK_DERIVED:
            return []
        return self.skip(f"unknown Anthropic event type {kind!r}", obj)

    def _message_start(self, obj: Mapping[str, Any]) -> list[Event]:
        if self._message_started and not self.reconnected:
            return self.skip("second message_start", obj)
        message = obj.get("message")
        if not isinstance(message, Mapping):
            return self.skip("message_start without a message object", obj)
        if self._message_started:
            # A continuation on a new connection (the partial text was sent as an assistant
            # prefill): a new message whose blocks count from 0 again; offsets go on.
            self._blocks = {}
            self._stop = None
            self._usage = None
        self.reconnected = False
        self._message_started = True
        self.start()
        mid = message.get("id")
        if self.id is None and mid and isinstance(mid, str):
            self.id = mid
        model = message.get("model")
        if self.model is None and model and isinstance(model, str):
            self.model = model
        out: list[Event] = []
        checked = self.usage_model_of(message.get("usage"), obj, out)
        if checked is not None and checked[0]:
            raw, model = checked
            self._usage = _bounded(raw)
            # Its Usage is the one checked unless fields were cut off.
            whole = model if len(self._usage) == len(raw) else None
            # A snapshot: its output_tokens is a placeholder (1) until message_delta's count.
            out.append(UsageUpdate(
                normalized_usage(self._usage, vocabulary="anthropic", checked=whole),
                final=False))
        content = message.get("content")
        if isinstance(content, list) and content:
            # Blocks the message already holds (Anthropic sends ``[]``; a proxy emulating a
            # stream sends them all here): started as if by ``content_block_start``, as
            # anthropic-sdk-python's MessageStream starts its snapshot from this message.
            for index, block in enumerate(content[:MAX_BLOCKS]):
                if isinstance(block, Mapping):
                    out += self._block_start({"index": index, "content_block": block})
        return out

    def _message_delta(self, obj: Mapping[str, Any]) -> list[Event]:
        out: list[Event] = []
        self.start()
        raw = self.usage_of(obj.get("usage"), obj, out)
        if raw:
            merged = self._usage = _bounded({**(self._usage or {}), **raw})
            # Cumulative, sent with the stop reason: final once it counts the output.
            out.append(UsageUpdate(normalized_usage(merged, vocabulary="anthropic"),
                                   final="output_tokens" in raw))
        delta = obj.get("delta")
        reason = delta.get("stop_reason") if isinstance(delta, Mapping) else None
        if reason is not None and not isinstance(reason, str):
            reason = str(reason)
        if reason and reason != self._stop:
            # The content is over: tool blocks that never got a fragment get their input now.
            self._close_all(out)
            self.flush(out)
            self._stop = reason
            out.append(Finish(self.key, 0, reason, unified_stop(reason)))
        return out

    # ------------------------------------------------------------------ blocks

    def _block_start(self, obj: Mapping[str, Any]) -> list[Event]:
        index = obj.get("index")
        block = obj.get("content_block")
        if type(index) is not int or not isinstance(block, Mapping):
            return self.skip("content_block_start without an integer index and a block", obj)
        if not 0 <= index < _MAX_INDEX:
            # Not a count: it names nothing (and a resume token could not carry it).
            return self.skip(f"content_block_start for block index {index}", obj)
        if index in self._blocks:
            return self.skip(f"content_block_start for block {index} that already started", obj)
        if len(self._blocks) >= MAX_BLOCKS:
            return self.skip(f"more than {MAX_BLOCKS} content blocks", obj)
        kind = block.get("type")
        out: list[Event] = []
        self.start()
        self.reconnected = False
        self._open = True
        if kind == "text":
            self._blocks[index] = _Block("text")
            text = block.get("text")
            if text and isinstance(text, str):
                self.add_to("text", text, out)
        elif kind == "thinking":
            state = self._blocks[index] = _Block("thinking")
            text = block.get("thinking")
            if text and isinstance(text, str):
                state.parts.append(text)
                self.add_to("reasoning", text, out)
            signature = block.get("signature")
            if signature and isinstance(signature, str) and self.keep(len(signature)):
                state.signature.append(signature)
        elif kind == "redacted_thinking":
            self._blocks[index] = _Block("closed")
            if not self.keep(approx_size(block)):
                return self.skip("kept reasoning data over the limit", obj)
            out.append(ReasoningBlock(self.key, 0, index, dict(block)))
        elif kind == "tool_use":
            self._blocks[index] = _Block("tool")
            call = self.calls.get(index)
            if call is None:
                call = self.open_call(index, self.limits, kept=False)
            new_id, new_name = self.name_call(call, block.get("id"), block.get("name"))
            call.fragments = None  # nothing compares them here (a resumed call's either)
            call.start_input = block.get("input")
            out.append(ToolCallDelta(self.key, 0, index, new_id, new_name, "", call.length))
        elif kind in _IGNORED_BLOCKS or (isinstance(kind, str) and kind.endswith("_result")):
            self._blocks[index] = _Block("ignored")
        else:
            self._blocks[index] = _Block("ignored")
            return self.skip(f"unknown content block type {kind!r}", obj)
        return out

    def _delta(self, obj: Mapping[str, Any]) -> list[Event]:
        index = obj.get("index")
        block = self._blocks.get(index) if type(index) is int else None
        if block is None or type(index) is not int:
            return self.skip("content_block_delta for a block that never started", obj)
        delta = obj.get("delta")
        if delta.__class__ is not dict:
            return self.skip("content_block_delta without a delta object", obj)
        kind = delta.get("type")
        bkind = block.kind
        out: list[Event] = []
        if kind == "text_delta" and bkind == "text":
            text = delta.get("text")
            if text and text.__class__ is str:
                self.add_to("text", text, out)
            return out
        if kind == "input_json_delta" and bkind == "tool":
            text = delta.get("partial_json")
            if text and text.__class__ is str:
                self.add_tool_text(index, text, out)
            return out
        if kind == "thinking_delta" and bkind == "thinking":
            text = delta.get("thinking")
            if text and text.__class__ is str:
                if self.scan:
                    text = self.join("reasoning", text)
                    if not text:
                        return out
                parts = block.parts
                parts.append(text)
                if len(parts) > block.fold_at:
                    block.fold_at = fold(parts, block.fold_at - _FOLD)
                if not self.started:
                    self.start()
                self.deliver("reasoning", self.key, 0, text, out)
            return out
        if kind == "signature_delta" and bkind == "thinking":
            signature = delta.get("signature")
            if signature and isinstance(signature, str):
                if not self.keep(len(signature)):
                    return self.skip("kept reasoning data over the limit", obj)
                pieces = block.signature
                pieces.append(signature)
                if len(pieces) > block.signature_fold_at:
                    block.signature_fold_at = fold(pieces, block.signature_fold_at - _FOLD)
            return out
        if bkind == "ignored" or kind in _IGNORED_DELTAS:
            return out
        return self.skip(f"{kind!r} delta for a {bkind} block", obj)

    def _close(self, index: int, block: _Block, out: list[Event]) -> None:
        kind = block.kind
        if kind == "thinking":
            kept = {"type": "thinking", "thinking": _choice_state._join(block.parts),
                    "signature": _choice_state._join(block.signature)}
            out.append(ReasoningBlock(self.key, 0, index, kept))
        elif kind == "tool":
            call = self.calls[index]
            if call.length == 0:
                start = call.start_input
                if start is not None:
                    text = start if isinstance(start, str) else compact(start)
                    if text:
                        out.append(ToolCallDelta(self.key, 0, index, None, None, text, 0))
                        call.length = len(text)
        block.kind = "closed"

    def _close_all(self, out: list[Event]) -> None:
        if not self._open:
            return
        self._open = False
        for index, block in self._blocks.items():
            if block.kind != "closed" and block.kind != "ignored":
                self._close(index, block, out)

    # ------------------------------------------------------------------ whole bodies

    def feed_completion(self, obj: Mapping[str, Any]) -> list[Event]:
        """A non-streaming ``message`` body (or an ``{"type": "error"}`` body), read as if
        streamed. Marks the format done."""
        if not self.reads_body(obj):
            return self.no_reply(obj)
        out: list[Event] = []
        if obj.get("type") != "message" and is_error_object(obj):
            self.start()
            out.append(error_event(obj, obj))
        else:
            message = {k: v for k, v in obj.items() if k not in ("content", "stop_reason")}
            out += self._message_start({"type": "message_start", "message": message})
            content = obj.get("content")
            for index, block in enumerate(content if isinstance(content, list) else []):
                if not isinstance(block, Mapping):
                    continue
                out += self._block_start({"index": index, "content_block": block})
            reason = obj.get("stop_reason")
            out += self._message_delta({"delta": {"stop_reason": reason}})
            self._close_all(out)
        self.done = True
        self.done_reason = "completion"
        return final_usage(out)


def _bounded(usage: Mapping[str, Any]) -> dict[str, Any]:
    """``usage`` as a dict of at most :data:`MAX_USAGE_FIELDS` fields: the first ones, so the
    fields a message started with (``input_tokens``, ``output_tokens`` ...) keep updating."""
    if len(usage) <= MAX_USAGE_FIELDS:
        return dict(usage)
    return dict(itertools.islice(usage.items(), MAX_USAGE_FIELDS))
