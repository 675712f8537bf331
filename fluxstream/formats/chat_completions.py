"""The OpenAI Chat Completions stream format (and the many servers that imitate it).

``ChatCompletionsFormat`` turns SSE events, or chunk objects another SDK already decoded, into
normalized :mod:`fluxstream._events`. It keeps only the small per-choice state that the events
themselves need (offsets, tool-call identity, the last finish reason); the text itself is
assembled by :mod:`fluxstream._assembly`.

Why it reads dicts and not :mod:`fluxstream._wire` models: one chunk is decoded per SSE event,
and ``pydantic_core.from_json`` plus a few ``dict.get`` calls is several times cheaper than
validating into models (numbers in ``benchmarks/README.md``). Every access is defensive
(``null``, missing keys, wrong types) because providers disagree about nearly everything; the
quirks handled here are listed in ``/shared/fixtures/QUIRKS.md`` and each has a test.

Rules, in short:

* only non-empty strings are text; ``role`` (once, on every chunk, ``""`` or never) is ignored;
* choices are keyed by ``choices[].index`` (array position only when the index is missing);
* reasoning comes from ``reasoning_content``, else ``reasoning``; Mistral's list content gives
  text parts to text and ``thinking`` parts to reasoning;
* a finish reason is read wherever it appears; ``null`` never clears it; ``Finish`` is emitted
  when it first arrives and again only if it changes;
* tool calls are keyed by their ``index``; a fragment without one opens a new call when it
  carries a non-empty id different from the current call's id (or, having no id, a name while
  the current call already has a name), else it continues the most recently touched call;
  ``id``/``name`` are taken from the first non-empty value; an ``arguments`` object is
  serialised to compact JSON;
* an error payload (``{"error": ...}``, ``{"object": "error", ...}`` or ``event: error``)
  becomes an :class:`~fluxstream._events.ErrorEvent`; the stream goes on to its end;
* ``[DONE]`` (after trimming whitespace) is the sentinel, never JSON; nothing after it counts;
* ``choices`` that is not a list makes the frame a skipped, counted one (strict: an error);
* lone UTF-16 surrogate halves: servers that cut text by UTF-16 unit (Node-based ones) send a
  pair's high half (``"\\ud83d"``) at the end of one chunk and the low half at the start of the
  next. ``pydantic_core.from_json`` rejects such a payload, so only when it fails is the payload
  decoded again with ``json.loads`` (which keeps lone halves; the hot path stays the fast
  decoder; the helpers, for every format, are in :mod:`fluxstream.formats._surrogates`).
  Per choice and channel (text, reasoning, refusal, each tool call's arguments) a high half
  at the end of a fragment is held back and delivered in front of the next fragment, joined
  with its low half into one code point (offsets count it once). A half that finds no
  partner becomes U+FFFD; a held high half still open when its choice finishes or
  the sentinel arrives is delivered as U+FFFD; one still open when the bytes end without the
  sentinel is dropped (the stream is truncated anyway). Delivered text never holds a lone
  surrogate;
* limits (:class:`~fluxstream._limits.StreamLimits`): more distinct choices than
  ``max_choices`` or tool calls in one choice than ``max_tool_calls`` raise
  :class:`~fluxstream.errors.LimitExceededError` before any state is kept for them. Decoding
  itself costs ~250 bytes per JSON object or array (one 16 MiB event of a million
  ``{"index": i}`` choices decodes to ~1.5 GiB), so a frame over ``BIG_FRAME`` characters
  with more objects and arrays than the limits could ever use (four per choice and per tool
  call) is skipped and counted (strict: an error) before it is decoded: the guard every
  format shares (:meth:`~fluxstream.formats._base.FormatBase.refuses_undecoded`, with this
  format's budget; brackets inside strings do not count);
* frames of another format (a ``type`` that another registered format claims for sure, such
  as a Responses or Anthropic Messages event) are skipped and counted: nothing in them is
  this format's (an Anthropic ``message_delta``'s ``usage`` is not Chat Completions usage).
  A typed ``error`` payload is still an error;
* usage that is not an object, and usage fields whose values do not fit their declared types,
  are dropped and counted as a skipped frame (the rest of the usage is kept).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import msgspec
import pydantic_core

from .._events import ErrorEvent, Event, UsageUpdate
from .._limits import DEFAULT_STREAM_LIMITS, StreamLimits
from .._reply import unified_stop
from ..errors import LimitExceededError
from ..sse import ServerSentEvent
from ._base import BIG_FRAME, KEEPALIVES, FormatBase, compact, excerpt, opt_str
from ._choice_state import CHOICE_SLOTS, ChoiceState
from ._contract import FORMATS, Claim
from ._event_makers import finish_event, text_delta, tool_delta
from ._surrogates import clean_tree, fallback_loads, fix_surrogates
from ._usage_fields import final_usage

__all__ = ["ChatCompletionsFormat"]

_loads = pydantic_core.from_json
# The decoder of feed_many: msgspec's, ~35 % faster than from_json on chunks, and tested to
# give exactly from_json's value whenever it succeeds (for every format's decoder:
# tests/formats/test_fast_paths.py::test_the_fast_decoder_gives_from_json_values_or_refuses); on
# anything it rejects (NaN, lone surrogate escapes, numbers out of a float's range, bad
# JSON) the frame goes to feed, whose from_json decides as before. It nests up to ~1,000
# levels where from_json stops at 200, so a frame that might nest deeper than _MAX_DEPTH
# (more than _MAX_DEPTH ``{``/``[``; a frame of at most _SHALLOW characters cannot) goes to
# feed too.
_fast_loads = msgspec.json.Decoder().decode
_MAX_DEPTH = 200
_SHALLOW = 2 * _MAX_DEPTH + 1
_CHAT_OBJECTS = ("chat.completion.chunk", "chat.completion")
# Channels of held surrogate halves: these three, or a tool call's number (an int).
_TEXT, _REASONING, _REFUSAL = "text", "reasoning", "refusal"


class _Choice(ChoiceState):
    """One choice: offsets, calls and held halves (:class:`ChoiceState`), and the finish
    reason last delivered (a ``Finish`` is emitted again only when it changes)."""

    __slots__ = (*CHOICE_SLOTS, "finish")

    def __init__(self) -> None:
        self.clear_choice()
        self.finish: str | None = None


def _dicts(value: object) -> list[dict[str, Any]]:
    """The objects of a list from the wire (anything else in it, or a value that is not a
    list, names nothing)."""
    if value.__class__ is not list:
        return []
    return [item for item in value if isinstance(item, dict)]


class ChatCompletionsFormat(FormatBase):
    """Sans-IO: SSE events / decoded chunks in, normalized events out (see the module
    docstring; the parameters and the state the parser reads are :class:`FormatBase`'s).
    ``new_choices`` holds choice indexes first seen since the list was last cleared, so that a
    choice without any content still exists."""

    __slots__ = ("_choices", "_holding")

    sentinel = "[DONE]"
    crowded_reason = "more JSON objects than the limits allow"

    def __init__(
        self, key: str, *, strict: bool = False, limits: StreamLimits = DEFAULT_STREAM_LIMITS
    ) -> None:
        super().__init__(key, strict=strict, limits=limits)
        # Surrogate halves held back over all choices and channels: while any is held, every
        # fragment is checked (else only fragments of payloads the fast decoder rejected).
        self._holding = 0
        self._choices: dict[int, _Choice] = {}

    # ------------------------------------------------------------------ detection

    @classmethod
    def claims(cls, event: str, payload: Mapping[str, Any] | None) -> Claim:
        """The only format whose events have no ``type``: a payload with ``choices`` or a
        ``chat.completion[.chunk]`` object, or any other non-empty object without a
        ``type`` that is not an error or a keep-alive (those name no format). A weak claim:
        an ``event:`` line that names another format's event outranks it."""
        if payload is None:
            return Claim.NO
        if "choices" in payload or payload.get("object") in _CHAT_OBJECTS:
            return Claim.WEAK
        if (
            "type" not in payload
            and payload
            and event not in KEEPALIVES
            and event != "error"
            and "error" not in payload
            and payload.get("object") != "error"
        ):
            return Claim.WEAK
        return Claim.NO

    reply_shape = "a chat.completion object, with 'choices'"

    @classmethod
    def claims_body(cls, body: Mapping[str, Any]) -> Claim:
        """A ``chat.completion`` body (``choices``, or the ``object`` naming it or an error)
        for sure; any other body without a ``type`` weakly (an OpenAI-style error, a
        proxy's ``{"detail": ...}``: the untyped shape is this format's)."""
        if "choices" in body or body.get("object") in ("chat.completion", "error"):
            return Claim.SURE
        return Claim.WEAK if not isinstance(body.get("type"), str) else Claim.NO

    def most_objects(self, size: int) -> int:
        """JSON objects and arrays a frame within the limits can hold (four per choice and
        per tool call): more, and the frame is refused before it is decoded."""
        limits = self.limits
        return 4 * limits.max_choices * (limits.max_tool_calls + 4)

    # ------------------------------------------------------------------ resume hooks

    def reset(self) -> None:
        """Forget per-choice state (a restarted generation starts at offset 0 again)."""
        super().reset()
        self._choices = {}
        self._holding = 0

    def restore(self, offsets: dict[str, Any], calls: dict[int, dict[int, tuple[Any, Any]]],
                finishes: dict[int, str | None]) -> None:
        """Continue offsets (and tool-call identity) from a resumed reply: ``offsets`` as
        :meth:`fluxstream._assembly.ReplyAssembler.offsets` gives them, ``calls`` per choice
        ``{index: (id, name)}``, ``finishes`` the finish reasons so far."""
        for key, counts in offsets.items():
            index = int(key)
            st = self._choices.setdefault(index, _Choice())
            st.restore_offsets(counts, calls.get(index, {}))
            st.finish = finishes.get(index)

    def shift_text(self, choice: int, by: int) -> None:
        """Un-count ``by`` code points of a choice's text (an echoed overlap that was cut)."""
        st = self._choices.get(choice)
        if st is not None:
            st.text -= by

    # ------------------------------------------------------------------ SSE events

    def feed(self, sse: ServerSentEvent, *, at_eof: bool = False) -> list[Event]:
        """One SSE event. ``at_eof``: the event was flushed by the end of the bytes, so a
        payload that does not parse was cut by the connection and is dropped silently."""
        if self.done:
            return []
        data = sse.data
        if sse.event == "error":
            return self._error_event(data)
        if self.refuses_undecoded(data):
            return self.bad_frame(data, self.crowded_reason, at_eof)
        if data[:1] == "{":
            try:
                obj = _loads(data)
            except ValueError as exc:
                obj = fallback_loads(data)
                if obj.__class__ is not dict:
                    return self.bad_frame(data, f"invalid JSON: {exc}", at_eof)
                return self._chunk(obj, True)
            return self._chunk(obj, self._holding > 0)
        stripped = data.strip()
        if stripped == "[DONE]":
            self.done = True
            self.done_reason = "sentinel"
            return self._flush_all() if self._holding else []
        if not stripped:
            return []  # an empty data frame: a keep-alive, not an error
        scan = self._holding > 0
        try:
            obj = _loads(data)
        except ValueError as exc:
            obj = fallback_loads(data)
            if obj is None:
                return self.bad_frame(data, f"invalid JSON: {exc}", at_eof)
            scan = True
        if not isinstance(obj, dict):
            return self.bad_frame(data, "not a JSON object", False)
        return self._chunk(obj, scan)

    def feed_many(self, sses: list[ServerSentEvent], out: list[Event]) -> None:
        """:meth:`feed` each of ``sses`` in order, appending the events to ``out`` (so that
        when one raises, ``out`` holds the events of those before it).

        Most chunks of a stream are alike: one choice already seen, a delta of non-empty
        ``content`` and nothing else, no finish reason, usage or error, no surrogate half
        held, id and model known. Those are mapped here without the per-event calls of
        :meth:`feed` and :meth:`_chunk` (the same steps, as :meth:`_chunk` takes them for such
        a chunk: one ``TextDelta`` at the choice's text offset). Any other object the fast
        decoder gives goes to :meth:`_chunk`, as :meth:`feed` would send it; every other
        event (not an object, refused by the fast decoder, a surrogate half held, ``event:
        error``, the sentinel, a frame that might nest deeper than ``from_json`` allows)
        goes through :meth:`feed` itself.

        Held equal to :meth:`feed` one event at a time (events, state, errors) by
        ``tests/formats/test_chat_feed_many.py::test_feed_many_equals_feed_one_by_one`` (chunks
        built around the inline path's edges) and, on every recorded stream, by
        ``tests/formats/test_fast_paths.py::test_fast_paths_equal_the_general_path``.
        """
        loads = _fast_loads
        states = self._choices
        key = self.key
        make_text = text_delta
        append = out.append
        for sse in sses:
            data = sse.data
            if (
                self._holding
                or self.done
                or sse.event == "error"
                or len(data) > BIG_FRAME
                or data[:1] != "{"
            ):
                out += self.feed(sse)
                continue
            if len(data) > _SHALLOW and data.count("{") + data.count("[") > _MAX_DEPTH:
                out += self.feed(sse)  # could nest deeper than from_json allows
                continue
            try:
                obj = loads(data)
            except ValueError:
                out += self.feed(sse)  # from_json and the fallback decide (skip, strict...)
                continue
            choices = obj.get("choices")
            if (
                choices.__class__ is list
                and len(choices) == 1
                and self.model is not None
                and self.id is not None
            ):
                choice = choices[0]
                if choice.__class__ is dict:
                    delta = choice.get("delta")
                    index = choice.get("index")
                    if delta.__class__ is dict and len(delta) == 1 and index.__class__ is int:
                        content = delta.get("content")
                        st = states.get(index)
                        if (
                            content
                            and content.__class__ is str
                            and st is not None
                            and choice.get("finish_reason") is None
                            and not obj.get("usage")
                            and not obj.get("error")
                            and obj.get("object") != "error"
                        ):
                            offset = st.text
                            append(make_text(key, index, offset, content))
                            st.text = offset + len(content)
                            continue
            out += self._chunk(obj, False)

    def _error_event(self, data: str) -> list[Event]:
        payload: object = data
        with contextlib.suppress(ValueError):
            payload = _loads(data)
        if isinstance(payload, dict):
            if "error" in payload or payload.get("object") == "error":
                return self.feed_chunk(payload)
            return [_error_of(payload, payload)]
        return [ErrorEvent(data or "error event", None, None, None, data)]

    # ------------------------------------------------------------------ chunks

    def feed_chunk(self, obj: Mapping[str, Any]) -> list[Event]:
        """One decoded chunk (a dict, as ``json.loads`` gives it: its strings may hold lone
        surrogate halves, so every fragment is checked for them)."""
        return self._chunk(obj, True)

    def _chunk(self, obj: Mapping[str, Any], scan: bool) -> list[Event]:
        """``scan``: fragments may hold surrogate halves (a payload the fast decoder rejected,
        a chunk decoded elsewhere, or a half held from an earlier fragment)."""
        if self.done:
            return []
        choices = obj.get("choices")
        if not choices:
            kind = obj.get("type")
            if kind.__class__ is str:
                for name, cls in FORMATS.items():
                    if cls.claims("", obj) is Claim.SURE:
                        return self.skip(f"a {name} event ({kind!r})", obj)
                if kind == "error" and not obj.get("error"):
                    # A flat typed error (``{"type": "error", "message": ...}``, as bridges
                    # send it): the reply's error, like ``{"error": ...}``.
                    return [_error_of(clean_tree(obj) if scan else obj, obj)]
        out: list[Event] = []
        if self.id is None:
            rid = obj.get("id")
            if rid and isinstance(rid, str):
                self.id = fix_surrogates(rid) if scan else rid
        if self.model is None:
            model = obj.get("model")
            if model and isinstance(model, str):
                self.model = fix_surrogates(model) if scan else model
        if choices:
            if choices.__class__ is not list:
                return self.bad_frame(excerpt(obj), "choices is not a list", False)
            key = self.key
            states = self._choices
            position = 0
            for choice in choices:
                if not isinstance(choice, dict):
                    position += 1
                    continue
                index = choice.get("index")
                if index.__class__ is not int:
                    index = position
                position += 1
                st = states.get(index)
                if st is None:
                    if len(states) >= self.limits.max_choices:
                        raise LimitExceededError(
                            "max_choices", self.limits.max_choices, len(states) + 1
                        )
                    st = states[index] = _Choice()  # after the limit: nothing kept past it
                    self.new_choices.append(index)
                delta = choice.get("delta")
                if delta and delta.__class__ is dict:
                    content = delta.get("content")
                    if content.__class__ is str:
                        if scan and content:
                            content = self._unpaired(st, _TEXT, content)
                        if content:
                            out.append(text_delta(key, index, st.text, content))
                            st.text += len(content)
                    elif content:
                        self._parts(content, index, st, out, scan)
                    if len(delta) > 1 or content is None:
                        self._other_channels(delta, index, st, out, scan)
                reason = choice.get("finish_reason")
                if reason is not None and reason != st.finish:
                    reason = opt_str(reason)
                    if scan and reason:
                        reason = fix_surrogates(reason)
                    if reason:
                        if st.held:
                            self._flush(index, st, out)
                        st.finish = reason
                        stop = unified_stop(reason, tool_calls=bool(st.calls))
                        out.append(finish_event(key, index, reason, stop))
        usage = obj.get("usage")
        if usage is not None:
            self._usage(usage, obj, scan, out)
        error = obj.get("error")
        if error:
            if scan:
                error, obj = clean_tree(error), clean_tree(obj)
            out.append(_error_of(error, obj))
        elif obj.get("object") == "error":
            if scan:
                obj = clean_tree(obj)
            out.append(_error_of(obj, obj))
        return out

    def _usage(self, usage: object, obj: Mapping[str, Any], scan: bool, out: list[Event]) -> None:
        """A chunk's usage; what does not fit is dropped and counted (see the module
        docstring): a ``Usage`` holding it would not validate back (relay, resume tokens)."""
        if usage.__class__ is dict:
            checked = self.usage_model_of(clean_tree(usage) if scan else usage, obj, out)
            if checked is not None:
                # Final once every choice finished (OpenAI's trailing usage chunk, llama.cpp's
                # on the finishing chunk); a running total (vLLM's, Perplexity's on every
                # chunk) is a snapshot until then.
                states = self._choices.values()
                final = bool(states) and all(st.finish is not None for st in states)
                out.append(UsageUpdate(checked[1], final))
        elif usage:
            out += self.skip("usage is not an object", obj)

    def _other_channels(
        self, delta: dict[str, Any], index: int, st: _Choice, out: list[Event], scan: bool
    ) -> None:
        """Reasoning, refusal and tool calls (skipped for the common content-only delta)."""
        reasoning = delta.get("reasoning_content")
        if not reasoning or reasoning.__class__ is not str:
            reasoning = delta.get("reasoning")
        if reasoning and reasoning.__class__ is str:
            self._say(st, _REASONING, index, reasoning, out, scan)
        refusal = delta.get("refusal")
        if refusal and refusal.__class__ is str:
            self._say(st, _REFUSAL, index, refusal, out, scan)
        tool_calls = delta.get("tool_calls")
        if tool_calls:
            self._tool_calls(tool_calls, index, st, out, scan)

    # ------------------------------------------------------------------ surrogate halves

    def _unpaired(self, st: _Choice, channel: str | int, text: str) -> str:
        """``text`` joined with the channel's held halves (:meth:`ChoiceState.join`), the
        count of halves held over all choices kept up to date. May return ``""``."""
        held = st.held
        before = len(held) if held else 0
        text = st.join(channel, text)
        held = st.held
        self._holding += (len(held) if held else 0) - before
        return text

    def _flush(self, index: int, st: _Choice, out: list[Event]) -> None:
        """Deliver the choice's held high halves as U+FFFD (no low half will come)."""
        held = st.held
        self._holding -= len(held) if held else 0
        st.flush_held(self.key, index, out)

    def _flush_all(self) -> list[Event]:
        out: list[Event] = []
        for index, st in self._choices.items():
            if st.held:
                self._flush(index, st, out)
        return out

    def _say(self, st: _Choice, channel: str, index: int, text: str, out: list[Event],
             scan: bool) -> None:
        """A fragment off the hot path (Mistral list content) on a text channel."""
        if scan:
            text = self._unpaired(st, channel, text)
        if text:
            st.deliver(channel, self.key, index, text, out)

    def _parts(
        self, parts: object, index: int, st: _Choice, out: list[Event], scan: bool
    ) -> None:
        """Mistral list content: ``text`` parts are text, ``thinking`` parts reasoning."""
        for part in _dicts(parts):
            kind = part.get("type")
            if kind == "text":
                text = part.get("text")
                if text and isinstance(text, str):
                    self._say(st, _TEXT, index, text, out, scan)
            elif kind == "thinking":
                thinking = part.get("thinking")
                for piece in [thinking] if isinstance(thinking, str) else _pieces(thinking):
                    text = piece if isinstance(piece, str) else None
                    if isinstance(piece, dict) and piece.get("type", "text") == "text":
                        text = piece.get("text")
                    if text and isinstance(text, str):
                        self._say(st, _REASONING, index, text, out, scan)

    def _tool_calls(
        self, fragments: object, index: int, st: _Choice, out: list[Event], scan: bool
    ) -> None:
        calls = st.calls
        for frag in _dicts(fragments):
            fn = frag.get("function")
            if not isinstance(fn, dict):
                fn = {}
            cid = frag.get("id")
            cid = cid if cid and isinstance(cid, str) else None
            name = fn.get("name")
            name = name if name and isinstance(name, str) else None
            args = fn.get("arguments")
            if args is None:
                args = ""
            elif args.__class__ is not str:
                args = compact(args)
            number = frag.get("index")
            if number.__class__ is not int:
                if cid is None and name is None and not args and not calls:
                    continue  # metadata only (e.g. a Gemini thought signature): no call yet
                number = _resolve(st, cid, name)
            call = calls.get(number)
            fresh = call is None
            if call is None:
                call = st.open_call(number, self.limits, kept=False)
            st.last_call = number
            if scan:
                args = self._unpaired(st, number, args) if args else args
                cid = fix_surrogates(cid) if cid else cid
                name = fix_surrogates(name) if name else name
            new_id = None
            if cid is not None and call.id is None:
                call.id = new_id = cid
            new_name = None
            if name is not None and call.name is None:
                call.name = new_name = name
            if args or fresh or new_id is not None or new_name is not None:
                out.append(
                    tool_delta(self.key, index, number, new_id, new_name, args, call.length)
                )
                call.length += len(args)

    # ------------------------------------------------------------------ whole bodies

    def feed_completion(self, obj: Mapping[str, Any]) -> list[Event]:
        """A non-streaming ``chat.completion`` body: each ``message`` is read as one delta.

        Marks the format done (a complete body is as final as the sentinel).
        """
        if not self.reads_body(obj):
            return self.no_reply(obj)
        events = final_usage(self.feed_chunk(_as_chunk(obj)))
        self.done = True
        self.done_reason = "completion"
        return events + self._flush_all() if self._holding else events


def _pieces(value: object) -> list[Any]:
    """A list from the wire, or nothing."""
    return value if isinstance(value, list) else []


def _as_chunk(body: Mapping[str, Any]) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` body as one chunk: each ``message`` a delta."""
    chunk: dict[str, Any] = {k: v for k, v in body.items() if k != "choices"}
    choices = body.get("choices")
    if isinstance(choices, list):
        converted = []
        for position, choice in enumerate(choices):
            if not isinstance(choice, dict):
                continue
            message = choice.get("message")
            delta = dict(message) if isinstance(message, dict) else {}
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                delta["tool_calls"] = [
                    {"index": i, **c} if isinstance(c, dict) and "index" not in c else c
                    for i, c in enumerate(calls)
                ]
            converted.append({
                "index": choice.get("index", position),
                "delta": delta,
                "finish_reason": choice.get("finish_reason"),
            })
        chunk["choices"] = converted
    return chunk


def _resolve(st: _Choice, cid: str | None, name: str | None) -> int:
    """Index for a fragment that has none (Mistral, Gemini)."""
    calls = st.calls
    current = calls.get(st.last_call) if st.last_call is not None else None
    if current is not None:
        opens = (cid is not None and cid != current.id) or (
            cid is None and name is not None and current.name is not None
        )
        if not opens:
            assert st.last_call is not None
            return st.last_call
    return max(calls) + 1 if calls else 0


def _error_of(error: object, raw: object) -> ErrorEvent:
    """The reply's error from an error object as OpenAI nests it (its ``type`` kept as it
    is, even ``"error"``: that is what the server said), or from anything else as text."""
    if isinstance(error, dict):
        message = error.get("message")
        if not isinstance(message, str) or not message:
            message = compact(error) if message is None else str(message)
        return ErrorEvent(
            message,
            opt_str(error.get("code")),
            opt_str(error.get("type")),
            opt_str(error.get("param")),
            raw,
        )
    return ErrorEvent(str(error), None, None, None, raw)
