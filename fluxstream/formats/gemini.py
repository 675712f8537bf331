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
from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec
import pydantic_core
from msgspec import UNSET

from .._events import ErrorEvent, Event
from .._limits import DEFAULT_STREAM_LIMITS, StreamLimits
from ..sse import ServerSentEvent
from ._base import BIG_FRAME, compact, crowded
from ._contract import Claim
from ._gemini_args import pieces_state, restored_pieces
from ._gemini_candidates import MAX_INDEX, STOPS, Call, Candidate, count, opt_str
from ._gemini_quick import DICT_DECODER, NO_USAGE, QUICK_DECODER, QuickResponse, QuickUsage
from ._gemini_raw import MAX_RAW_CHARS, RawObject
from ._gemini_usage import UsageSnapshot, gemini_usage
from ._surrogates import clean_tree, fallback_loads, fix_surrogates
from ._usage_fields import final_usage

__all__ = ["STOPS", "GeminiFormat", "gemini_usage", "is_gemini"]

_loads = pydantic_core.from_json
# The decoder of the general path in feed_many (as in the Chat Completions format, and for the
# same reasons): msgspec's, faster than from_json and the same value whenever it succeeds
# (tests/formats/test_fast_paths.py::test_the_fast_decoder_gives_from_json_values_or_refuses);
# anything it refuses, and any frame that might nest deeper than from_json allows
# (quick_candidate), goes to feed.
_fast_loads = DICT_DECODER.decode
_MAX_DEPTH = 200
_SHALLOW = 2 * _MAX_DEPTH + 1
#: Keys that mark a payload as Gemini's (see :func:`is_gemini`).
_MARKS = ("candidates", "promptFeedback", "usageMetadata", "modelVersion")


def is_gemini(obj: Mapping[str, Any]) -> bool:
    """A payload is a ``GenerateContentResponse`` (the detection rule of ``auto``): it has
    ``candidates``, ``promptFeedback``, ``usageMetadata`` or ``modelVersion``, and no
    ``type`` or ``choices`` of the other formats."""
    return "type" not in obj and "choices" not in obj and any(k in obj for k in _MARKS)


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


class GeminiFormat(UsageSnapshot):
    """Sans-IO: Gemini ``GenerateContentResponse`` events in, normalized events out (see the
    module docstring).

    :param key: the content key stamped on every keyed event.
    :param strict: raise :class:`~fluxstream.errors.FrameDecodeError` on a data frame that is
        not a JSON object, instead of skipping and counting it.
    :param limits: caps on candidates and tool calls (:class:`~fluxstream._limits.StreamLimits`).
    """

    __slots__ = ("_errored", "_raw")

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

    # ------------------------------------------------------------------ resume hooks

    def reset(self) -> None:
        """Forget the generation (a restart begins at offset 0 again)."""
        super().reset()
        self._cands = {}
        self._holding = 0
        self._kept = 0
        self._blocked = False
        self._usage = None
        self._usage_sent = None
        self._raw = RawObject()

    def restore(self, offsets: dict[str, Any], calls: dict[int, dict[int, tuple[Any, Any]]],
                finishes: dict[int, str | None]) -> None:
        """Continue offsets, finish reasons and tool-call identity from a resumed reply."""
        for key, counts in offsets.items():
            index = int(key)
            st = self._cands.setdefault(index, Candidate())
            st.text = int(counts.get("text", 0))
            st.reasoning = int(counts.get("reasoning", 0))
            st.finish = finishes.get(index)
            for call_key, length in (counts.get("tool_calls") or {}).items():
                number = int(call_key)
                call = st.calls[number] = Call()
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
        self._raw = RawObject()

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
            signatures = count(entry.get("signatures"))
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
        if (st is None or content is UNSET or not 0 <= index < MAX_INDEX
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
                block = fix_surrogates(opt_str(block) or "")
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
            return ErrorEvent(message, opt_str(error.get("code")),
                              opt_str(error.get("status")), None, raw)
        return ErrorEvent(str(error) or "error", None, None, None, raw)
