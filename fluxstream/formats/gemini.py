"""The Google Gemini stream format (``POST .../models/{model}:streamGenerateContent?alt=sse``).

Served by the Gemini Developer API (``generativelanguage.googleapis.com``), Vertex AI and
gateways that imitate them. Every SSE event is one whole ``GenerateContentResponse``: no
``type``, no ``[DONE]``, no end event. What it holds, and what becomes of it:

* ``candidates[]``: one choice each, keyed by ``candidates[].index`` (absent = 0: proto3 JSON
  leaves the default out), never by the position in the array. ``content.parts[]`` in order:
  ``text`` -> text, ``text`` with ``thought: true`` -> reasoning, ``functionCall`` -> a tool
  call (see below), ``thoughtSignature`` (on any part) -> kept, not shown, as a
  :class:`~fluxstream._events.ReasoningBlock` (the next request must send it back);
  ``executableCode``, ``codeExecutionResult``, ``inlineData``, ``fileData`` and parts of a kind
  not known here carry nothing for the reply: skipped and counted.
* ``finishReason`` -> the choice's finish reason, raw, with :attr:`Finish.stop` from
  :data:`STOPS` (``STOP`` after a function call is ``tool_calls``; an unknown reason is kept
  raw, ``other``). Older Vertex streams put ``STOP`` on *every* event: text after it still
  counts, and it ends nothing by itself.
* ``promptFeedback.blockReason``: the prompt was refused before any candidate; an error
  (``code`` = the block reason), so a blocked request never reads as an empty success.
* ``usageMetadata``: a snapshot that grows across events (the last one wins), kept with its
  own field names; ``prompt_tokens`` ... are filled in as for the other formats
  (:func:`gemini_usage`). It is delivered when it first comes, when a candidate finishes and
  when the body ends, not on every event. ``modelVersion`` -> ``model``, ``responseId`` -> ``id``.
  ``safetyRatings``, ``citationMetadata``, ``groundingMetadata`` carry nothing for the reply.
* errors: ``{"error": {"code", "message", "status"}}`` as an event, and the same object sent
  *outside* any ``data:`` line after the stream began (a pretty-printed JSON object over
  several lines, as Vertex does): the parser hands such lines to :meth:`feed_lines`, which
  gathers them until the braces balance, as google-genai does.

**Outcome.** There is no end marker: the parser calls :meth:`GeminiFormat.body_ended` when the
bytes ended cleanly, and the stream is ``done`` when every candidate had a ``finishReason``
(or the prompt was blocked) and nothing was cut; otherwise it ends ``truncated``.

**Function calls.** A ``functionCall {name, args, id}`` is one whole call: its arguments are
``args`` as compact JSON (``{}`` when absent), its id ``id`` (Gemini 3 sends one, 2.5 none).
Vertex streams arguments (``streamFunctionCallArguments``): a ``functionCall`` with
``willContinue: true`` opens a call; later ``functionCall`` parts without a name carry
``partialArgs`` pieces, each setting the value at its ``jsonPath`` (``stringValue`` extends
the string there while the previous piece for that path said ``willContinue``;
``numberValue`` / ``boolValue`` / ``nullValue`` set); a part without ``willContinue`` closes
the call. The pieces are streamed as argument fragments of JSON text that only grows
(:class:`PartialArgs`), so partial arguments show while they arrive.

Bad input never raises (except invalid JSON in strict mode, and the stream limits): a payload
that is not an object, a candidate index that is not a count, parts and pieces that do not
fit are skipped and counted. Lone UTF-16 surrogate halves (a proxy cutting by UTF-16 unit)
are joined per candidate and channel as in the other formats.
"""

from __future__ import annotations

import base64
import enum
import itertools
from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec
import pydantic_core
from msgspec import UNSET

from .._events import ErrorEvent, Event, ReasoningBlock, ToolCallDelta, UsageUpdate
from .._limits import DEFAULT_STREAM_LIMITS, StreamLimits
from .._reply import StopReason
from .._wire import Usage
from ..errors import LimitExceededError
from ..sse import ServerSentEvent
from ._base import (
    BIG_FRAME,
    MAX_KEPT_CHARS,
    FormatBase,
    compact,
    crowded,
)
from ._contract import Claim
from ._event_makers import finish_event, reasoning_delta, text_delta, tool_delta
from ._gemini_args import NO_VALUE, PartialArgs, piece_value, pieces_state, restored_pieces
from ._gemini_quick import NO_USAGE, QUICK_DECODER, QuickPart, QuickResponse, QuickUsage
from ._surrogates import REPLACEMENT, clean_tree, fallback_loads, fix_surrogates, is_high_half
from ._usage_fields import USAGE_DROPPED, checked_usage_model, fill_usage, final_usage

__all__ = ["STOPS", "GeminiFormat", "gemini_usage", "is_gemini"]

_loads = pydantic_core.from_json
# The decoder of the general path in feed_many (as in the Chat Completions format, and for the
# same reasons): msgspec's, faster than from_json and the same value whenever it succeeds
# (tests/formats/test_fast_paths.py::test_the_fast_decoder_gives_from_json_values_or_refuses);
# anything it refuses, and any frame that might nest deeper than from_json allows
# (quick_candidate), goes to feed.
_fast_loads = msgspec.json.Decoder().decode
_MAX_DEPTH = 200
_SHALLOW = 2 * _MAX_DEPTH + 1
#: Candidate indices are counts below this (as resume tokens carry them).
_MAX_INDEX = 2**53
#: Characters of raw JSON gathered outside ``data:`` lines before the object is given up
#: (real error bodies are a few hundred bytes; the SSE decoder bounds each line already).
MAX_RAW_CHARS = 1024 * 1024
#: Usage fields kept (real ``usageMetadata`` has about ten).
MAX_USAGE_FIELDS = 64

#: ``finishReason`` -> the unified :data:`~fluxstream._reply.StopReason`. Unknown reasons are
#: kept raw and read ``other``.
STOPS: dict[str, StopReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter",
    "MALFORMED_FUNCTION_CALL": "error",
    "UNEXPECTED_TOOL_CALL": "error",
    "TOO_MANY_TOOL_CALLS": "error",
    "MALFORMED_RESPONSE": "error",
    "MISSING_THOUGHT_SIGNATURE": "error",
    "OTHER": "other",
    "FINISH_REASON_UNSPECIFIED": "other",
    "LANGUAGE": "other",
    "IMAGE_OTHER": "other",
    "NO_IMAGE": "other",
}
#: Part kinds that carry nothing for the reply (Google ran the code itself; media are not text).
_SKIPPED_PARTS = ("executableCode", "codeExecutionResult", "inlineData", "fileData",
                  "functionResponse", "toolCall", "toolResponse")
#: Keys a part may carry beside its content (never a reason to skip it).
_PART_EXTRAS = frozenset({"thought", "thoughtSignature", "partMetadata", "videoMetadata",
                          "mediaResolution"})
#: Keys that mark a payload as Gemini's (see :func:`is_gemini`).
_MARKS = ("candidates", "promptFeedback", "usageMetadata", "modelVersion")


def is_gemini(obj: Mapping[str, Any]) -> bool:
    """A payload is a ``GenerateContentResponse`` (the detection rule of ``auto``): it has
    ``candidates``, ``promptFeedback``, ``usageMetadata`` or ``modelVersion``, and no
    ``type`` or ``choices`` of the other formats."""
    return "type" not in obj and "choices" not in obj and any(k in obj for k in _MARKS)


def _count(value: object) -> int | None:
    """A count: a plain non-negative ``int`` (not ``bool``, not a string), else ``None``."""
    if type(value) is int and 0 <= value < _MAX_INDEX:
        return value
    return None


def gemini_usage(raw: Mapping[str, Any]) -> Usage:
    """``usageMetadata`` as a :class:`~fluxstream._wire.Usage`: Gemini's own fields kept, and
    the Chat Completions names filled in. ``completion_tokens`` counts the thoughts too
    (``candidatesTokenCount + thoughtsTokenCount``), as OpenAI counts reasoning tokens in
    them; ``total_tokens`` is ``totalTokenCount`` (it also counts tool-use prompt tokens)."""
    return _filled_usage(raw, checked_usage_model(raw)[2])


def _filled_usage(raw: Mapping[str, Any], result: Usage) -> Usage:
    """:func:`gemini_usage` of ``raw``, whose checked fields ``result`` holds already (a
    fresh ``Usage``: it is filled in place)."""
    prompt = _count(raw.get("promptTokenCount"))
    output = _count(raw.get("candidatesTokenCount"))
    thoughts = _count(raw.get("thoughtsTokenCount"))
    cached = _count(raw.get("cachedContentTokenCount"))
    total = _count(raw.get("totalTokenCount"))
    completion = None
    if output is not None or thoughts is not None:
        completion = (output or 0) + (thoughts or 0)
    return fill_usage(result, prompt=prompt, completion=completion, total=total,
                      cached=cached, reasoning=thoughts)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _wire_shape(value: Any, *, data: bool = False) -> Any:
    """A payload another SDK decoded (google-genai's ``model_dump()``: snake_case keys, enum
    members, bytes) in the wire's own shape: keys camelCase, enums their values, bytes in
    base64 as the wire sends them. ``data``: inside
    function arguments, whose keys are the caller's own and stay as they are."""
    if isinstance(value, Mapping):
        return {
            (key if data or not isinstance(key, str) else _camel(key)):
                _wire_shape(item, data=data or key == "args")
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_wire_shape(item, data=data) for item in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):  # google-genai decodes ``thoughtSignature`` from base64
        return base64.b64encode(value).decode("ascii")
    return value


# --------------------------------------------------------------------------- per-candidate state


class _Call:
    """One tool call: identity, delivered length and, while Vertex streams its arguments,
    the pieces' value and text."""

    __slots__ = ("id", "length", "name", "pieces")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.length = 0
        self.pieces: PartialArgs | None = None


class _Candidate:
    """Per-candidate offsets (code points delivered per channel), finish reason, calls."""

    __slots__ = ("calls", "finish", "held", "open", "reasoning", "signatures", "text")

    def __init__(self) -> None:
        self.text = 0
        self.reasoning = 0
        self.finish: str | None = None
        self.calls: dict[int, _Call] = {}
        #: The call whose arguments are being streamed (``willContinue``), if any.
        self.open: int | None = None
        self.signatures = 0
        #: High surrogate halves held back per channel ("text", "reasoning").
        self.held: dict[str, str] | None = None


class _RawObject:
    """Lines outside any ``data:`` line, gathered until the JSON braces balance (outside
    strings), as google-genai reads a raw error body sent after the stream began."""

    __slots__ = ("depth", "escaped", "in_string", "lines", "size")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.size = 0
        self.depth = 0
        self.in_string = False
        self.escaped = False

    def add(self, line: str) -> str | None:
        """Add one line; the object's text once its braces balance."""
        depth, in_string, escaped = self.depth, self.in_string, self.escaped
        for char in line:
            if in_string:
                if escaped:
                    escaped = False
                elif char == "\\":
                    escaped = True
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
        self.depth, self.in_string, self.escaped = depth, in_string, escaped
        self.lines.append(line)
        self.size += len(line)
        return self.take() if depth <= 0 else None

    def take(self) -> str:
        text = "\n".join(self.lines)
        self.__init__()  # type: ignore[misc]
        return text


# --------------------------------------------------------------------------- the format


def _opt_str(value: object) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


class _CandidateReader(FormatBase):
    """What a candidate's parts become: text, reasoning, kept signatures, whole and streamed
    function calls, finish reasons, with the per-candidate offsets and surrogate halves.
    :class:`GeminiFormat` adds the frames, the stream's errors, usage and end."""

    __slots__ = ("_cands", "_holding", "_kept", "_settled")

    def __init__(self, key: str, strict: bool, limits: StreamLimits) -> None:
        super().__init__(key, strict=strict, limits=limits)
        self._cands: dict[int, _Candidate] = {}
        #: Surrogate halves held over all candidates: while any is, every fragment is checked.
        self._holding = 0
        #: Characters of never-shown data kept (thought signatures), see MAX_KEPT_CHARS.
        self._kept = 0
        #: A candidate finished in the event being read (its usage is the final one).
        self._settled = False

    # ------------------------------------------------------------------ candidates

    def _candidate(self, cand: dict[str, Any], scan: bool, out: list[Event]) -> None:
        index = cand.get("index", 0)
        if index.__class__ is not int or not 0 <= index < _MAX_INDEX:
            out += self._skip(cand, f"candidate index {index!r} is not a count")
            return
        st = self._cands.get(index)
        if st is None:
            if len(self._cands) >= self.limits.max_choices:
                raise LimitExceededError("max_choices", self.limits.max_choices,
                                         len(self._cands) + 1)
            st = self._cands[index] = _Candidate()
            self.new_choices.append(index)
        content = cand.get("content")
        if content.__class__ is dict:
            parts = content.get("parts")
            if parts.__class__ is list:
                key = self.key
                for part in parts:
                    if part.__class__ is not dict:
                        out += self._skip(part, "a part that is not an object")
                        continue
                    text = part.get("text")
                    if text.__class__ is str:
                        if not text:
                            pass
                        elif part.get("thought") is True:
                            if scan or st.held:
                                text = self._unpaired(st, "reasoning", text)
                            if text:
                                out.append(reasoning_delta(key, index, st.reasoning, text))
                                st.reasoning += len(text)
                        else:
                            if scan or st.held:
                                text = self._unpaired(st, "text", text)
                            if text:
                                out.append(text_delta(key, index, st.text, text))
                                st.text += len(text)
                    elif len(part) > 1 or "thoughtSignature" not in part:
                        self._other_part(index, st, part, scan, out)
                    signature = part.get("thoughtSignature")
                    if signature:
                        self._signature(index, st, part, signature, out)
            elif parts is not None:
                out += self._skip(cand, "parts is not a list")
        reason = cand.get("finishReason")
        if reason is not None and reason != st.finish:
            reason = _opt_str(reason)
            if reason:
                self._finish(index, st, fix_surrogates(reason) if scan else reason, out)

    def _other_part(self, index: int, st: _Candidate, part: dict[str, Any], scan: bool,
                    out: list[Event]) -> None:
        call = part.get("functionCall")
        if call is not None:
            if call.__class__ is dict:
                self._function_call(index, st, call, scan, out)
            else:
                out += self._skip(part, "functionCall is not an object")
            return
        for kind in _SKIPPED_PARTS:
            if kind in part:
                out += self._skip(part, f"a {kind} part (nothing for the reply)")
                return
        if not all(key in _PART_EXTRAS for key in part):
            out += self._skip(part, "a part of an unknown kind")

    def _signature(self, index: int, st: _Candidate, part: dict[str, Any], signature: object,
                   out: list[Event]) -> None:
        """A ``thoughtSignature``: kept (a :class:`ReasoningBlock`), never shown; the next
        request must send it back with its part for the model to go on reasoning."""
        if not isinstance(signature, str):
            out += self._skip(part, "thoughtSignature is not a string")
            return
        if self._kept + len(signature) > MAX_KEPT_CHARS:
            out += self._skip(part, "kept reasoning data over the limit")
            return
        self._kept += len(signature)
        block: dict[str, Any] = {"type": "thought_signature",
                                 "thoughtSignature": fix_surrogates(signature)}
        call = part.get("functionCall")
        if isinstance(call, Mapping) and st.calls:
            block["call"] = max(st.calls) if st.open is None else st.open
        out.append(ReasoningBlock(self.key, index, st.signatures, block))
        st.signatures += 1

    def _finish(self, index: int, st: _Candidate, reason: str, out: list[Event]) -> None:
        if st.open is not None:
            self._close_call(index, st, out)
        if st.held:
            self._flush(index, st, out)
        st.finish = reason
        self._settled = True
        stop = STOPS.get(reason, "other")
        if stop == "stop" and st.calls:
            stop = "tool_calls"  # Gemini says STOP when it stops to call functions
        out.append(finish_event(self.key, index, reason, stop))

    # ------------------------------------------------------------------ function calls

    def _function_call(self, index: int, st: _Candidate, fc: dict[str, Any], scan: bool,
                       out: list[Event]) -> None:
        name = fc.get("name")
        name = (fix_surrogates(name) if scan else name) if name and isinstance(name, str) else None
        cid = fc.get("id")
        cid = (fix_surrogates(cid) if scan else cid) if cid and isinstance(cid, str) else None
        more = fc.get("willContinue") is True
        pieces = fc.get("partialArgs")
        args = fc.get("args")
        if scan and args is not None:
            args = clean_tree(args)
        if st.open is not None:
            if name is None:  # the next part of the call being streamed
                number = st.open
                self._streamed(index, number, st.calls[number], pieces, args, scan, out)
                if not more:
                    self._close_call(index, st, out)
                return
            self._close_call(index, st, out)  # a new call: the open one is over
        if name is None and cid is None and pieces is None and args is None:
            out += self._skip(fc, "a functionCall part of no call")
            return
        calls = st.calls
        if len(calls) >= self.limits.max_tool_calls:
            raise LimitExceededError("max_tool_calls", self.limits.max_tool_calls,
                                     len(calls) + 1)
        number = max(calls) + 1 if calls else 0
        call = calls[number] = _Call()
        call.id, call.name = cid, name
        if more or pieces is not None:
            call.pieces = PartialArgs()
            st.open = number
            out.append(ToolCallDelta(self.key, index, number, cid, name, "", 0))
            self._streamed(index, number, call, pieces, args, scan, out)
            if not more:
                self._close_call(index, st, out)
            return
        text = "{}" if args is None else compact(args)
        out.append(tool_delta(self.key, index, number, cid, name, text, 0))
        call.length = len(text)

    def _streamed(self, index: int, number: int, call: _Call, pieces: object, args: object,
                  scan: bool, out: list[Event]) -> None:
        """``partialArgs`` pieces (and any whole ``args``) of a call being streamed."""
        writer = call.pieces
        if writer is None:  # pragma: no cover - an open call always has its pieces
            writer = call.pieces = PartialArgs()
        if isinstance(args, Mapping) and args:
            writer.root.update(args)  # whole values beside streamed ones: rendered at close
            writer.ordered = False
        if pieces is None:
            return
        if pieces.__class__ is not list:
            out += self._skip({"partialArgs": pieces}, "partialArgs is not a list")
            return
        for piece in pieces:
            value, extend = piece_value(piece)
            steps = writer.steps(piece.get("jsonPath")) if piece.__class__ is dict else None
            if steps is None or value is NO_VALUE:
                out += self._skip(piece, "a partialArgs piece without a jsonPath and a value")
                continue
            if scan and isinstance(value, str):
                value = fix_surrogates(value)
            text = writer.put(steps, value, extend, piece.get("willContinue") is True)
            if text is None:
                out += self._skip(piece, "a partialArgs piece whose jsonPath does not fit")
            elif text:
                out.append(tool_delta(self.key, index, number, None, None, text, call.length))
                call.length += len(text)

    def _close_call(self, index: int, st: _Candidate, out: list[Event]) -> None:
        number = st.open
        st.open = None
        if number is None:  # pragma: no cover - callers check
            return
        call = st.calls[number]
        writer, call.pieces = call.pieces, None
        if writer is None:
            return
        text = writer.close()
        if text:
            out.append(tool_delta(self.key, index, number, None, None, text, call.length))
            call.length += len(text)
        if not writer.ordered:
            final = writer.final()
            written = "".join(writer.written)
            same = 0
            for a, b in zip(written, final, strict=False):
                if a != b:
                    break
                same += 1
            out.append(ToolCallDelta(self.key, index, number, None, None, final[same:], same,
                                     replace=True))
            call.length = len(final)

    # ------------------------------------------------------------------ the fast path

    def _quick_parts(self, index: int, st: _Candidate, parts: list[QuickPart],
                     out: list[Event]) -> bool:
        """A known candidate's parts as the fast path of ``feed_many`` reads them (text and
        thought text, or the next piece of the string argument being streamed), mapped as
        :meth:`_candidate` maps them; ``False``, nothing done, for any other."""
        if len(parts) == 1 and parts[0].functionCall is not UNSET:
            return self._quick_piece(index, st, parts[0], out)
        for part in parts:
            if (part.text.__class__ is not str or part.functionCall is not UNSET
                    or part.thoughtSignature is not UNSET):
                return False
        key = self.key
        for part in parts:
            text = part.text
            if not text:
                continue
            if part.thought is True:
                out.append(reasoning_delta(key, index, st.reasoning, text))
                st.reasoning += len(text)
            else:
                out.append(text_delta(key, index, st.text, text))
                st.text += len(text)
        return True

    def _quick_piece(self, index: int, st: _Candidate, part: QuickPart,
                     out: list[Event]) -> bool:
        """The next piece of the string argument being streamed, and nothing else."""
        number = st.open
        fc = part.functionCall
        if (number is None or fc is UNSET or part.text is not UNSET or part.thought is not UNSET
                or part.thoughtSignature is not UNSET or fc.willContinue is not True
                or fc.name is not UNSET or fc.id is not UNSET or fc.args is not UNSET):
            return False
        pieces = fc.partialArgs
        if pieces is UNSET or len(pieces) != 1:
            return False
        piece = pieces[0]
        value, path = piece.stringValue, piece.jsonPath
        call = st.calls[number]
        writer = call.pieces
        if (writer is None or piece.willContinue is not True or value is UNSET or path is UNSET
                or piece.numberValue is not UNSET or piece.boolValue is not UNSET
                or piece.nullValue is not UNSET):
            return False
        text = writer.extend(path, value)
        if text is None:
            return False
        if text:
            out.append(tool_delta(self.key, index, number, None, None, text, call.length))
            call.length += len(text)
        return True

    # ------------------------------------------------------------------ surrogate halves

    def _unpaired(self, st: _Candidate, channel: str, text: str) -> str:
        """``text`` ready to deliver: a held high half in front, a trailing one held back,
        pairs joined, any other lone half U+FFFD. May return ``""``."""
        held = st.held
        if held:
            before = held.pop(channel, "")
            if before:
                self._holding -= 1
                text = before + text
        last = text[-1:]
        if is_high_half(last):
            if held is None:
                held = st.held = {}
            held[channel] = last
            self._holding += 1
            text = text[:-1]
        return fix_surrogates(text)

    def _flush(self, index: int, st: _Candidate, out: list[Event]) -> None:
        """Held high halves of a candidate that ends: U+FFFD (no low half will come)."""
        held = st.held or {}
        st.held = None
        for channel in held:
            self._holding -= 1
            if channel == "text":
                out.append(text_delta(self.key, index, st.text, REPLACEMENT))
                st.text += 1
            else:
                out.append(reasoning_delta(self.key, index, st.reasoning, REPLACEMENT))
                st.reasoning += 1

    def _flush_all(self, out: list[Event]) -> None:
        if self._holding:
            for index, st in self._cands.items():
                if st.held:
                    self._flush(index, st, out)

    # ------------------------------------------------------------------ skipped input

    def _skip(self, obj: object, reason: str) -> list[Event]:
        """Count something that cannot be used (never raised: the stream goes on)."""
        return self.skip(reason, obj)

    def _skip_text(self, text: str, reason: str) -> list[Event]:
        return self.skip(reason, text)



class GeminiFormat(_CandidateReader):
    """Sans-IO: Gemini ``GenerateContentResponse`` events in, normalized events out (see the
    module docstring).

    :param key: the content key stamped on every keyed event.
    :param strict: raise :class:`~fluxstream.errors.FrameDecodeError` on a data frame that is
        not a JSON object, instead of skipping and counting it.
    :param limits: caps on candidates and tool calls (:class:`~fluxstream._limits.StreamLimits`).
    """

    __slots__ = ("_blocked", "_errored", "_raw", "_usage_dict", "_usage_frame", "_usage_sent",
                 "_usage_typed")
    #: The last usage snapshot's dict (see :attr:`_usage`), unless it is still only
    #: ``_usage_frame``: the frame whose ``usageMetadata`` it is, its dict not built yet.
    _usage_dict: dict[str, Any] | None
    _usage_frame: str | None
    #: The snapshot as a typed QuickUsage, when the fast path decoded it (the fast path
    #: compares the next one with it; ``None``: it compares the dicts, once).
    _usage_typed: QuickUsage | None

    @classmethod
    def claims(cls, event: str, payload: Mapping[str, Any] | None) -> Claim:
        """A ``GenerateContentResponse``'s own keys (:func:`is_gemini`): likely Gemini's,
        surer than any untyped payload (Chat Completions' weak claim)."""
        return Claim.LIKELY if payload is not None and is_gemini(payload) else Claim.NO

    reply_shape = "a GenerateContentResponse, with 'candidates' or 'promptFeedback'"

    @classmethod
    def claims_body(cls, body: Mapping[str, Any]) -> Claim:
        return Claim.LIKELY if is_gemini(body) else Claim.NO

    @classmethod
    def claims_state(cls, state: Mapping[str, Any], sequence: int | None) -> Claim:
        """The wire state :meth:`resume_state` writes (its ``candidates`` and ``usage_sent``)."""
        return (Claim.LIKELY if isinstance(state.get("candidates"), Mapping)
                and "usage_sent" in state else Claim.NO)

    def __init__(
        self, key: str, *, strict: bool = False, limits: StreamLimits = DEFAULT_STREAM_LIMITS
    ) -> None:
        super().__init__(key, strict, limits)
        self._errored = False
        self.reset()

    # ------------------------------------------------------------------ the usage kept

    @property
    def _usage(self) -> dict[str, Any] | None:
        """The last usage snapshot, as the general path keeps it. The fast path, which reads
        a snapshot only as a typed :class:`QuickUsage`, keeps the frame it came in instead,
        and its dict is built from that frame when first read here (the snapshot grows on
        every event, and is read only when delivered or saved)."""
        frame = self._usage_frame
        if frame is not None:
            self._usage_frame = None
            kept: dict[str, Any] = _fast_loads(frame)["usageMetadata"]
            self._usage_dict = kept
        return self._usage_dict

    @_usage.setter
    def _usage(self, value: dict[str, Any] | None) -> None:
        self._usage_dict = value
        self._usage_frame = None
        self._usage_typed = None

    # ------------------------------------------------------------------ resume hooks

    def reset(self) -> None:
        """Forget the generation (a restart begins at offset 0 again)."""
        super().reset()
        self._cands = {}
        self._holding = 0
        self._kept = 0
        self._blocked = False
        #: Whether the last usage snapshot (:attr:`_usage`) was delivered (``None``: none
        #: came yet).
        self._usage = None
        self._usage_sent: bool | None = None
        self._raw = _RawObject()

    def restore(self, offsets: dict[str, Any], calls: dict[int, dict[int, tuple[Any, Any]]],
                finishes: dict[int, str | None]) -> None:
        """Continue offsets, finish reasons and tool-call identity from a resumed reply."""
        for key, counts in offsets.items():
            index = int(key)
            st = self._cands.setdefault(index, _Candidate())
            st.text = int(counts.get("text", 0))
            st.reasoning = int(counts.get("reasoning", 0))
            st.finish = finishes.get(index)
            for call_key, length in (counts.get("tool_calls") or {}).items():
                number = int(call_key)
                call = st.calls[number] = _Call()
                call.id, call.name = calls.get(index, {}).get(number, (None, None))
                call.length = int(length)

    def shift_text(self, choice: int, by: int) -> None:
        """Un-count ``by`` code points of a candidate's text (an echoed overlap that was cut)."""
        st = self._cands.get(choice)
        if st is not None:
            st.text -= by

    def new_connection(self) -> None:
        """A continuation streams on a new connection: lines of a raw object begun on the old
        one belong to nothing now."""
        self._raw = _RawObject()

    def resume_state(self) -> dict[str, Any]:
        """What a resume token carries beyond the reply: per candidate the thought signatures
        kept so far and the call whose arguments are streaming (its pieces' value and text),
        the last usage, whether the prompt was blocked, and the surrogate halves held."""
        candidates: dict[str, Any] = {}
        held: list[list[Any]] = []
        for index, st in self._cands.items():
            entry: dict[str, Any] = {"signatures": st.signatures}
            if st.open is not None:
                call = st.calls[st.open]
                entry["open"] = st.open
                if call.pieces is not None:
                    entry["pieces"] = pieces_state(call.pieces)
            candidates[str(index)] = entry
            held += [[index, channel, ord(half)] for channel, half in (st.held or {}).items()]
        return {"candidates": candidates, "usage": self._usage,
                "usage_sent": self._usage_sent is not False, "blocked": self._blocked,
                "held": held}

    def restore_state(self, state: Any) -> None:
        """Take over :meth:`resume_state` from a token; entries that are not what it writes
        are left out (a token is data from outside: it cannot make the format crash)."""
        if not isinstance(state, Mapping):
            return
        candidates = state.get("candidates")
        for key, entry in (candidates.items() if isinstance(candidates, Mapping) else ()):
            st = self._cands.get(int(key)) if isinstance(key, str) and key.isdecimal() else None
            if st is None or not isinstance(entry, Mapping):
                continue
            signatures = _count(entry.get("signatures"))
            st.signatures = signatures or 0
            number = entry.get("open")
            if type(number) is int and number in st.calls:
                st.open = number
                st.calls[number].pieces = restored_pieces(entry.get("pieces"))
        usage = state.get("usage")
        self._usage = dict(usage) if isinstance(usage, Mapping) else None
        self._usage_sent = None if self._usage is None else state.get("usage_sent") is not False
        self._blocked = state.get("blocked") is True
        for item in state.get("held") or ():
            if not (isinstance(item, list) and len(item) == 3):
                continue
            index, channel, unit = item
            st = self._cands.get(index) if type(index) is int else None
            if st is None or channel not in ("text", "reasoning") or type(unit) is not int:
                continue
            if 0xD800 <= unit <= 0xDBFF:
                if st.held is None:
                    st.held = {}
                if channel not in st.held:
                    self._holding += 1
                st.held[channel] = chr(unit)

    # ------------------------------------------------------------------ frames

    def feed(self, sse: ServerSentEvent, *, at_eof: bool = False) -> list[Event]:
        """One SSE event. ``at_eof``: flushed by the end of the bytes, so a payload that does
        not parse was cut by the connection and is dropped silently."""
        if self.done:
            return []
        data = sse.data
        if data[:1] != "{":
            stripped = data.strip()
            if not stripped:
                return []  # an empty data frame: a keep-alive
            if stripped == "[DONE]":
                # Never sent by Gemini; proxies and test harnesses append it.
                out: list[Event] = []
                self._send_usage(out)
                self._flush_all(out)
                self.done = True
                self.done_reason = "sentinel"
                return out
        if crowded(data):
            return self.bad_frame(data, "more JSON objects than an event of its size holds",
                                   at_eof)
        scan = self._holding > 0
        try:
            obj = _loads(data)
        except ValueError as exc:
            obj = fallback_loads(data)  # lone surrogate halves: json.loads keeps them
            if obj is None:
                if sse.event == "error" and not at_eof:
                    self._errored = True  # a proxy's plain-text error
                    return [ErrorEvent(fix_surrogates(data), None, None, None, data)]
                return self.bad_frame(data, f"invalid JSON: {exc}", at_eof)
            scan = True
        if obj.__class__ is not dict:
            return self.bad_frame(data, "not a JSON object", False)
        return self._response(obj, scan)

    #: The decoder of the usual events (``None``: every frame through the general path).
    quick_decoder: ClassVar[msgspec.json.Decoder[QuickResponse] | None] = QUICK_DECODER

    def feed_many(self, sses: list[ServerSentEvent], out: list[Event]) -> None:
        """:meth:`feed` each of ``sses`` in order, appending to ``out`` (so that when one
        raises, ``out`` holds the events of those before it).

        Most events of a stream are alike: one known candidate whose parts are text (or one
        piece extending the string argument being streamed), no finish reason, error or
        block, a usage snapshot after the first, no id or model still to take. Those are
        decoded by :attr:`quick_decoder` into typed structs (:mod:`._gemini_quick`) and
        mapped by :meth:`_quick`, the same steps :meth:`_response` takes for them. Anything
        the typed decoder refuses, and anything :meth:`_quick` declines, takes the general
        path: decoded to dicts by msgspec and mapped by :meth:`_response`, or, when that
        decoder refuses it too (or the frame is not an object, might nest deeper than
        ``from_json`` allows, a surrogate half is held, the stream is done), through
        :meth:`feed` itself. The events, offsets, state and errors are the same either way:
        held equal to the general path by
        ``tests/formats/test_gemini_quick.py::test_built_streams_map_alike`` (chunks built
        around the typed path's edges; there ``feed_many`` against :meth:`feed` too) and, on
        every recorded stream, by
        ``tests/formats/test_fast_paths.py::test_fast_paths_equal_the_general_path``; that the
        typed path is taken, by ``test_gemini_quick.py::test_the_fast_path_is_taken``."""
        typed = self.quick_decoder
        decode = typed.decode if typed is not None else None
        for sse in sses:
            data = sse.data
            if (
                self.done
                or self._holding
                or data[:1] != "{"
                or len(data) > BIG_FRAME
                or (len(data) > _SHALLOW and data.count("{") + data.count("[") > _MAX_DEPTH)
            ):
                out += self.feed(sse)
                continue
            if decode is not None:
                try:
                    quick = decode(data)
                except ValueError:
                    pass  # not the usual event: the general path decides
                else:
                    if self._quick(quick, data, out):
                        continue
            try:
                obj = _fast_loads(data)
            except ValueError:
                out += self.feed(sse)  # from_json and the fallback decide (skip, strict ...)
                continue
            if obj.__class__ is not dict:
                out += self.feed(sse)
            else:
                out += self._response(obj, False)

    def _quick(self, obj: QuickResponse, data: str, out: list[Event]) -> bool:
        """Map the usual event (see :meth:`feed_many`); ``False``, nothing done, otherwise:
        everything that could decline is checked before anything changes."""
        cands = obj.candidates
        if (cands.__class__ is not list or len(cands) != 1
                or (self.id is None and obj.responseId)
                or (self.model is None and obj.modelVersion)):
            return False
        cand = cands[0]
        index = cand.index
        st = self._cands.get(index)
        content = cand.content
        if (st is None or content is UNSET or not 0 <= index < _MAX_INDEX
                or (cand.finishReason and cand.finishReason != st.finish)):
            return False
        parts = content.parts
        if parts is UNSET:
            return False
        usage = obj.usageMetadata
        grew = False
        decoded: dict[str, Any] | None = None
        if isinstance(usage, QuickUsage) and usage != NO_USAGE:
            if self._usage_sent is None:
                return False  # the first snapshot is delivered at once: the general path
            known = self._usage_typed
            if known is None:  # the snapshot kept came from the general path: compare dicts
                decoded = _fast_loads(data)["usageMetadata"]
            elif usage != known:
                grew = True
        if not self._quick_parts(index, st, parts, out):
            return False
        # The snapshot, as _note_usage takes it (nothing to deliver: it is not the first).
        if grew:
            self._usage_frame, self._usage_dict = data, None  # its dict built when read
            self._usage_typed = usage if isinstance(usage, QuickUsage) else None
            self._usage_sent = False
        elif decoded is not None:
            if decoded != self._usage:
                self._usage = decoded
                self._usage_sent = False
            self._usage_typed = usage if isinstance(usage, QuickUsage) else None
        return True

    def feed_lines(self, lines: list[str]) -> list[Event]:
        """Lines the SSE decoder read outside any field it knows (no ``data:``): a JSON object
        sent raw, usually an error body after the stream began, gathered until its braces
        balance. Anything else is skipped and counted."""
        out: list[Event] = []
        raw = self._raw
        for line in lines:
            if not raw.lines and not line.strip():
                continue
            if raw.size + len(line) > MAX_RAW_CHARS:
                raw.take()
                out += self._skip_text(line, "raw JSON outside data: lines over the limit")
                continue
            text = raw.add(line)
            if text is not None:
                out += self._raw_object(text, at_eof=False)
        return out

    def _raw_object(self, text: str, *, at_eof: bool) -> list[Event]:
        try:
            obj = _loads(text)
        except ValueError as exc:
            obj = fallback_loads(text)
            if obj is None:
                if at_eof:
                    self.cut = True
                    return []
                return self._skip_text(text, f"lines outside data: that are not JSON: {exc}")
        if obj.__class__ is list and len(obj) == 1:
            obj = obj[0]  # the JSON-array form of an error (``[{"error": ...}]``)
        if obj.__class__ is not dict:
            return self._skip_text(text, "lines outside data: that are not a JSON object")
        return self._response(obj, True)

    def feed_chunk(self, obj: Mapping[str, Any]) -> list[Event]:
        """One response another SDK already decoded: the wire's camelCase keys or
        google-genai's ``model_dump()`` (snake_case keys, enum members)."""
        if self.done:
            return []
        shaped = _wire_shape(obj)
        return self._response(shaped, True)

    def feed_completion(self, obj: Mapping[str, Any]) -> list[Event]:
        """A whole non-streaming ``GenerateContentResponse`` (or error body). Marks the format
        done: a complete body is as final as an end marker."""
        shaped = _wire_shape(obj)  # google-genai's snake_case keys, as the wire names them
        if not self.reads_body(shaped):
            return self.no_reply(obj)
        out = self._response(shaped, True)
        self._send_usage(out)
        self._flush_all(out)
        self.done = True
        self.done_reason = "completion"
        return final_usage(out)

    def body_ended(self, clean: bool) -> list[Event]:
        """The bytes ended (the parser calls this; ``clean``: without a transport error). With
        no end marker in Gemini's streams, the reply is complete (``done``) when every
        candidate had a ``finishReason`` or the prompt was blocked, and nothing was cut or
        failed. The last usage snapshot is delivered however the body ended."""
        out: list[Event] = []
        if self._raw.lines:
            out += self._raw_object(self._raw.take(), at_eof=True)
        self._send_usage(out)
        if self.done or self.cut or self._errored or not clean:
            return out
        cands = self._cands
        if self._blocked:
            reason = "eof after blockReason"
        elif cands and all(st.finish is not None for st in cands.values()):
            reason = "eof after finishReason"
        else:
            return out
        self._flush_all(out)
        self.done = True
        self.done_reason = reason
        return out

    # ------------------------------------------------------------------ responses

    def _response(self, obj: dict[str, Any], scan: bool) -> list[Event]:
        out: list[Event] = []
        error = obj.get("error")
        if error is not None:
            if scan:
                error, obj = clean_tree(error), clean_tree(obj)
            out.append(self._error(error, obj))
            return out
        if self.id is None:
            rid = obj.get("responseId")
            if rid and rid.__class__ is str:
                self.id = fix_surrogates(rid) if scan else rid
        if self.model is None:
            model = obj.get("modelVersion")
            if model and model.__class__ is str:
                self.model = fix_surrogates(model) if scan else model
        cands = obj.get("candidates")
        if cands is not None:
            if cands.__class__ is not list:
                return self._skip(obj, "candidates is not a list")
            for cand in cands:
                if cand.__class__ is dict:
                    self._candidate(cand, scan, out)
                else:
                    out += self._skip(cand, "a candidate that is not an object")
        elif "choices" in obj or isinstance(obj.get("type"), str):
            return self._skip(obj, "a frame of another format")
        feedback = obj.get("promptFeedback")
        if feedback.__class__ is dict and not self._blocked:
            block = feedback.get("blockReason")
            if block:
                self._blocked = True
                block = fix_surrogates(_opt_str(block) or "")
                detail = feedback.get("blockReasonMessage")
                message = f"prompt blocked: {block}"
                if detail and isinstance(detail, str):
                    message += f" ({fix_surrogates(detail)})"
                raw = clean_tree(obj) if scan else obj
                out.append(ErrorEvent(message, block, "prompt_blocked", None, raw))
                self._settled = True
        usage = obj.get("usageMetadata")
        if usage is not None:
            self._note_usage(usage, obj, scan, out)
        if self._settled:  # a candidate finished or the prompt was blocked: final numbers
            self._settled = False
            self._send_usage(out)
        return out

    def _error(self, error: object, raw: object) -> ErrorEvent:
        """``{"error": {"code", "message", "status"}}``: ``code`` the HTTP-like number (as a
        string, as every format's codes are), ``error_type`` the ``status`` name."""
        self._errored = True
        if isinstance(error, Mapping):
            message = error.get("message")
            if not isinstance(message, str) or not message:
                message = compact(dict(error)) if message is None else str(message)
            return ErrorEvent(message, _opt_str(error.get("code")),
                              _opt_str(error.get("status")), None, raw)
        return ErrorEvent(str(error) or "error", None, None, None, raw)

    def _note_usage(self, usage: object, obj: Mapping[str, Any], scan: bool,
                    out: list[Event]) -> None:
        """A snapshot of the usage so far. It rides on every event and grows; it is delivered
        when it first comes, when a candidate finishes and when the body ends (validating a
        snapshot on every event cost as much as the rest of the event; the last one wins)."""
        if usage.__class__ is not dict:
            out += self._skip(obj, "usageMetadata is not an object")
            return
        if not usage or usage == self._usage:
            return
        raw: dict[str, Any] = usage
        if len(raw) > MAX_USAGE_FIELDS:
            raw = dict(itertools.islice(raw.items(), MAX_USAGE_FIELDS))
        self._usage = clean_tree(raw) if scan else raw
        first = self._usage_sent is None
        self._usage_sent = False
        if first:
            self._send_usage(out)

    def _send_usage(self, out: list[Event]) -> None:
        """Deliver the last snapshot if it was not yet: final once every candidate finished
        or the prompt was blocked (before that it counts the output so far, not the
        reply's)."""
        if self._usage_sent is not False or self._usage is None:
            return
        self._usage_sent = True
        # Checked and validated once: what is kept fits, so its Usage is gemini_usage's.
        clean, dropped, checked = checked_usage_model(self._usage)
        if dropped:
            out += self._skip(self._usage, USAGE_DROPPED)
        cands = self._cands.values()
        final = self._blocked or (
            bool(cands) and all(st.finish is not None for st in cands))
        out.append(UsageUpdate(_filled_usage(clean, checked), final))
